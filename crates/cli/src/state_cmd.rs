//! `gpushare state show|rm|mv` and `gpushare import`: reading and editing the
//! recorded state by hand (the rules of `rm` and `mv` are the engine's
//! `gpushare_engine::state_ops`). Every edit takes the store's lock, is refused while an
//! interrupted apply's journal is waiting (finish it with `gpushare apply` first:
//! the journal's plan names the addresses being edited), and commits the state
//! with serial + 1, as apply does. Nothing here calls the cloud except import,
//! which lists the cluster's instances and tags the adopted one with the store id.

use anyhow::{bail, Context};
use gpushare_core::model::{
    redact, Desired, Host, HostState, ResourceAddr, ResourceKind, StoreState,
};
use gpushare_engine::reconcile::Backends;
use gpushare_engine::state_ops::{unknown, Addr};
use std::path::Path;
use std::time::Duration;

/// `state show ADDR`: the record as JSON (secrets redacted), or as attribute lines.
pub fn show(state: &StoreState, addr: &str, json: bool) -> anyhow::Result<String> {
    let mut value = match Addr::parse(addr)? {
        Addr::Resource(a) => state
            .resources
            .get(&a)
            .map(|r| r.attrs.clone())
            .ok_or_else(|| unknown(addr, state))?,
        Addr::Host(id) => {
            serde_json::to_value(state.hosts.get(&id).ok_or_else(|| unknown(addr, state))?)?
        }
        Addr::Task(id) => {
            serde_json::to_value(state.tasks.get(&id).ok_or_else(|| unknown(addr, state))?)?
        }
    };
    redact(&mut value);
    if json {
        return Ok(serde_json::to_string_pretty(&value)? + "\n");
    }
    let mut out = format!("# {addr}:\n");
    if let serde_json::Value::Object(m) = &value {
        let width = m.keys().map(String::len).max().unwrap_or(0);
        for (k, v) in m {
            out.push_str(&format!("{k:width$} = {}\n", serde_json::to_string(v)?));
        }
    }
    Ok(out)
}

/// The host record for an imported instance, checked against the pool.
pub fn imported_host(
    desired: &Desired,
    addr: &str,
    instance: &gpushare_core::model::CloudHost,
) -> anyhow::Result<Host> {
    let a: ResourceAddr = addr
        .parse()
        .map_err(|e| anyhow::anyhow!("{e}: import takes capacity_provider.POOL INSTANCE_ID"))?;
    if a.kind != ResourceKind::CapacityProvider {
        bail!(
            "{addr} is not importable: gpushare imports running instances into a pool (capacity_provider.POOL INSTANCE_ID); \
             {} resources live in the configuration and are created by apply",
            a.kind.as_str()
        );
    }
    let pool = desired.capacity_providers.get(&a.name).with_context(|| {
        format!(
            "the configuration declares no {addr} (pools: {})",
            desired
                .capacity_providers
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    if !pool.allows_type(&instance.instance_type) {
        bail!(
            "instance {} is a {}, but {addr} runs {}: import it into a pool of its instance type",
            instance.instance_id,
            instance.instance_type,
            pool.launch_types().collect::<Vec<_>>().join(" or ")
        );
    }
    if !instance.capacity_provider.is_empty() && instance.capacity_provider != a.name {
        bail!(
            "instance {} was launched for pool {:?} (its gpushare tag), not {}: its agent and user data belong to that pool",
            instance.instance_id,
            instance.capacity_provider,
            a.name
        );
    }
    let it = gpushare_core::catalog::lookup(&instance.instance_type).with_context(|| {
        format!(
            "instance type {} is not in the GPU catalogue",
            instance.instance_type
        )
    })?;
    if !gpushare_core::ids::valid_id(&instance.host_id) {
        bail!(
            "instance {} carries an invalid host id tag {:?}",
            instance.instance_id,
            instance.host_id
        );
    }
    let mut host = Host::imported(
        &instance.host_id,
        &instance.instance_id,
        &a.name,
        pool,
        it,
        instance.state,
    );
    host.zone = instance.zone.clone();
    host.launch_token = instance.launch_token.clone();
    Ok(host)
}

/// Run `edit` on the state under the store's lock, refusing while a journal waits,
/// and commit the result with serial + 1.
pub async fn edit<T>(
    b: &Backends,
    holder: &str,
    lock_timeout: Duration,
    edit: impl FnOnce(&mut StoreState) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    edit_with(b, holder, lock_timeout, async |s: &mut StoreState| edit(s)).await
}

/// [`edit`] with an edit that may call the store itself (e.g. `state push` handing
/// over the store identity before the state is written): the engine's edit
/// transaction ([`gpushare_engine::store::edit`]), refused at once while a journal
/// waits.
pub async fn edit_with<T>(
    b: &Backends,
    holder: &str,
    lock_timeout: Duration,
    edit: impl AsyncFnOnce(&mut StoreState) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    use gpushare_engine::store::edit::{self as tx, EditError, Edited, JournalRule};
    /// The edit's own error, carried through the transaction as it is.
    #[derive(Debug, thiserror::Error)]
    #[error(transparent)]
    struct Failed(anyhow::Error);
    let out = tx::edit(
        &*b.store,
        holder,
        lock_timeout,
        JournalRule::RefuseAtOnce,
        async |s: &mut StoreState| Ok(Edited::changed(edit(s).await.map_err(Failed)?)),
    )
    .await;
    out.map_err(|e| match e {
        EditError::Edit(Failed(e)) => e,
        e => anyhow::Error::new(e),
    })
}

/// A state written by `state pull`, read from `file` and checked: JSON of a state,
/// host and task ids that are identifiers, every task on a recorded host.
pub fn read_pushed(file: &Path) -> anyhow::Result<StoreState> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let state: StoreState = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a state written by `gpushare state pull`",
            file.display()
        )
    })?;
    for id in state.hosts.keys().chain(state.tasks.keys()) {
        if !gpushare_core::ids::valid_id(id) {
            bail!("{}: {id:?} is not a valid host or task id", file.display());
        }
    }
    for t in state.tasks.values() {
        if !state.hosts.contains_key(&t.host) {
            bail!(
                "{}: task {} is on host {}, which the state does not record",
                file.display(),
                t.id,
                t.host
            );
        }
    }
    Ok(state)
}

/// `state push`: write `pushed` into the store of `b` under its lock (see the
/// command's help for the rules). Returns the serial written.
pub async fn push(
    b: &Backends,
    cluster: &str,
    pushed: StoreState,
    force: bool,
    lock_timeout: Duration,
) -> anyhow::Result<u64> {
    if !pushed.cluster.is_empty() && pushed.cluster != cluster {
        bail!(
            "the pushed state is of cluster {:?}, this configuration's is {cluster:?}",
            pushed.cluster
        );
    }
    let location = b.store.location();
    edit_with(b, "gpushare state push", lock_timeout, async |target: &mut StoreState| {
        let empty = target.resources.is_empty()
            && target.hosts.is_empty()
            && target.tasks.is_empty()
            && target.revisions.is_empty();
        let other_identity = !pushed.store_id.is_empty() && pushed.store_id != target.store_id;
        if !empty && !force {
            bail!(
                "{location} already records a state (serial {}, {} resources, {} hosts, {} tasks); push only into an empty store, or use --force to overwrite it",
                target.serial,
                target.resources.len(),
                target.hosts.len(),
                target.tasks.len()
            );
        }
        if !empty && other_identity {
            bail!(
                "{location} records a state of its own store identity ({}), not the pushed one ({}): overwriting it would leave its instances to no state; push into an empty store",
                target.store_id,
                pushed.store_id
            );
        }
        if other_identity {
            b.store
                .adopt_identity(&pushed.store_id)
                .await
                .context("taking over the pushed state's store identity")?;
        }
        let serial = target.serial;
        *target = StoreState {
            cluster: cluster.to_string(),
            serial,
            ..pushed
        };
        Ok(serial + 1)
    })
    .await
}

/// Import: the instance must be one of the cluster's, running, not of another
/// store, and unknown to the state.
pub async fn find_instance(
    b: &Backends,
    cluster: &str,
    state: &StoreState,
    id: &str,
) -> anyhow::Result<gpushare_core::model::CloudHost> {
    let listed = b
        .cloud
        .list_hosts(cluster)
        .await
        .context("listing the cluster's instances")?;
    let Some(inst) = listed.into_iter().find(|c| c.instance_id == id) else {
        bail!(
            "no instance {id} in cluster {cluster:?} on the {} cloud: only instances gpushare launched for this cluster \
             (tagged with it) can be imported; an instance launched otherwise has no MPS bootstrap and no agent",
            b.cloud.kind()
        );
    };
    if inst.is_foreign_to(&state.store_id) {
        bail!(
            "instance {id} belongs to another state store (store id {}): not importable",
            inst.store_id.as_deref().unwrap_or("")
        );
    }
    if !matches!(inst.state, HostState::Running | HostState::Pending) {
        bail!(
            "instance {id} is {:?}: only a running instance can be imported",
            inst.state
        );
    }
    if let Some(h) = state
        .hosts
        .values()
        .find(|h| h.instance_id.as_deref() == Some(id) || h.id == inst.host_id)
    {
        bail!("instance {id} is already in the state as host.{}", h.id);
    }
    Ok(inst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpushare_core::model::AppliedResource;
    use gpushare_testkit::model::host;

    #[test]
    fn show_prints_records_with_secrets_redacted() {
        let mut s = StoreState::default();
        s.resources.insert(
            "task_definition.emb".parse().expect("a"),
            AppliedResource::new(
                serde_json::json!({"containers": [{"name": "c", "secret_env": {"TOKEN": "hunter2"}}]}),
            ),
        );
        s.hosts
            .insert("h-1".into(), host("h-1").instance_id("i-1").build());
        let out = show(&s, "task_definition.emb", false).expect("shows");
        assert!(!out.contains("hunter2"), "{out}");
        assert!(show(&s, "host.h-1", true)
            .expect("json")
            .contains("\"instance_id\": \"i-1\""));
        let e = show(&s, "task.nope", false).expect_err("unknown");
        assert!(e.to_string().contains("no task.nope in the state"), "{e}");
    }
}

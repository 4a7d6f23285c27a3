//! `gpushare state show|rm|mv` and `gpushare import`: reading and editing the
//! recorded state by hand. Every edit takes the store's lock, is refused while an
//! interrupted apply's journal is waiting (finish it with `gpushare apply` first:
//! the journal's plan names the addresses being edited), and commits the state
//! with serial + 1, as apply does. Nothing here calls the cloud except import,
//! which lists the cluster's instances and tags the adopted one with the store id.

use anyhow::{bail, Context};
use gpushare_core::model::{
    redact, AppliedResource, Desired, Host, HostState, ResourceAddr, ResourceKind, StoreState,
};
use gpushare_engine::reconcile::Backends;
use std::path::Path;
use std::time::Duration;

/// What `state show|rm|mv` accept: a resource (`service.NAME`...), `host.ID` or `task.ID`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addr {
    Resource(ResourceAddr),
    Host(String),
    Task(String),
}

impl Addr {
    pub fn parse(s: &str) -> anyhow::Result<Addr> {
        match s.split_once('.') {
            Some(("host", id)) if !id.is_empty() => Ok(Addr::Host(id.to_string())),
            Some(("task", id)) if !id.is_empty() => Ok(Addr::Task(id.to_string())),
            _ => s.parse().map(Addr::Resource).map_err(|e| {
                anyhow::anyhow!(
                    "{e}: an address is KIND.NAME (capacity_provider, gpu_instance, task_definition, service), host.ID or task.ID"
                )
            }),
        }
    }
}

/// The error for an address the state does not hold, listing what it does hold.
fn unknown(addr: &str, state: &StoreState) -> anyhow::Error {
    let mut known: Vec<String> = state.resources.keys().map(ToString::to_string).collect();
    known.extend(state.hosts.keys().map(|h| format!("host.{h}")));
    known.extend(state.tasks.keys().map(|t| format!("task.{t}")));
    let list = if known.is_empty() {
        "the state is empty".to_string()
    } else {
        format!("the state holds: {}", known.join(", "))
    };
    anyhow::anyhow!("no {addr} in the state ({list}; see gpushare state list)")
}

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

/// `state rm ADDR` on `state`: what was removed (one line each).
pub fn remove(state: &mut StoreState, addr: &str) -> anyhow::Result<Vec<String>> {
    let mut removed = vec![];
    match Addr::parse(addr)? {
        Addr::Resource(a) => {
            if !state.resources.contains_key(&a) {
                return Err(unknown(addr, state));
            }
            match a.kind {
                ResourceKind::CapacityProvider => {
                    let hosts: Vec<&String> = state
                        .hosts
                        .values()
                        .filter(|h| h.capacity_provider == a.name)
                        .map(|h| &h.id)
                        .collect();
                    if !hosts.is_empty() {
                        bail!(
                            "{addr} still has hosts in the state ({}): remove them first (gpushare state rm host.ID) or destroy them",
                            hosts.iter().map(|h| format!("host.{h}")).collect::<Vec<_>>().join(", ")
                        );
                    }
                }
                ResourceKind::Service | ResourceKind::Job => {
                    let job = a.kind == ResourceKind::Job;
                    let tasks: Vec<String> = state
                        .tasks
                        .values()
                        .filter(|t| t.service == a.name && t.job.is_some() == job)
                        .map(|t| t.id.clone())
                        .collect();
                    for t in tasks {
                        state.tasks.remove(&t);
                        removed.push(format!("task.{t}"));
                    }
                }
                ResourceKind::GpuInstance | ResourceKind::TaskDefinition => {}
            }
            state.resources.remove(&a);
            removed.push(a.to_string());
        }
        Addr::Host(id) => {
            if state.hosts.remove(&id).is_none() {
                return Err(unknown(addr, state));
            }
            let tasks: Vec<String> = state
                .tasks
                .values()
                .filter(|t| t.host == id)
                .map(|t| t.id.clone())
                .collect();
            for t in tasks {
                state.tasks.remove(&t);
                removed.push(format!("task.{t}"));
            }
            removed.push(format!("host.{id}"));
        }
        Addr::Task(id) => {
            if state.tasks.remove(&id).is_none() {
                return Err(unknown(addr, state));
            }
            removed.push(format!("task.{id}"));
        }
    }
    Ok(removed)
}

/// `state mv FROM TO` on `state`: rename a resource; what follows it is renamed too
/// (a pool's hosts, a service's tasks, a gpu_instance's host, a task definition's
/// revisions and tasks) and so are other recorded resources' references to it.
pub fn rename(state: &mut StoreState, from: &str, to: &str) -> anyhow::Result<()> {
    let (Addr::Resource(a), Addr::Resource(b)) = (Addr::parse(from)?, Addr::parse(to)?) else {
        bail!("state mv renames resources (KIND.NAME); hosts and tasks keep their ids");
    };
    if a.kind != b.kind {
        bail!(
            "state mv cannot change a resource's kind ({} to {})",
            a.kind.as_str(),
            b.kind.as_str()
        );
    }
    if !gpushare_core::ids::valid_id(&b.name) {
        bail!("{to}: {:?} is not a valid name (letters, digits, '-', '_' and '.', not starting with '.')", b.name);
    }
    if state.resources.contains_key(&b) {
        bail!("{to} is already in the state: remove it first (gpushare state rm {to})");
    }
    let r = state
        .resources
        .remove(&a)
        .ok_or_else(|| unknown(from, state))?;
    let reference = |attrs: &mut serde_json::Value, key: &str| {
        if attrs.get(key).and_then(|v| v.as_str()) == Some(a.name.as_str()) {
            attrs[key] = serde_json::Value::String(b.name.clone());
        }
    };
    match a.kind {
        ResourceKind::CapacityProvider => {
            for h in state
                .hosts
                .values_mut()
                .filter(|h| h.capacity_provider == a.name)
            {
                h.capacity_provider = b.name.clone();
            }
            for (addr, other) in state.resources.iter_mut() {
                if matches!(
                    addr.kind,
                    ResourceKind::Service | ResourceKind::GpuInstance | ResourceKind::Job
                ) {
                    reference(&mut other.attrs, "capacity_provider");
                }
            }
        }
        ResourceKind::Service => {
            for t in state
                .tasks
                .values_mut()
                .filter(|t| t.service == a.name && t.job.is_none())
            {
                t.service = b.name.clone();
            }
        }
        ResourceKind::Job => {
            for t in state.tasks.values_mut() {
                if let Some(run) = t.job.as_mut().filter(|r| r.job == a.name) {
                    run.job = b.name.clone();
                    t.service = b.name.clone();
                }
            }
        }
        ResourceKind::GpuInstance => {
            for h in state
                .hosts
                .values_mut()
                .filter(|h| h.gpu_instance.as_deref() == Some(a.name.as_str()))
            {
                h.gpu_instance = Some(b.name.clone());
            }
        }
        ResourceKind::TaskDefinition => {
            if let Some(mut revs) = state.revisions.remove(&a.name) {
                for r in &mut revs {
                    r.family = b.name.clone();
                }
                state.revisions.insert(b.name.clone(), revs);
            }
            for t in state.tasks.values_mut().filter(|t| t.family == a.name) {
                t.family = b.name.clone();
            }
            for (addr, other) in state.resources.iter_mut() {
                if matches!(addr.kind, ResourceKind::Service | ResourceKind::Job) {
                    reference(&mut other.attrs, "task_definition");
                }
            }
        }
    }
    state.resources.insert(
        b,
        AppliedResource {
            attrs: r.attrs,
            deployment: r.deployment,
            scaling: r.scaling,
            job: r.job,
            one_off: r.one_off,
        },
    );
    Ok(())
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
    use gpushare_core::model::{MpsHealth, Task, TaskGpu, TaskShape, TaskState};

    fn state() -> StoreState {
        let mut s = StoreState::default();
        let res = |s: &mut StoreState, a: &str, attrs: serde_json::Value| {
            s.resources
                .insert(a.parse().expect("addr"), AppliedResource::new(attrs));
        };
        res(
            &mut s,
            "capacity_provider.l4",
            serde_json::json!({"instance_type": "g6.xlarge"}),
        );
        res(
            &mut s,
            "task_definition.emb",
            serde_json::json!({"containers": []}),
        );
        res(
            &mut s,
            "service.emb",
            serde_json::json!({"task_definition": "emb", "capacity_provider": "l4"}),
        );
        let host = Host {
            log_request: None,
            id: "h-1".into(),
            instance_id: Some("i-1".into()),
            capacity_provider: "l4".into(),
            gpu_instance: None,
            instance_type: "g6.xlarge".into(),
            zone: None,
            state: HostState::Running,
            mps_health: MpsHealth::Healthy,
            health: Default::default(),
            gpus: vec![],
            cpu_units: 4096,
            memory_mib: 16384,
            launch_token: "t".into(),
            last_heartbeat: None,
            launched_at: None,
            subnet: None,
            image_id: None,
            launch: None,
            market: Default::default(),
            max_price: None,
            registration: None,
            hold: None,
        };
        s.hosts.insert("h-1".into(), host);
        s.tasks.insert(
            "t-1".into(),
            Task {
                ports: Vec::new(),
                id: "t-1".into(),
                service: "emb".into(),
                family: "emb".into(),
                revision: 1,
                host: "h-1".into(),
                gpus: vec![0],
                shape: TaskShape {
                    cpu_units: 0,
                    memory_mib: 0,
                    gpu: TaskGpu::None,
                },
                state: TaskState::Running,
                job: None,
                scrape: None,
            },
        );
        s
    }

    #[test]
    fn rm_refuses_unknown_addresses_and_pools_with_hosts() {
        let mut s = state();
        let e = remove(&mut s, "service.nope").expect_err("unknown");
        assert!(
            e.to_string().contains("no service.nope in the state"),
            "{e}"
        );
        assert!(
            e.to_string().contains("host.h-1"),
            "lists what is there: {e}"
        );
        let e = remove(&mut s, "capacity_provider.l4").expect_err("has hosts");
        assert!(e.to_string().contains("host.h-1"), "{e}");
        assert!(remove(&mut s, "bogus").is_err());
        assert_eq!(s, state(), "nothing changed");
        assert_eq!(
            remove(&mut s, "host.h-1").expect("rm"),
            ["task.t-1", "host.h-1"]
        );
        assert!(s.hosts.is_empty() && s.tasks.is_empty());
        assert_eq!(
            remove(&mut s, "capacity_provider.l4").expect("rm"),
            ["capacity_provider.l4"]
        );
    }

    #[test]
    fn mv_renames_what_follows_and_references() {
        let mut s = state();
        rename(&mut s, "capacity_provider.l4", "capacity_provider.l4b").expect("mv");
        assert_eq!(s.hosts["h-1"].capacity_provider, "l4b");
        assert_eq!(
            s.resources[&"service.emb".parse().expect("a")].attrs["capacity_provider"],
            "l4b"
        );
        rename(&mut s, "service.emb", "service.embed").expect("mv");
        assert_eq!(s.tasks["t-1"].service, "embed");
        for (from, to, why) in [
            ("service.nope", "service.x", "no service.nope"),
            ("service.embed", "task_definition.x", "kind"),
            (
                "task_definition.emb",
                "task_definition.emb",
                "already in the state",
            ),
            ("host.h-1", "host.h-2", "hosts and tasks keep their ids"),
        ] {
            let before = s.clone();
            let e = rename(&mut s, from, to).expect_err(why);
            assert!(e.to_string().contains(why), "{e}");
            assert_eq!(s, before);
        }
    }

    #[test]
    fn show_prints_records_with_secrets_redacted() {
        let mut s = state();
        s.resources
            .get_mut(&"task_definition.emb".parse().expect("a"))
            .expect("td")
            .attrs =
            serde_json::json!({"containers": [{"name": "c", "secret_env": {"TOKEN": "hunter2"}}]});
        let out = show(&s, "task_definition.emb", false).expect("shows");
        assert!(!out.contains("hunter2"), "{out}");
        assert!(show(&s, "host.h-1", true)
            .expect("json")
            .contains("\"instance_id\": \"i-1\""));
        assert!(show(&s, "task.nope", false).is_err());
    }
}

//! `gpushare state show|rm|mv|push` and `gpushare import`: reading and editing the
//! recorded state by hand (the rules of `rm`, `mv`, `push` and `import` are the
//! engine's `gpushare_engine::state_ops`; this module prints and wires). Every edit takes the store's lock, is refused while an
//! interrupted apply's journal is waiting (finish it with `gpushare apply` first:
//! the journal's plan names the addresses being edited), and commits the state
//! with serial + 1, as apply does. Nothing here calls the cloud except import,
//! which lists the cluster's instances and tags the adopted one with the store id.

use anyhow::Context;
use gpushare_core::model::{redact, StoreState};
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

/// A state written by `state pull`, read from `file` and checked
/// ([`gpushare_engine::state_ops::check_pushed`]).
pub fn read_pushed(file: &Path) -> anyhow::Result<StoreState> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let state: StoreState = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a state written by `gpushare state pull`",
            file.display()
        )
    })?;
    gpushare_engine::state_ops::check_pushed(&state)
        .with_context(|| format!("{} cannot be pushed", file.display()))?;
    Ok(state)
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

//! `gpushare state push FILE`: which state may be written into a store (one of this
//! cluster, with valid ids and every task on a recorded host) and when (into an
//! empty store, or with `force` over one of the same identity; an empty store takes
//! over the pushed state's identity, so its instances stay this state's).

use crate::store::edit::{self as tx, EditError, Edited, JournalRule};
use crate::store::{Store, StoreError};
use gpushare_core::model::StoreState;
use std::time::Duration;

/// Why a state is not pushed.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("{id:?} is not a valid host or task id")]
    BadId { id: String },
    #[error("task {task} is on host {host}, which the state does not record")]
    TaskWithoutHost { task: String, host: String },
    #[error("the pushed state is of cluster {pushed:?}, this configuration's is {ours:?}")]
    OtherCluster { pushed: String, ours: String },
    #[error(
        "{location} already records a state (serial {serial}, {resources} resources, {hosts} hosts, {tasks} tasks); \
         push only into an empty store, or use --force to overwrite it"
    )]
    NotEmpty {
        location: String,
        serial: u64,
        resources: usize,
        hosts: usize,
        tasks: usize,
    },
    #[error(
        "{location} records a state of its own store identity ({ours}), not the pushed one ({pushed}): \
         overwriting it would leave its instances to no state; push into an empty store"
    )]
    OtherIdentity {
        location: String,
        ours: String,
        pushed: String,
    },
    #[error("taking over the pushed state's store identity")]
    Adopt(#[source] StoreError),
}

/// The pushed state's own checks: host and task ids that are identifiers, every task
/// on a recorded host.
pub fn check_pushed(state: &StoreState) -> Result<(), PushError> {
    if let Some(id) =
        (state.hosts.keys().chain(state.tasks.keys())).find(|id| !gpushare_core::ids::valid_id(id))
    {
        return Err(PushError::BadId { id: id.clone() });
    }
    if let Some(t) = state
        .tasks
        .values()
        .find(|t| !state.hosts.contains_key(&t.host))
    {
        return Err(PushError::TaskWithoutHost {
            task: t.id.clone(),
            host: t.host.clone(),
        });
    }
    Ok(())
}

/// Write `pushed` into `store` under its lock (refused at once while a journal
/// waits), as the module docs say; returns the serial written.
pub async fn push(
    store: &dyn Store,
    cluster: &str,
    pushed: StoreState,
    force: bool,
    lock_timeout: Duration,
) -> Result<u64, EditError<PushError>> {
    check_pushed(&pushed).map_err(EditError::Edit)?;
    if !pushed.cluster.is_empty() && pushed.cluster != cluster {
        return Err(EditError::Edit(PushError::OtherCluster {
            pushed: pushed.cluster.clone(),
            ours: cluster.to_string(),
        }));
    }
    let location = store.location();
    let write = async |target: &mut StoreState| {
        let empty = target.resources.is_empty()
            && target.hosts.is_empty()
            && target.tasks.is_empty()
            && target.revisions.is_empty();
        let other_identity = !pushed.store_id.is_empty() && pushed.store_id != target.store_id;
        if !empty && !force {
            return Err(PushError::NotEmpty {
                location: location.clone(),
                serial: target.serial,
                resources: target.resources.len(),
                hosts: target.hosts.len(),
                tasks: target.tasks.len(),
            });
        }
        if !empty && other_identity {
            return Err(PushError::OtherIdentity {
                location: location.clone(),
                ours: target.store_id.clone(),
                pushed: pushed.store_id.clone(),
            });
        }
        if other_identity {
            store
                .adopt_identity(&pushed.store_id)
                .await
                .map_err(PushError::Adopt)?;
        }
        let serial = target.serial;
        *target = StoreState {
            cluster: cluster.to_string(),
            serial,
            ..pushed
        };
        Ok(Edited::changed(serial + 1))
    };
    tx::edit(
        store,
        "gpushare state push",
        lock_timeout,
        JournalRule::RefuseAtOnce,
        write,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::file::FileStore;
    use gpushare_testkit::model::host;

    fn pushed() -> StoreState {
        let mut s = StoreState {
            cluster: "c".into(),
            store_id: "pushed-id".into(),
            serial: 9,
            ..StoreState::default()
        };
        s.hosts.insert("h-1".into(), host("h-1").build());
        s
    }

    #[tokio::test]
    async fn a_state_is_pushed_into_an_empty_store_once_and_takes_its_identity() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileStore::open(dir.path().join(".gpushare")).expect("store");
        let t = Duration::from_secs(5);
        let wrong = push(&store, "other", pushed(), false, t)
            .await
            .expect_err("cluster");
        assert!(wrong.to_string().contains("of cluster \"c\""), "{wrong}");
        let serial = push(&store, "c", pushed(), false, t).await.expect("pushed");
        let now = store.load().await.expect("load");
        assert_eq!(
            (now.serial, serial),
            (serial, 1),
            "committed with serial + 1"
        );
        assert!(now.hosts.contains_key("h-1"));
        assert_eq!(
            now.store_id, "pushed-id",
            "the empty store took the identity"
        );
        let again = push(&store, "c", pushed(), false, t)
            .await
            .expect_err("not empty");
        assert!(
            again.to_string().contains("already records a state"),
            "{again}"
        );
        let forced = push(&store, "c", pushed(), true, t)
            .await
            .expect("same identity, forced");
        assert_eq!(forced, 2);
        let mut other = pushed();
        other.store_id = "someone-else".into();
        let e = push(&store, "c", other, true, t)
            .await
            .expect_err("other identity");
        assert!(e.to_string().contains("its own store identity"), "{e}");
    }

    #[test]
    fn a_pushed_state_needs_valid_ids_and_recorded_hosts() {
        let mut s = pushed();
        s.hosts.insert("no good".into(), host("no good").build());
        assert!(matches!(check_pushed(&s), Err(PushError::BadId { .. })));
        let mut s = pushed();
        // A core Task (the etcd suite's builder; only the host matters here).
        let mut t = gpushare_testkit_engine::etcd::task(1, 1);
        t.host = "h-9".into();
        s.tasks.insert("t-1".into(), t);
        assert!(matches!(
            check_pushed(&s),
            Err(PushError::TaskWithoutHost { .. })
        ));
        assert!(check_pushed(&pushed()).is_ok());
    }
}

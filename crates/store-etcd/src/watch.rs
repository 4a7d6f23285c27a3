//! Agents follow their assignments with an etcd watch on the state's keys.
//!
//! The watch reads the task keys (and any staged ones) once, then applies the watch's
//! events to that copy: after the first read an agent receives only what changed,
//! whatever the size of the fleet, so 2,000 agents following a 10,000-task state cost
//! etcd one small event stream each, not a full read per commit.

use crate::client::{prefix_end, KeyValue, WatchCreateRequest};
use crate::keys::{Meta, DATA, META, STAGE, STATE};
use crate::EtcdStore;
use gpushare_core::model::Task;
use gpushare_core::util::backoff_delays;
use gpushare_engine::store::StoreError;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::sync::mpsc;

/// The tasks assigned to one host, as they change. Dropping it stops the watch.
#[derive(Debug)]
pub struct AssignmentWatch {
    rx: mpsc::Receiver<Result<Vec<Task>, StoreError>>,
    task: tokio::task::JoinHandle<()>,
}

impl EtcdStore {
    /// Follow the tasks assigned to `host_id`: the first item is the current list, then
    /// one item each time a commit changes it. Agents use this instead of polling.
    pub async fn watch_assignments(&self, host_id: &str) -> Result<AssignmentWatch, StoreError> {
        Self::report_rel(host_id)?;
        Ok(spawn(self.clone(), host_id.to_string()))
    }
}

impl AssignmentWatch {
    /// The host's tasks (sorted by id): the current list first, then the list after
    /// each commit that changes it. An error is reported once per failed attempt; the
    /// watch keeps trying after it. `None` only when the watch was stopped.
    pub async fn next(&mut self) -> Option<Result<Vec<Task>, StoreError>> {
        self.rx.recv().await
    }
}

impl Drop for AssignmentWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) fn spawn(store: EtcdStore, host_id: String) -> AssignmentWatch {
    let (tx, rx) = mpsc::channel(16);
    let task = tokio::spawn(run(store, host_id, tx));
    AssignmentWatch { rx, task }
}

/// The keys that decide assignments: the meta key, the stored tasks and staged tasks.
#[derive(Default)]
struct Mirror {
    meta: Option<Meta>,
    tasks: BTreeMap<String, Task>,
    /// The ids of `tasks` by the host they are placed on, kept with them: a host's
    /// list is read from it, not from a scan of every task at each commit (issue 52).
    by_host: BTreeMap<String, BTreeSet<String>>,
    /// token -> task id -> staged task (`None`: deleted by that commit).
    staged: BTreeMap<String, BTreeMap<String, Option<Task>>>,
}

impl Mirror {
    /// Apply one key's new value (`None`: deleted).
    fn apply(&mut self, store: &EtcdStore, kv: &KeyValue, deleted: bool) -> Result<(), StoreError> {
        let Some(rel) = store.rel(&kv.key, STATE) else {
            return Ok(());
        };
        if rel == "meta" {
            self.meta = if deleted {
                None
            } else {
                Some(serde_json::from_slice(&kv.value).map_err(|e| store.corrupt(META, e))?)
            };
        } else if let Some(id) = rel.strip_prefix("d/task/") {
            let new: Option<Task> = if deleted {
                None
            } else {
                Some(
                    serde_json::from_slice(&kv.value)
                        .map_err(|e| store.corrupt(&format!("{DATA}task/{id}"), e))?,
                )
            };
            self.put_task(id, new);
        } else if let Some(r) = rel.strip_prefix("stage/") {
            let Some((token, id)) = r.split_once("/task/") else {
                return Ok(());
            };
            let entry = self.staged.entry(token.to_string()).or_default();
            if deleted {
                entry.remove(id);
                if entry.is_empty() {
                    self.staged.remove(token);
                }
            } else if kv.value.is_empty() {
                entry.insert(id.to_string(), None);
            } else {
                let t = serde_json::from_slice(&kv.value)
                    .map_err(|e| store.corrupt(&format!("{STAGE}{r}"), e))?;
                entry.insert(id.to_string(), Some(t));
            }
        }
        Ok(())
    }

    /// Store task `id` as `task` (`None`: deleted), keeping [`Mirror::by_host`].
    fn put_task(&mut self, id: &str, task: Option<Task>) {
        let old = match task {
            Some(t) => {
                self.by_host
                    .entry(t.host.clone())
                    .or_default()
                    .insert(id.to_string());
                self.tasks.insert(id.to_string(), t)
            }
            None => self.tasks.remove(id),
        };
        let moved_off = old.filter(|o| self.tasks.get(id).is_none_or(|t| t.host != o.host));
        if let Some(o) = moved_off {
            if let Some(ids) = self.by_host.get_mut(&o.host) {
                ids.remove(id);
                if ids.is_empty() {
                    self.by_host.remove(&o.host);
                }
            }
        }
    }

    /// The host's tasks in the committed state (stored, overlaid with a flipped stage).
    fn host_tasks(&self, host: &str) -> Vec<Task> {
        let overlay = self
            .meta
            .as_ref()
            .and_then(|m| m.staged.as_ref())
            .and_then(|t| self.staged.get(t));
        let mut out: BTreeMap<&str, &Task> = self
            .by_host
            .get(host)
            .into_iter()
            .flatten()
            .filter(|id| !overlay.is_some_and(|o| o.contains_key(*id)))
            .filter_map(|id| self.tasks.get(id).map(|t| (id.as_str(), t)))
            .collect();
        for (id, t) in overlay.into_iter().flatten() {
            if let Some(t) = t.as_ref().filter(|t| t.host == host) {
                out.insert(id.as_str(), t);
            }
        }
        out.into_values().cloned().collect()
    }
}

async fn read_mirror(store: &EtcdStore) -> Result<(i64, Mirror), StoreError> {
    let (rev, metas) = store.range(META, 0).await?;
    let (_, tasks) = store.range(&format!("{DATA}task/"), rev).await?;
    let (_, staged) = store.range(STAGE, rev).await?;
    let mut m = Mirror::default();
    for kv in metas.iter().chain(&tasks).chain(&staged) {
        m.apply(store, kv, false)?;
    }
    Ok((rev, m))
}

async fn run(store: EtcdStore, host_id: String, tx: mpsc::Sender<Result<Vec<Task>, StoreError>>) {
    let mut last: Option<Vec<Task>> = None;
    // 200 ms after the first failure, doubling up to 10 s (never reset).
    let mut waits = backoff_delays(Duration::from_millis(200), Duration::from_secs(10));
    let mut failed = |e: StoreError| {
        let tx = tx.clone();
        let wait = waits.next().unwrap_or(Duration::from_secs(10));
        async move {
            let open = tx.send(Err(e)).await.is_ok();
            tokio::time::sleep(wait).await;
            open
        }
    };
    loop {
        // Read, then watch from just after the revision read: no change is missed.
        let (rev, mut mirror) = match read_mirror(&store).await {
            Ok(r) => r,
            Err(e) => {
                if !failed(e).await {
                    return;
                }
                continue;
            }
        };
        let key = store.key(STATE).into_bytes();
        let create = WatchCreateRequest {
            range_end: prefix_end(&key),
            key,
            start_revision: rev + 1,
            ..WatchCreateRequest::default()
        };
        // A response can carry many events (a lagging watcher, a large commit): the
        // client accepts answers up to MAX_DECODE.
        let mut stream = match store.inner.client.watch(create).await {
            Ok(s) => s,
            Err(e) => {
                let e =
                    crate::error::classify(&store.inner.location, "watching the state".into(), e);
                if !failed(e).await {
                    return;
                }
                continue;
            }
        };
        let mut healthy = true;
        while healthy {
            let mine = mirror.host_tasks(&host_id);
            if last.as_ref() != Some(&mine) {
                last = Some(mine.clone());
                if tx.send(Ok(mine)).await.is_err() {
                    return;
                }
            }
            // Every event of one revision (one transaction) comes in one response, so
            // the list is only looked at between transactions.
            match stream.message().await {
                Ok(Some(resp)) if resp.canceled => {
                    tracing::debug!(
                        reason = resp.cancel_reason,
                        compacted_at = resp.compact_revision,
                        "assignment watch cancelled; reading again"
                    );
                    healthy = false;
                }
                Ok(Some(resp)) => {
                    for ev in &resp.events {
                        let Some(kv) = &ev.kv else { continue };
                        let deleted = ev.is_delete();
                        if let Err(e) = mirror.apply(&store, kv, deleted) {
                            if tx.send(Err(e)).await.is_err() {
                                return;
                            }
                            healthy = false;
                            break;
                        }
                    }
                }
                Ok(None) => healthy = false,
                Err(e) => {
                    tracing::warn!(host = %host_id, error = %e, "assignment watch failed; reading again");
                    healthy = false;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, host: &str) -> Task {
        Task {
            ports: Vec::new(),
            id: id.into(),
            service: "s".into(),
            family: "f".into(),
            revision: 1,
            host: host.into(),
            gpus: vec![0],
            shape: gpushare_core::model::TaskShape::default(),
            state: gpushare_core::model::TaskState::Running,
            job: None,
            scrape: None,
        }
    }

    fn ids(tasks: Vec<Task>) -> Vec<String> {
        tasks.into_iter().map(|t| t.id).collect()
    }

    #[test]
    fn a_hosts_list_follows_puts_moves_and_deletes() {
        let mut m = Mirror::default();
        m.put_task("t1", Some(task("t1", "h1")));
        m.put_task("t2", Some(task("t2", "h2")));
        m.put_task("t3", Some(task("t3", "h1")));
        assert_eq!(ids(m.host_tasks("h1")), ["t1", "t3"]);
        // Moved to h2: off h1's list, on h2's.
        m.put_task("t1", Some(task("t1", "h2")));
        assert_eq!(ids(m.host_tasks("h1")), ["t3"]);
        assert_eq!(ids(m.host_tasks("h2")), ["t1", "t2"]);
        // Rewritten on the same host: still listed once.
        m.put_task("t2", Some(task("t2", "h2")));
        assert_eq!(ids(m.host_tasks("h2")), ["t1", "t2"]);
        m.put_task("t3", None);
        assert!(m.host_tasks("h1").is_empty());
        assert!(
            !m.by_host.contains_key("h1"),
            "an emptied host leaves the index"
        );
    }

    #[test]
    fn a_flipped_stage_overlays_the_stored_tasks() {
        let mut m = Mirror::default();
        m.put_task("t1", Some(task("t1", "h1")));
        m.put_task("t2", Some(task("t2", "h1")));
        let staged: BTreeMap<String, Option<Task>> = [
            ("t1".to_string(), None),
            ("t2".to_string(), Some(task("t2", "h2"))),
            ("t3".to_string(), Some(task("t3", "h1"))),
        ]
        .into();
        m.staged.insert("tok".into(), staged);
        assert_eq!(ids(m.host_tasks("h1")), ["t1", "t2"], "not flipped yet");
        m.meta = Some(Meta {
            format: 1,
            serial: 2,
            cluster: "c".into(),
            staged: Some("tok".into()),
            capacity_refusals: Vec::new(),
        });
        assert_eq!(ids(m.host_tasks("h1")), ["t3"]);
        assert_eq!(ids(m.host_tasks("h2")), ["t2"]);
    }
}

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
use std::collections::BTreeMap;
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
            if deleted {
                self.tasks.remove(id);
            } else {
                let t = serde_json::from_slice(&kv.value)
                    .map_err(|e| store.corrupt(&format!("{DATA}task/{id}"), e))?;
                self.tasks.insert(id.to_string(), t);
            }
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

    /// The host's tasks in the committed state (stored, overlaid with a flipped stage).
    fn host_tasks(&self, host: &str) -> Vec<Task> {
        let overlay = self
            .meta
            .as_ref()
            .and_then(|m| m.staged.as_ref())
            .and_then(|t| self.staged.get(t));
        let mut out: BTreeMap<&str, &Task> = self
            .tasks
            .iter()
            .filter(|(id, t)| t.host == host && !overlay.is_some_and(|o| o.contains_key(*id)))
            .map(|(id, t)| (id.as_str(), t))
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

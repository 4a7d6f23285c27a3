//! Agents follow their assignments with an etcd watch on the state's keys.

use crate::EtcdStore;
use etcd_client::WatchOptions;
use gpushare_core::model::Task;
use gpushare_engine::store::StoreError;
use std::time::Duration;
use tokio::sync::mpsc;

/// The tasks assigned to one host, as they change. Dropping it stops the watch.
#[derive(Debug)]
pub struct AssignmentWatch {
    rx: mpsc::Receiver<Result<Vec<Task>, StoreError>>,
    task: tokio::task::JoinHandle<()>,
}

impl AssignmentWatch {
    /// The host's tasks (sorted by id) after the next change: the current list first.
    /// An error is reported once per failed attempt; the watch keeps trying after it.
    /// `None` only when the watch was stopped.
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

async fn run(store: EtcdStore, host_id: String, tx: mpsc::Sender<Result<Vec<Task>, StoreError>>) {
    let mut last: Option<Vec<Task>> = None;
    let mut backoff = Duration::from_millis(200);
    loop {
        // Read, then watch from just after the revision read: no change is missed.
        let (snap, state) = match store.read_snapshot().await {
            Ok(s) => s,
            Err(e) => {
                if tx.send(Err(e)).await.is_err() {
                    return;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
                continue;
            }
        };
        let mine: Vec<Task> = state
            .tasks
            .values()
            .filter(|t| t.host == host_id)
            .cloned()
            .collect();
        if last.as_ref() != Some(&mine) {
            last = Some(mine.clone());
            if tx.send(Ok(mine)).await.is_err() {
                return;
            }
        }
        let key = store.key(crate::STATE);
        let opts = WatchOptions::new()
            .with_prefix()
            .with_start_revision(snap.revision + 1);
        let mut c = store.inner.client.clone();
        let mut stream = match c.watch(key, Some(opts)).await {
            Ok(s) => s,
            Err(e) => {
                let e = crate::classify(&store.inner.location, "watching the state".into(), e);
                if tx.send(Err(e)).await.is_err() {
                    return;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
                continue;
            }
        };
        backoff = Duration::from_millis(200);
        // Wait for a change to a task, the serial (a large commit's flip) or a stage.
        loop {
            match stream.message().await {
                Ok(Some(resp)) => {
                    if resp.canceled() {
                        tracing::debug!(
                            reason = resp.cancel_reason(),
                            "assignment watch cancelled; watching again"
                        );
                        break;
                    }
                    let relevant = resp.events().iter().any(|ev| {
                        ev.kv()
                            .and_then(|kv| store.rel(kv.key(), crate::STATE))
                            .is_some_and(|r| r == "meta" || r.starts_with("d/task/"))
                    });
                    if relevant {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(host = %host_id, error = %e, "assignment watch failed; watching again");
                    break;
                }
            }
        }
    }
}

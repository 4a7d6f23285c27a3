//! The step of a pass that measures what each task uses (issue 49): its GPU memory
//! and SM from the GPUs' compute processes, and the Prometheus metric of its own
//! endpoint where its service auto scales on one (docs/autoscaling.md).

use super::Agent;
use crate::health::GpuProcess;
use crate::scrape::{scrape_metric, SCRAPE_TIMEOUT};
use gpushare_core::model::{EndpointSample, Task, TaskState, TaskUsage};
use std::collections::BTreeMap;

impl Agent {
    /// Each task's GPU use from the GPUs' compute processes: the processes the
    /// runtime says are a task's, summed; the peak kept since the task entered its
    /// state; and its endpoint's metric, scraped. A task with no GPU process and no
    /// endpoint sample this pass keeps its peak only.
    pub(super) async fn measure_usage(
        &mut self,
        processes: Vec<GpuProcess>,
        mine: &BTreeMap<&str, &Task>,
        now: u64,
    ) {
        let pids: Vec<u32> = processes.iter().map(|p| p.pid).collect();
        let owners = if pids.is_empty() {
            BTreeMap::new()
        } else {
            self.runtime.tasks_of_pids(&pids).await
        };
        let mut per: BTreeMap<String, TaskUsage> = BTreeMap::new();
        for p in &processes {
            let Some(task) = owners.get(&p.pid) else {
                continue;
            };
            let u = per.entry(task.clone()).or_default();
            u.gpu_memory_mib = u.gpu_memory_mib.saturating_add(p.used_memory_mib);
            if let Some(sm) = p.sm_percent {
                u.sm_percent = Some(u.sm_percent.unwrap_or(0).saturating_add(sm));
            }
            if !u.gpus.contains(&p.gpu) {
                u.gpus.push(p.gpu);
            }
        }
        for (id, sample) in self.scrape_endpoints(mine).await {
            per.entry(id).or_default().endpoint = Some(sample);
        }
        for (id, m) in self.memo.iter_mut() {
            let peak = m.status.usage.as_ref().map_or(0, |u| u.peak_gpu_memory_mib);
            let mut u = match per.remove(id) {
                Some(u) => u,
                None if peak > 0 => TaskUsage::default(),
                None => {
                    m.status.usage = None;
                    continue;
                }
            };
            u.gpus.sort_unstable();
            u.peak_gpu_memory_mib = peak.max(u.gpu_memory_mib);
            u.at = now;
            m.status.usage = Some(u);
        }
    }

    /// The metric each running task of this host is asked to expose (its
    /// [`Task::scrape`]), read from its endpoint on this host, all at once and each
    /// within [`SCRAPE_TIMEOUT`]. A task whose port is not known or whose scrape
    /// fails has no sample (logged at debug); nothing is stopped for it.
    async fn scrape_endpoints(
        &self,
        mine: &BTreeMap<&str, &Task>,
    ) -> BTreeMap<String, EndpointSample> {
        let address = self.config.scrape_address.as_str();
        let running = mine.iter().filter(|(id, _)| {
            self.memo
                .get(**id)
                .is_some_and(|m| m.status.state == TaskState::Running)
        });
        let mut asks = Vec::new();
        for (id, t) in running {
            let Some(s) = &t.scrape else { continue };
            let Some(port) = t.ports.iter().find(|p| p.label() == s.port) else {
                tracing::debug!(task = id, port = %s.port, "no such port to scrape");
                continue;
            };
            asks.push(async move {
                let got =
                    scrape_metric(address, port.host_port, &s.path, &s.metric, SCRAPE_TIMEOUT)
                        .await;
                (id.to_string(), s.metric.clone(), got)
            });
        }
        let mut out = BTreeMap::new();
        for (id, metric, got) in futures_util::future::join_all(asks).await {
            match got {
                Ok(value) => {
                    out.insert(id, EndpointSample { metric, value });
                }
                Err(e) => {
                    let error = super::error_chain(&e);
                    // Every pass while it lasts: debug, not to flood the log.
                    tracing::debug!(task = %id, %error, "no endpoint sample this pass");
                }
            }
        }
        out
    }
}

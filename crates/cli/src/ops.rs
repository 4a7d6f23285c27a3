//! The controller's operations endpoint (`gpushare reconcile --listen ADDR`):
//! `/metrics` in the Prometheus text format (prometheus-client), `/healthz` (the
//! process answers) and `/readyz` (the last pass succeeded within two intervals).

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use gpushare_core::model::{HostState, MpsHealth, StoreState};
use gpushare_core::plan::Options;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskUsageLabels {
    service: String,
    task: String,
    host: String,
    gpu: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HostLabels {
    pool: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    service: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct DeploymentLabels {
    service: String,
    deployment: String,
    revision: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct ServiceLabels {
    service: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct GpuLabels {
    pool: String,
    mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct CheckLabels {
    pool: String,
    check: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct GpuHealthLabels {
    pool: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct PoolLabels {
    pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CommitLabels {
    commit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusedLabels {
    commit: String,
    reason: String,
}

/// How a pass went, for readiness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PassHealth {
    /// No error: ready.
    Succeeded,
    /// Failed on something that may pass (a fetch, the store, the cloud): ready
    /// still, until two intervals go by without a success.
    Failed,
    /// The source is wrong (a refused commit, a missing or ambiguous reference):
    /// not ready until a pass succeeds.
    Broken,
}

/// The services' deployments and healthy tasks (docs/deployments.md).
struct ServiceMetrics {
    deployments: Family<DeploymentLabels, Gauge>,
    failed: Family<ServiceLabels, Gauge>,
    healthy: Family<ServiceLabels, Gauge>,
}

impl ServiceMetrics {
    fn register(registry: &mut Registry) -> ServiceMetrics {
        let m = ServiceMetrics {
            deployments: Family::default(),
            failed: Family::default(),
            healthy: Family::default(),
        };
        registry.register(
            "deployment_info",
            "Each service's last deployment (value 1) with its state: IN_PROGRESS, COMPLETED, FAILED, ROLLED_BACK (docs/deployments.md)",
            m.deployments.clone(),
        );
        registry.register(
            "deployment_failed_tasks",
            "Tasks of each service's last deployment that failed (counted against its circuit breaker)",
            m.failed.clone(),
        );
        registry.register(
            "service_healthy_tasks",
            "Each service's healthy tasks: running without a restart for its deployment's min_healthy_seconds (a task whose agent gives no detail counts once running)",
            m.healthy.clone(),
        );
        m
    }

    /// The services of `state` at `now` (health from the tasks' states alone: the
    /// loop's metrics see no report detail).
    fn set(&self, state: &StoreState, now: u64) {
        let status = gpushare_core::model::service_status(state, &BTreeMap::new(), now);
        self.deployments.clear();
        self.failed.clear();
        self.healthy.clear();
        for s in status {
            let service = ServiceLabels {
                service: s.service.clone(),
            };
            self.healthy
                .get_or_create(&service)
                .set(i64::from(s.healthy));
            if let Some(d) = &s.deployment {
                self.deployments
                    .get_or_create(&DeploymentLabels {
                        service: s.service.clone(),
                        deployment: d.id.clone(),
                        revision: d.revision.to_string(),
                        state: d.state.as_str().to_string(),
                    })
                    .set(1);
                self.failed
                    .get_or_create(&service)
                    .set(i64::from(d.failed_tasks));
            }
        }
    }
}

/// The controller's metrics and readiness.
pub struct Metrics {
    registry: Registry,
    /// The per-task GPU use (`gpushare_task_*`).
    tasks_registry: Registry,
    passes: Family<OutcomeLabels, Counter>,
    duration: Histogram,
    hosts: Family<HostLabels, Gauge>,
    tasks: Family<TaskLabels, Gauge>,
    gpus: Family<GpuLabels, Gauge>,
    host_health: Family<CheckLabels, Gauge>,
    gpu_health: Family<GpuHealthLabels, Gauge>,
    unallocated: Family<PoolLabels, Gauge>,
    held: Family<PoolLabels, Gauge>,
    task_memory: Family<TaskUsageLabels, Gauge>,
    task_peak: Family<TaskUsageLabels, Gauge>,
    task_sm: Family<TaskUsageLabels, Gauge>,
    cost: Gauge<f64, AtomicU64>,
    drift: Counter,
    commit: Family<CommitLabels, Gauge>,
    refused: Family<RefusedLabels, Gauge>,
    services: ServiceMetrics,
    jobs: crate::job_metrics::JobMetrics,
    last_success: Mutex<Option<Instant>>,
    broken: std::sync::atomic::AtomicBool,
    interval: Duration,
}

impl Metrics {
    pub fn new(interval: Duration) -> Metrics {
        let mut registry = Registry::with_prefix("gpushare_reconcile");
        let passes = Family::<OutcomeLabels, Counter>::default();
        registry.register("passes", "Reconcile passes by outcome", passes.clone());
        let duration = Histogram::new(exponential_buckets(0.01, 2.0, 16));
        registry.register(
            "pass_duration_seconds",
            "How long a reconcile pass took",
            duration.clone(),
        );
        let hosts = Family::<HostLabels, Gauge>::default();
        registry.register("hosts", "Hosts by pool and state", hosts.clone());
        let tasks = Family::<TaskLabels, Gauge>::default();
        registry.register("tasks", "Tasks by service and state", tasks.clone());
        let services = ServiceMetrics::register(&mut registry);
        let jobs = crate::job_metrics::JobMetrics::register(&mut registry);
        let gpus = Family::<GpuLabels, Gauge>::default();
        registry.register(
            "gpus",
            "GPUs of the hosts that are up, by pool and mode (idle, mps, dedicated)",
            gpus.clone(),
        );
        let host_health = Family::<CheckLabels, Gauge>::default();
        registry.register(
            "host_health",
            "Hosts that are up by pool, health check (mps_daemon, gpus, container_runtime, deep_diagnostic, overall) and status (ok, impaired, insufficient_data, initializing)",
            host_health.clone(),
        );
        let gpu_health = Family::<GpuHealthLabels, Gauge>::default();
        registry.register(
            "gpu_health",
            "GPUs of the hosts that are up by pool and health status, as their agents report them",
            gpu_health.clone(),
        );
        let unallocated = Family::<PoolLabels, Gauge>::default();
        registry.register(
            "unallocated_gpu_memory_mib",
            "GPU memory no task holds on the hosts that are up, by pool (a dedicated GPU is all held)",
            unallocated.clone(),
        );
        let held = Family::<PoolLabels, Gauge>::default();
        registry.register(
            "replacements_held",
            "Silent hosts not replaced, by pool, because more than the pool's unhealthy_threshold_percent of its hosts are silent or impaired at once (the disruption budget; gpushare plan says why, gpushare host replace HOST forces one)",
            held.clone(),
        );
        let task_memory = Family::<TaskUsageLabels, Gauge>::default();
        let task_peak = Family::<TaskUsageLabels, Gauge>::default();
        let task_sm = Family::<TaskUsageLabels, Gauge>::default();
        // Named as the issue and the docs name them: gpushare_task_* (their own
        // registry, encoded beside the reconcile loop's).
        let mut tasks_registry = Registry::with_prefix("gpushare_task");
        tasks_registry.register(
            "gpu_memory_used_bytes",
            "GPU memory a task's processes hold now, as its agent measured it (at most 5000 tasks)",
            task_memory.clone(),
        );
        tasks_registry.register(
            "gpu_memory_peak_bytes",
            "The most GPU memory a task's processes held at once since it started",
            task_peak.clone(),
        );
        tasks_registry.register(
            "gpu_sm_percent",
            "SM utilisation of a task's processes over the agent's last sample, percent of one GPU",
            task_sm.clone(),
        );
        let cost = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "hourly_cost_dollars",
            "The fleet's cost per hour (catalogue prices)",
            cost.clone(),
        );
        let drift = Counter::default();
        registry.register(
            "drift_corrections",
            "Passes that corrected drift (the fleet changed, the configuration had not)",
            drift.clone(),
        );
        let commit = Family::<CommitLabels, Gauge>::default();
        registry.register(
            "applied_commit_info",
            "The commit whose configuration was last reconciled (value 1)",
            commit.clone(),
        );
        let refused = Family::<RefusedLabels, Gauge>::default();
        registry.register(
            "refused_commit_info",
            "The newest commit refused (value 1), with why: invalid, pinned_setting, symlink, submodule, too_large, no_directory, unsafe_path",
            refused.clone(),
        );
        Metrics {
            registry,
            tasks_registry,
            passes,
            duration,
            hosts,
            tasks,
            gpus,
            host_health,
            gpu_health,
            unallocated,
            held,
            task_memory,
            task_peak,
            task_sm,
            cost,
            drift,
            commit,
            refused,
            services,
            jobs,
            last_success: Mutex::new(None),
            broken: std::sync::atomic::AtomicBool::new(false),
            interval,
        }
    }

    /// The pools whose silent hosts the last pass held back (none: the gauge is
    /// empty).
    pub fn held(&self, pools: &[gpushare_core::plan::HeldPool]) {
        self.held.clear();
        for p in pools {
            self.held
                .get_or_create(&PoolLabels {
                    pool: p.pool.clone(),
                })
                .set(i64::try_from(p.silent).unwrap_or(i64::MAX));
        }
    }

    /// Each task's GPU use (issue 49), for at most [`MAX_USAGE_TASKS`] tasks (the
    /// label set stays bounded on a large fleet; `show --json` has every task).
    pub fn usage(&self, rows: &[gpushare_core::model::TaskUsageRow]) {
        self.task_memory.clear();
        self.task_peak.clear();
        self.task_sm.clear();
        const MIB: i64 = 1024 * 1024;
        for r in rows.iter().take(MAX_USAGE_TASKS) {
            let labels = TaskUsageLabels {
                service: r.service.clone(),
                task: r.task.clone(),
                host: r.host.clone(),
                gpu: r
                    .usage
                    .gpus
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            };
            let bytes = |mib: u64| {
                i64::try_from(mib)
                    .unwrap_or(i64::MAX / MIB)
                    .saturating_mul(MIB)
            };
            self.task_memory
                .get_or_create(&labels)
                .set(bytes(r.usage.gpu_memory_mib));
            self.task_peak
                .get_or_create(&labels)
                .set(bytes(r.usage.peak_gpu_memory_mib));
            if let Some(sm) = r.usage.sm_percent {
                self.task_sm.get_or_create(&labels).set(i64::from(sm));
            }
        }
    }

    /// Count a pass; a successful one makes the process ready, a broken source
    /// unready at once.
    pub fn pass(&self, outcome: &str, took: Duration, health: PassHealth) {
        self.passes
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_string(),
            })
            .inc();
        self.duration.observe(took.as_secs_f64());
        if outcome == "drift_corrected" {
            self.drift.inc();
        }
        self.broken.store(
            health == PassHealth::Broken,
            std::sync::atomic::Ordering::SeqCst,
        );
        if health == PassHealth::Succeeded {
            if let Ok(mut t) = self.last_success.lock() {
                *t = Some(Instant::now());
            }
        }
    }

    /// Hosts by check and status, GPUs by status (hosts that are up and reported).
    fn health(&self, state: &StoreState) {
        let mut checks: BTreeMap<CheckLabels, i64> = BTreeMap::new();
        let mut gpus: BTreeMap<GpuHealthLabels, i64> = BTreeMap::new();
        for h in state.hosts.values().filter(|h| {
            matches!(
                h.state,
                HostState::Pending | HostState::Running | HostState::Draining
            )
        }) {
            let pool = &h.capacity_provider;
            let overall = h.health.overall().map(|s| ("overall", s));
            for (check, status) in h
                .health
                .checks
                .iter()
                .map(|c| (c.check.as_str(), c.status))
                .chain(overall)
            {
                *checks
                    .entry(CheckLabels {
                        pool: pool.clone(),
                        check: check.to_string(),
                        status: status.as_str().to_string(),
                    })
                    .or_default() += 1;
            }
            for g in &h.health.gpus {
                *gpus
                    .entry(GpuHealthLabels {
                        pool: pool.clone(),
                        status: g.status.as_str().to_string(),
                    })
                    .or_default() += 1;
            }
        }
        self.host_health.clear();
        for (l, n) in checks {
            self.host_health.get_or_create(&l).set(n);
        }
        self.gpu_health.clear();
        for (l, n) in gpus {
            self.gpu_health.get_or_create(&l).set(n);
        }
    }

    /// The fleet after a pass (at `now`, silence judged by `options`): hosts,
    /// tasks, cost and the commit reconciled.
    pub fn fleet(
        &self,
        state: &StoreState,
        hourly_cost: f64,
        commit: Option<&str>,
        now: u64,
        options: &Options,
    ) {
        let mut hosts: BTreeMap<HostLabels, i64> = BTreeMap::new();
        for h in state.hosts.values() {
            *hosts
                .entry(HostLabels {
                    pool: h.capacity_provider.clone(),
                    // A held host counts by its hold (cordoned, drained, removing), an
                    // impaired or silent registered one as such (it is kept, not replaced).
                    state: match h.hold {
                        Some(hold) => hold.as_str().to_string(),
                        None if h.is_registered() && h.mps_health == MpsHealth::Impaired => {
                            "impaired".to_string()
                        }
                        None if h.is_registered() && options.silence(h, now).is_some() => {
                            "silent".to_string()
                        }
                        None => label(&h.state),
                    },
                })
                .or_default() += 1;
        }
        self.hosts.clear();
        for (l, n) in hosts {
            self.hosts.get_or_create(&l).set(n);
        }
        let mut tasks: BTreeMap<TaskLabels, i64> = BTreeMap::new();
        for t in state.tasks.values() {
            *tasks
                .entry(TaskLabels {
                    service: t.service.clone(),
                    state: label(&t.state),
                })
                .or_default() += 1;
        }
        self.tasks.clear();
        for (l, n) in tasks {
            self.tasks.get_or_create(&l).set(n);
        }
        // Per GPU, as `show --json` reports them (one computation of a GPU's load).
        let mut gpus: BTreeMap<GpuLabels, i64> = BTreeMap::new();
        let mut unallocated: BTreeMap<PoolLabels, i64> = BTreeMap::new();
        for (h, _, usage) in gpushare_core::render::fleet_usage(state) {
            if !matches!(h.state, HostState::Pending | HostState::Running) {
                continue;
            }
            for g in usage {
                *gpus
                    .entry(GpuLabels {
                        pool: h.capacity_provider.clone(),
                        mode: label(&g.mode),
                    })
                    .or_default() += 1;
                let free = g.memory_mib.saturating_sub(g.allocated_memory_mib);
                *unallocated
                    .entry(PoolLabels {
                        pool: h.capacity_provider.clone(),
                    })
                    .or_default() += i64::try_from(free).unwrap_or(i64::MAX);
            }
        }
        self.gpus.clear();
        for (l, n) in gpus {
            self.gpus.get_or_create(&l).set(n);
        }
        self.unallocated.clear();
        for (l, n) in unallocated {
            self.unallocated.get_or_create(&l).set(n);
        }
        self.health(state);
        self.services.set(state, now);
        self.jobs.set(state);
        self.cost.set(hourly_cost);
        if let Some(c) = commit {
            self.commit.clear();
            self.commit
                .get_or_create(&CommitLabels {
                    commit: c.to_string(),
                })
                .set(1);
        }
    }

    /// The newest refused commit and why, or none.
    pub fn refused(&self, refused: Option<(&str, &str)>) {
        self.refused.clear();
        if let Some((commit, reason)) = refused {
            self.refused
                .get_or_create(&RefusedLabels {
                    commit: commit.to_string(),
                    reason: reason.to_string(),
                })
                .set(1);
        }
    }

    /// Ready: the last pass did not find the source broken, and the last pass that
    /// succeeded finished within two intervals.
    pub fn ready(&self) -> bool {
        if self.broken.load(std::sync::atomic::Ordering::SeqCst) {
            return false;
        }
        let last = self.last_success.lock().ok().and_then(|t| *t);
        last.is_some_and(|t| t.elapsed() <= self.interval * 2)
    }

    fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode_registry(&mut out, &self.registry)?;
        prometheus_client::encoding::text::encode_registry(&mut out, &self.tasks_registry)?;
        prometheus_client::encoding::text::encode_eof(&mut out)?;
        Ok(out)
    }
}

/// A state's name as serialised (`running`, `shutting_down`).
fn label<T: serde::Serialize + std::fmt::Debug>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => format!("{v:?}").to_lowercase(),
    }
}

impl PartialOrd for HostLabels {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for HostLabels {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (&self.pool, &self.state).cmp(&(&other.pool, &other.state))
    }
}
impl PartialOrd for TaskLabels {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for TaskLabels {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (&self.service, &self.state).cmp(&(&other.service, &other.state))
    }
}

/// The most tasks the per-task GPU use metrics carry (a bounded label set).
pub const MAX_USAGE_TASKS: usize = 5000;

// The operations endpoint is served like the console, under the same limits.
pub use gpushare_console::listen::serve_app;

/// Bind `addr` and serve the endpoints in the background, HTTP/1 only, with
/// the limits of [`gpushare_console::listen`] (connections, header and connection timeouts).
/// With `console`, the web console's routes are served beside them.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    console: Option<axum::Router>,
) -> anyhow::Result<SocketAddr> {
    let mut app = axum::Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(metrics);
    if let Some(console) = console {
        app = app.merge(console);
    }
    let bound = serve_app(addr, app).await?;
    tracing::info!(addr = %bound, "serving /metrics, /healthz and /readyz");
    Ok(bound)
}

async fn metrics_handler(State(m): State<Arc<Metrics>>) -> axum::response::Response {
    match m.encode() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "encoding the metrics failed\n",
        )
            .into_response(),
    }
}

async fn readyz(State(m): State<Arc<Metrics>>) -> (StatusCode, &'static str) {
    if m.ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the source is refused, or no pass succeeded within two intervals (gpushare status says why)\n",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(id: &str, registered: bool, heartbeat: u64) -> gpushare_core::model::Host {
        let mut j = serde_json::json!({
            "id": id, "capacity_provider": "lab", "instance_type": "registered",
            "state": "running", "gpus": [], "cpu_units": 0, "memory_mib": 0,
            "launch_token": "", "last_heartbeat": heartbeat, "launched_at": 0
        });
        if registered {
            j["registration"] = serde_json::json!({ "key_sha256": "k", "joined_at": 0 });
        }
        serde_json::from_value(j).expect("host")
    }

    /// A registered host whose agent went silent is labelled apart (it is kept and
    /// cordoned, not replaced); a cordon outranks it; a launched silent host is still
    /// counted by its state (the planner replaces it).
    #[test]
    fn a_silent_registered_host_is_labelled_silent() {
        let now = 10_000;
        let mut s = StoreState::default();
        for h in [
            host("quiet", true, now - 600),
            host("talking", true, now - 5),
            host("launched-quiet", false, now - 600),
        ] {
            s.hosts.insert(h.id.clone(), h);
        }
        let mut cordoned = host("cordoned-quiet", true, now - 600);
        cordoned.hold = Some(gpushare_core::model::Hold::Cordoned);
        s.hosts.insert(cordoned.id.clone(), cordoned);
        let m = Metrics::new(Duration::from_secs(30));
        m.fleet(&s, 0.0, None, now, &Options::default());
        let text = m.encode().expect("encode");
        let line = |state: &str| {
            text.lines()
                .find(|l| {
                    l.starts_with(&format!(
                        "gpushare_reconcile_hosts{{pool=\"lab\",state=\"{state}\"}}"
                    ))
                })
                .map(|l| l.rsplit(' ').next().unwrap_or("").to_string())
        };
        assert_eq!(line("silent").as_deref(), Some("1"), "{text}");
        assert_eq!(line("running").as_deref(), Some("2"), "{text}");
        assert_eq!(line("cordoned").as_deref(), Some("1"), "{text}");
        // It talks again: no longer silent.
        m.fleet(&s, 0.0, None, now - 550, &Options::default());
        let text = m.encode().expect("encode");
        assert!(!text.contains("state=\"silent\""), "{text}");
    }

    /// Issue 44: the pools whose silent hosts the disruption budget holds back are a
    /// metric, cleared when the budget no longer holds.
    #[test]
    fn held_replacements_are_a_metric_per_pool() {
        let m = Metrics::new(Duration::from_secs(30));
        m.held(&[gpushare_core::plan::HeldPool {
            pool: "lab".into(),
            silent: 3,
            impaired: 0,
            size: 4,
            threshold_percent: 50,
        }]);
        let text = m.encode().expect("encode");
        assert!(
            text.contains("gpushare_reconcile_replacements_held{pool=\"lab\"} 3"),
            "{text}"
        );
        m.held(&[]);
        let text = m.encode().expect("encode");
        assert!(!text.contains("replacements_held{"), "{text}");
    }
}

//! `gpushare-bench scale`: plan and apply time and peak memory as fleets grow (issue 26).
//!
//! The fleet ([`fleet`]): MPS tasks, 50 per service, 20 services per pool of
//! g6.12xlarge hosts (4 L4 GPUs each), on the local simulated cloud. Each case runs
//! in a child process of its own (the same binary, `scale --case CASE --tasks N`), so
//! that its peak memory (`VmHWM` of /proc/self/status, the resident high-water mark)
//! is its own; the parent prints the table and the growth ratios. Printed, never
//! asserted.
//!
//! Cases:
//! - `plan`: the first plan of the fleet, from an empty state (the planner alone);
//! - `replan`: the plan of the same fleet once it runs (every host up and healthy,
//!   every task running), nothing to change; the planner alone, the live state built
//!   in memory (the peak includes building it: the first plan and its state);
//! - `file`, `etcd`: observe, plan and apply from an empty store (the file store in a
//!   temporary directory; a real etcd on loopback ports, started here), then one more
//!   pass, observe and plan, over the state the apply left (nothing to change).

use gpushare_core::model::{Desired, HostState, Live, MpsHealth, StoreState, TaskState};
use gpushare_core::plan::{self, Options, Plan};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map};
use std::time::Instant;

/// Tasks per service in [`fleet`].
pub const TASKS_PER_SERVICE: u32 = 50;
/// Services per pool in [`fleet`].
pub const SERVICES_PER_POOL: u32 = 20;

/// The scale fleet of `tasks` MPS tasks: services of [`TASKS_PER_SERVICE`] tasks (the
/// last one takes the remainder), [`SERVICES_PER_POOL`] services per pool of
/// g6.12xlarge hosts. Service `i` asks for 2, 3, 4, 6 or 8 GiB of GPU memory (`i % 5`),
/// every third one caps its compute at 20 %; half a vCPU and 1 GiB of host memory each.
pub fn fleet(tasks: u32) -> Result<Desired, serde_json::Error> {
    let services = tasks.div_ceil(TASKS_PER_SERVICE);
    let pools = services.div_ceil(SERVICES_PER_POOL);
    let mut capacity_providers = Map::new();
    for p in 0..pools {
        capacity_providers.insert(
            format!("pool-{p:03}"),
            json!({ "instance_type": "g6.12xlarge", "max_size": 1000 }),
        );
    }
    let (mut task_definitions, mut service_defs) = (Map::new(), Map::new());
    for i in 0..services {
        let name = format!("model-{i:05}");
        let memory = [2048, 3072, 4096, 6144, 8192][(i % 5) as usize];
        let mut mps = json!({ "memory": memory });
        if i % 3 == 0 {
            mps["max_compute_percent"] = json!(20);
        }
        task_definitions.insert(
            name.clone(),
            json!({ "container": [{
                "name": "server", "image": format!("registry.example/model-{i}:1"),
                "cpu": 512, "memory": 1024, "gpu": { "mps": mps }
            }] }),
        );
        let count = TASKS_PER_SERVICE.min(tasks - i * TASKS_PER_SERVICE);
        service_defs.insert(
            name.clone(),
            json!({
                "task_definition": name,
                "capacity_provider": format!("pool-{:03}", i / SERVICES_PER_POOL),
                "desired_count": count,
            }),
        );
    }
    serde_json::from_value(json!({
        "settings": { "cluster": "scale", "seed": 1 },
        "capacity_providers": capacity_providers,
        "gpu_instances": {},
        "task_definitions": task_definitions,
        "services": service_defs,
    }))
}

/// [`fleet`]`(tasks)` as the HCL a user would write (what the command cases of the
/// benchmark run `gpushare` on), with `store` as the `gpushare` block's store URL
/// (`None`: the embedded default, `.gpushare/` beside the file) and `image_tag` as the
/// image tag of service 0 (the one changed service of the case `apply-change`).
pub fn fleet_hcl(tasks: u32, store: Option<&str>, image_tag: u32) -> String {
    use std::fmt::Write;
    let services = tasks.div_ceil(TASKS_PER_SERVICE);
    let pools = services.div_ceil(SERVICES_PER_POOL);
    let mut s = String::from("gpushare {\n  cluster = \"scale\"\n  seed    = 1\n");
    if let Some(url) = store {
        let _ = writeln!(s, "  store   = \"{url}\"");
    }
    s.push_str("}\n");
    for p in 0..pools {
        let _ = write!(
            s,
            "\ncapacity_provider \"pool-{p:03}\" {{\n  instance_type = \"g6.12xlarge\"\n  max_size      = 1000\n}}\n"
        );
    }
    for i in 0..services {
        let memory = [2048, 3072, 4096, 6144, 8192][(i % 5) as usize];
        let cap = if i % 3 == 0 {
            "\n        max_compute_percent = 20"
        } else {
            ""
        };
        let tag = if i == 0 { image_tag } else { 1 };
        let count = TASKS_PER_SERVICE.min(tasks - i * TASKS_PER_SERVICE);
        let _ = write!(
            s,
            "\ntask_definition \"model-{i:05}\" {{\n  container \"server\" {{\n    image  = \"registry.example/model-{i}:{tag}\"\n    cpu    = 512\n    memory = 1024\n    gpu {{\n      mps {{\n        memory = {memory}{cap}\n      }}\n    }}\n  }}\n}}\n\nservice \"model-{i:05}\" {{\n  task_definition   = task_definition.model-{i:05}\n  capacity_provider = capacity_provider.pool-{:03}\n  desired_count     = {count}\n}}\n",
            i / SERVICES_PER_POOL
        );
    }
    s
}

/// An empty state of the scale cluster.
pub fn empty_live() -> Live {
    Live {
        state: StoreState {
            cluster: "scale".into(),
            ..StoreState::default()
        },
        observed_at: 1,
        ..Live::default()
    }
}

/// The state once `p` is applied and its fleet runs: every host running with a
/// healthy MPS daemon and a fresh heartbeat, every task running.
pub fn running_after(p: &Plan, observed_at: u64) -> Live {
    let mut live = Live {
        state: p.after.clone(),
        strays: p.strays.clone(),
        foreign: p.foreign.clone(),
        observed_at,
        ..Live::default()
    };
    for (n, h) in live.state.hosts.values_mut().enumerate() {
        if h.state == HostState::Pending {
            h.state = HostState::Running;
            h.instance_id = Some(format!("i-{n:08x}"));
            h.mps_health = MpsHealth::Healthy;
            h.last_heartbeat = Some(observed_at);
        }
    }
    for t in live.state.tasks.values_mut() {
        if t.state == TaskState::Pending {
            t.state = TaskState::Running;
        }
    }
    live
}

/// What one case measured (one line of JSON from the child to the parent).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CaseResult {
    pub case: String,
    pub tasks: u32,
    pub hosts: usize,
    /// Steps of the measured plan (the first plan; for `replan`, the re-plan).
    pub steps: usize,
    /// Seconds of the first plan (for `file`/`etcd`: observe and plan).
    pub plan_s: f64,
    /// Seconds of the apply (`file`, `etcd`).
    pub apply_s: Option<f64>,
    /// Seconds of the re-plan of the unchanged fleet (`replan`: the planner alone;
    /// `file`/`etcd`: observe and plan).
    pub replan_s: Option<f64>,
    /// Of `replan_s` for `file`/`etcd`: the observe.
    pub observe_s: Option<f64>,
    /// Steps of the re-plan (0: nothing to do).
    pub replan_steps: Option<usize>,
    /// Seconds of a load of what the apply left by a new handle of the store (what a
    /// process starting on it reads: `file`, `etcd`).
    #[serde(default)]
    pub cold_load_s: Option<f64>,
    /// The process's resident high-water mark, MiB.
    pub peak_mib: f64,
}

/// The resident high-water mark of this process in MiB (`VmHWM`), 0 where
/// /proc/self/status cannot be read.
pub fn peak_rss_mib() -> f64 {
    vm_hwm_mib("/proc/self/status")
}

/// `VmHWM` of the process whose `/proc/PID/status` is `status`, in MiB; 0 where it
/// cannot be read.
pub fn vm_hwm_mib(status: &str) -> f64 {
    std::fs::read_to_string(status)
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// The `plan` and `replan` cases: the planner alone, in memory.
pub fn planner_case(case: &str, tasks: u32) -> Result<CaseResult, ScaleError> {
    let d = fleet(tasks)?;
    let o = Options::default();
    let empty = empty_live();
    let t = Instant::now();
    let first = plan::plan(&d, &empty, &o)?;
    let plan_s = t.elapsed().as_secs_f64();
    let mut r = CaseResult {
        case: case.into(),
        tasks,
        hosts: first.launches.len(),
        steps: first.steps().len(),
        plan_s,
        ..CaseResult::default()
    };
    if !first.unplaced.is_empty() {
        return Err(ScaleError::Unplaced(first.unplaced.len()));
    }
    if case == "replan" {
        let live = running_after(&first, 2);
        drop(first);
        let t = Instant::now();
        let again = plan::plan(&d, &live, &o)?;
        r.replan_s = Some(t.elapsed().as_secs_f64());
        r.replan_steps = Some(again.steps().len());
    }
    r.peak_mib = peak_rss_mib();
    Ok(r)
}

#[derive(Debug, thiserror::Error)]
pub enum ScaleError {
    #[error("generating the fleet")]
    Fleet(#[from] serde_json::Error),
    #[error("planning")]
    Plan(#[from] plan::PlanError),
    #[error("{0} tasks could not be placed (the fleet's pools are too small)")]
    Unplaced(usize),
}

#[cfg(test)]
mod tests {
    use super::{fleet, fleet_hcl};
    use gpushare_config::{load_sources, LoadOptions, Source};

    /// The HCL the command cases run `gpushare` on is the fleet the engine cases plan.
    #[test]
    fn the_hcl_fleet_loads_to_the_engine_fleet() {
        for tasks in [120, 1000] {
            let text = fleet_hcl(tasks, None, 1);
            let source = Source {
                name: "main.hcl".into(),
                text,
            };
            let mut loaded = load_sources(&[source], &LoadOptions::default())
                .unwrap_or_else(|d| panic!("the generated HCL does not load: {d:?}"));
            loaded.locations.clear();
            let want = fleet(tasks).expect("the engine fleet");
            assert_eq!(loaded.capacity_providers, want.capacity_providers);
            assert_eq!(loaded.task_definitions, want.task_definitions);
            assert_eq!(loaded.services, want.services);
            assert_eq!(loaded.settings.seed, want.settings.seed);
            assert_eq!(loaded.settings.cluster, want.settings.cluster);
        }
        let changed = fleet_hcl(120, None, 2);
        assert!(changed.contains("registry.example/model-0:2"));
        assert!(changed.contains("registry.example/model-1:1"));
    }
}

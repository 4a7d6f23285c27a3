//! How long `apply` takes on the file store and the local fleet as plans grow
//! (a benchmark, not a test: it prints figures and asserts nothing about speed).
//!
//!     cargo bench -p gpushare-engine --bench apply -- 1000 10000
//!
//! For each task count: one service of MPS tasks (4096 MiB, 20 % compute each) on a
//! pool of g6.48xlarge hosts (8 L4 GPUs, 40 such tasks per host), planned from
//! nothing by the real planner, then applied into a fresh temporary directory.

use gpushare_core::model::Desired;
use gpushare_core::plan::{self, Options};
use gpushare_engine::apply::{self, ApplyContext};
use gpushare_engine::cloud::LocalCloud;
use gpushare_engine::observe::observe;
use gpushare_engine::store::FileStore;
use std::time::Instant;

fn desired(tasks: u32) -> Result<Desired, serde_json::Error> {
    serde_json::from_value(serde_json::json!({
        "settings": { "cluster": "bench" },
        "capacity_providers": { "big": { "instance_type": "g6.48xlarge", "max_size": 100000 } },
        "gpu_instances": {},
        "task_definitions": { "e": { "container": [{
            "name": "s", "image": "i", "cpu": 1024, "memory": 1024,
            "gpu": { "mps": { "memory": 4096, "max_compute_percent": 20 } }
        }] } },
        "services": { "e": { "task_definition": "e", "capacity_provider": "big", "desired_count": tasks } },
    }))
}

async fn run(tasks: u32, max_batch: usize) -> Result<(), Box<dyn std::error::Error>> {
    let d = desired(tasks)?;
    let dir = tempfile::tempdir()?;
    let store = FileStore::open(dir.path())?;
    let cloud = LocalCloud::open(dir.path())?;
    let live = observe(&store, &cloud, "bench", 1).await?;
    let t = Instant::now();
    let p = plan::plan(&d, &live, &Options::default())?;
    let plan_time = t.elapsed();
    let mut ctx = ApplyContext::new(&store, &cloud, &d.capacity_providers);
    ctx.max_batch = max_batch;
    let t = Instant::now();
    let report = apply::apply(&p, &ctx).await?;
    let apply_time = t.elapsed();
    let state_bytes = std::fs::metadata(dir.path().join("state.json"))?.len();
    println!(
        "tasks {tasks:>6}  hosts {:>5}  steps {:>6}  max_batch {max_batch:>4}  commits {:>5}  plan {:>9.1?}  apply {:>9.1?}  state.json {:>6} KiB",
        p.launches.len(),
        p.steps().len(),
        report.serial,
        plan_time,
        apply_time,
        state_bytes / 1024
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `cargo bench` passes `--bench`; every other argument is a task count.
    let mut counts: Vec<u32> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    if counts.is_empty() {
        counts = vec![1000, 10000];
    }
    for n in counts {
        run(n, apply::DEFAULT_MAX_BATCH).await?;
        if n <= 1000 {
            run(n, 1).await?;
        }
    }
    Ok(())
}

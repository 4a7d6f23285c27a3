//! A `gpushare_job` through the real `terraform` binary (issue 51): `terraform apply`
//! records the job's progress in the store and starts its first runs (at most
//! `parallelism`), each a task that carries its job, index and attempt; a second
//! plan is clean; `terraform destroy` removes the job and stops its runs. The local
//! fleet's in-process agents stand in for hosts (no GPU here).

mod tfwork;

use gpushare_core::model::{JobState, ResourceAddr, ResourceKind, StoreState};
use gpushare_engine::store::{FileStore, Store};
use tfwork::Workdir;

const MAIN: &str = r#"
terraform {
  required_providers {
    gpushare = {
      source = "gpushare/gpushare"
    }
  }
}

provider "gpushare" {
  cluster   = "tf-job"
  state_dir = ".gpushare"
}

resource "gpushare_capacity_provider" "l4" {
  name          = "l4"
  instance_type = "g6.xlarge"
  max_size      = 2
}

resource "gpushare_task_definition" "simulate" {
  name = "simulate"
  container {
    name    = "sim"
    image   = "ghcr.io/example/av-sim:0.9"
    command = ["simulate"]
    cpu     = 1024
    memory  = 2048
    gpu {
      mps {
        memory = 8192
      }
    }
  }
}

resource "gpushare_job" "sweep" {
  name              = "sweep"
  task_definition   = gpushare_task_definition.simulate.name
  capacity_provider = gpushare_capacity_provider.l4.name
  completions       = 3
  parallelism       = 2
  max_retries       = 1
  indexed           = true
}

output "job_state" {
  value = gpushare_job.sweep.state
}
"#;

fn store(w: &Workdir) -> StoreState {
    let store = FileStore::open(w.path().join(".gpushare")).expect("the file store");
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(store.load())
        .expect("the state")
}

#[test]
fn a_job_applied_by_terraform_is_recorded_with_its_first_runs_and_destroyed_with_them() {
    let w = Workdir::new(MAIN);
    w.ok(&["apply", "-auto-approve", "-no-color"]);
    let state = store(&w);
    let addr = ResourceAddr::new(ResourceKind::Job, "sweep");
    let applied = state.resources.get(&addr).expect("job.sweep in the store");
    assert_eq!(applied.attrs["completions"], 3, "{:#}", applied.attrs);
    assert_eq!(applied.attrs["parallelism"], 2, "{:#}", applied.attrs);
    let rec = applied.job.as_ref().expect("the job's progress record");
    assert_eq!((rec.family.as_str(), rec.revision), ("simulate", 1));
    assert_eq!(rec.state, JobState::Running);
    assert_eq!(rec.indexes.len(), 3);
    // Two runs started (parallelism 2), each attempt 1 of its own index, each a
    // task of the store that carries its job, index and attempt.
    let started: Vec<(usize, &str)> = rec
        .indexes
        .iter()
        .enumerate()
        .flat_map(|(n, i)| i.attempts.iter().map(move |a| (n, a.task_id.as_str())))
        .collect();
    assert_eq!(started.len(), 2, "{rec:#?}");
    for (n, task) in &started {
        let t = state.tasks.get(*task).expect("the run's task");
        let run = t.job.as_ref().expect("a job's run");
        assert_eq!(
            (run.job.as_str(), run.index as usize, run.attempt),
            ("sweep", *n, 1)
        );
        assert!(run.indexed && run.completions == 3, "{run:?}");
    }
    let out = w.ok(&["output", "-raw", "job_state"]);
    assert_eq!(out.trim(), "RUNNING");
    // No perpetual diff.
    let plan = w.run(&["plan", "-detailed-exitcode", "-no-color"]);
    assert_eq!(
        plan.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&plan.stdout)
    );
    // Destroy: the job and its record are gone and no run is left.
    w.ok(&["destroy", "-auto-approve", "-no-color"]);
    let state = store(&w);
    assert!(!state.resources.contains_key(&addr), "{state:#?}");
    assert!(
        state.tasks.values().all(|t| t.job.is_none()),
        "{:#?}",
        state.tasks
    );
}

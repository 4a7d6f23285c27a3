//! The console's pages for registered hosts (issue 45 item 4), rendered from a
//! snapshot built here (apart from render.rs, which the page-load bench includes as it is).

use super::render::pages::{fleet, host, job, jobs};
use super::render::snapshot::Snapshot;
use gpushare_core::model::{Host, StoreState};

/// A store with one host of registered pool `lab` (a joined server, no instance)
/// and the configuration declaring the pool at $1.20 per host and hour.
fn registered_snapshot() -> Snapshot {
    let h: Host = serde_json::from_value(serde_json::json!({
        "id": "gpu-a", "instance_id": null, "capacity_provider": "lab",
        "gpu_instance": null, "instance_type": "", "zone": null, "subnet": null,
        "image_id": null, "state": "running", "mps_health": "healthy",
        "gpus": [{"index": 0, "model": "NVIDIA L4", "memory_mib": 22888}],
        "cpu_units": 16384, "memory_mib": 65536, "launch_token": "",
        "last_heartbeat": 100, "launched_at": 50,
        "registration": {"key_sha256": "k", "joined_at": 50}
    }))
    .expect("a registered host");
    let text = "gpushare {\n  cluster = \"own\"\n  cloud = \"local\"\n}\ncapacity_provider \"lab\" {\n  hosts = \"registered\"\n  host_hourly_cost = \"1.20\"\n}\n";
    let source = gpushare_config::Source {
        name: "main.hcl".into(),
        text: text.into(),
    };
    let desired = gpushare_config::load_sources(&[source], &Default::default())
        .expect("the configuration loads");
    let mut state = StoreState {
        cluster: "own".into(),
        ..StoreState::default()
    };
    let pool = desired.resources();
    for (addr, attrs) in pool {
        state
            .resources
            .insert(addr, gpushare_core::model::AppliedResource::new(attrs));
    }
    state.hosts.insert(h.id.clone(), h);
    Snapshot {
        state,
        observed_at: 100,
        reports: vec![],
        desired: Some(desired),
        plan: Err("not planned".into()),
        commit: None,
        status: None,
        target_groups: Default::default(),
    }
}

/// Issue 45 item 4: a registered host's page says what it is (no "not launched
/// yet", no empty instance type, no "Size 0 to 0"), and both pages price it at
/// its pool's host_hourly_cost, as the plan's cost line does.
#[test]
fn a_registered_host_is_shown_as_one() {
    let snap = registered_snapshot();
    let history = Default::default();
    let page = host(&snap, &history, "gpu-a", 1)
        .expect("the host")
        .expect("renders");
    assert!(page.contains("Registered host"), "{page}");
    assert!(page.contains("$1.200"), "{page}");
    assert!(
        page.contains("registered: as many as have joined"),
        "{page}"
    );
    for wrong in [
        "not launched yet",
        "Size",
        "0 to 0",
        "Instance type</dt><dd> (",
    ] {
        assert!(!page.contains(wrong), "{wrong:?} in {page}");
    }
    let page = fleet(&snap, 1).expect("renders");
    assert!(page.contains("$1.200"), "{page}");
    assert!(!page.contains(">unknown<"), "{page}");
}

/// Issue 51 item 3: the Jobs page has a line per job with its progress, and a job's
/// page each index with every attempt (outcome, host, exit code, reason).
#[test]
fn the_jobs_pages_show_each_job_and_each_attempt() {
    use gpushare_core::model::{JobIndex, JobRecord, ResourceAddr, ResourceKind};
    let mut snap = registered_snapshot();
    let attempts: Vec<gpushare_core::model::JobAttempt> =
        serde_json::from_value(serde_json::json!([
            {"attempt": 1, "task_id": "t-sweep-1a", "host": "gpu-a", "outcome": "failed",
             "exit_code": 3, "reason": "essential container main exited with code 3",
             "started_at": 10, "ended_at": 14},
            {"attempt": 2, "task_id": "t-sweep-1b", "host": "gpu-a", "outcome": "succeeded",
             "exit_code": 0, "started_at": 20, "ended_at": 22}
        ]))
        .expect("attempts");
    let rec = JobRecord {
        family: "sim".into(),
        revision: 1,
        indexes: vec![
            JobIndex::default(),
            JobIndex {
                attempts,
                ..JobIndex::default()
            },
        ],
        ..JobRecord::default()
    };
    let mut r = gpushare_core::model::AppliedResource::new(serde_json::json!({
        "task_definition": "sim", "capacity_provider": "lab", "completions": 2,
        "parallelism": 2, "max_retries": 1,
    }));
    r.job = Some(rec);
    snap.state
        .resources
        .insert(ResourceAddr::new(ResourceKind::Job, "sweep"), r);
    let page = jobs(&snap, 1).expect("renders");
    for want in [
        r#"<a href="/jobs/sweep">sweep</a>"#,
        r#"data-state="running""#,
        r#"<td class="succeeded">1/2</td>"#,
        r#"<td class="failed-attempts">1</td>"#,
    ] {
        assert!(page.contains(want), "{want} not in {page}");
    }
    let page = job(&snap, "sweep", 1).expect("the job").expect("renders");
    for want in [
        "1/2 succeeded, 0 running, 1 pending",
        r#"<td colspan="7">not started</td>"#,
        r#"<tr data-index="1" data-attempt="1">"#,
        "<code>t-sweep-1a</code>",
        r#"<td class="exit">3</td>"#,
        "essential container main exited with code 3",
        r#"<td class="outcome">succeeded</td>"#,
        "<td>4</td>",
    ] {
        assert!(page.contains(want), "{want} not in {page}");
    }
    assert!(job(&snap, "nothing", 1).is_none());
}

//! The console's pages rendered from snapshots built here: registered hosts (issue 45
//! item 4), a host's own tasks, usage, jobs.

use crate::pages::{fleet, host, job, jobs, services};
use crate::snapshot::Snapshot;
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
        by_host: Default::default(),
    }
}

fn task_on(id: &str, host: &str) -> gpushare_core::model::Task {
    gpushare_core::model::Task {
        ports: Vec::new(),
        id: id.into(),
        service: "svc".into(),
        family: "svc".into(),
        revision: 1,
        host: host.into(),
        gpus: vec![0],
        shape: gpushare_core::model::TaskShape::default(),
        state: gpushare_core::model::TaskState::Running,
        job: None,
        scrape: None,
    }
}

/// A host's page lists the tasks placed on it, and only those (read from the
/// snapshot's index of tasks by host, issue 52).
#[test]
fn a_host_page_lists_its_own_tasks() {
    let mut snap = registered_snapshot();
    for (id, on) in [
        ("task-mine-1", "gpu-a"),
        ("task-other", "gpu-b"),
        ("task-mine-2", "gpu-a"),
    ] {
        snap.state.tasks.insert(id.into(), task_on(id, on));
    }
    let on_a: Vec<&str> = snap.tasks_on("gpu-a").map(|t| t.id.as_str()).collect();
    assert_eq!(on_a, ["task-mine-1", "task-mine-2"]);
    assert_eq!(snap.tasks_on("gpu-z").count(), 0);
    let page = host(&snap, &Default::default(), "gpu-a", 1)
        .expect("the host")
        .expect("renders");
    assert!(
        page.contains("task-mine-1") && page.contains("task-mine-2"),
        "{page}"
    );
    assert!(!page.contains("task-other"), "{page}");
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

/// An L4 host running task `emb-1` of service `embedder` (4096 MiB declared on GPU
/// 0), its agent reporting it uses `used` MiB at SM 40% at `at`. A stand-in for a
/// GPU's usage report (no GPU here): the numbers are what the agent would send.
fn used_snapshot(used: u64, at: u64) -> Snapshot {
    let mut snap = registered_snapshot();
    let task: gpushare_core::model::Task = serde_json::from_value(serde_json::json!({
        "id": "emb-1", "service": "embedder", "family": "embedder", "revision": 1,
        "host": "gpu-a", "gpus": [0], "state": "running",
        "shape": {"cpu_units": 256, "memory_mib": 512,
                  "gpu": {"type": "mps", "memory_mib": 4096, "compute_percent": 0, "capped": false}}
    }))
    .expect("a task");
    snap.state.tasks.insert(task.id.clone(), task);
    let report: gpushare_core::model::HostReport = serde_json::from_value(serde_json::json!({
        "host_id": "gpu-a", "at": at, "mps_health": "healthy",
        "gpus": [{"index": 0, "model": "NVIDIA L4", "memory_mib": 22888}],
        "tasks": {"emb-1": "running"},
        "task_details": {"emb-1": {"state": "running", "since": 50,
            "usage": {"gpu_memory_mib": used, "peak_gpu_memory_mib": used,
                      "sm_percent": 40, "gpus": [0], "at": at}}}
    }))
    .expect("a report");
    snap.reports = vec![report];
    snap.observed_at = at;
    snap
}

/// Issue 49: every GPU bar shows what its tasks use beside what they declared, on
/// the fleet page and the host page; without a usage report, no "used".
#[test]
fn gpu_bars_show_used_beside_declared() {
    let snap = used_snapshot(1300, 100);
    let history = Default::default();
    let fleet_page = fleet(&snap, 1).expect("renders");
    let host_page = host(&snap, &history, "gpu-a", 1)
        .expect("the host")
        .expect("renders");
    for page in [&fleet_page, &host_page] {
        assert!(
            page.contains(
                r#"data-task="emb-1" data-service="embedder" data-memory="4096" data-used="1300""#
            ),
            "{page}"
        );
        assert!(page.contains("emb-1 uses 1300 of 4096 MiB"), "{page}");
        assert!(page.contains("4096/22888 MiB mps, used 1300"), "{page}");
    }
    let mut silent = used_snapshot(1300, 100);
    silent.reports.clear();
    let page = fleet(&silent, 1).expect("renders");
    assert!(page.contains(r#"data-memory="4096""#), "{page}");
    assert!(
        !page.contains("data-used") && !page.contains(", used "),
        "{page}"
    );
}

/// Issue 49: the services page draws each service's GPU memory use over the last
/// hour from what the console recorded, one point a minute (a later observation in
/// the same minute replaces that minute's), never more than 60 points.
#[test]
fn a_service_has_a_sparkline_of_its_last_hour_with_one_point_a_minute() {
    let mut history = crate::history::History::default();
    let page = services(&used_snapshot(1000, 6_000), &history, 1).expect("renders");
    assert!(!page.contains("sparkline"), "nothing recorded yet: {page}");
    for (minute, used) in [(100, 1000), (101, 1800), (101, 2000), (102, 1500)] {
        history.record(&used_snapshot(used, minute * 60 + 5));
    }
    let points = history.usage("embedder");
    let seen: Vec<(u64, u64)> = points.iter().map(|p| (p.minute, p.used_mib)).collect();
    assert_eq!(seen, [(100, 1000), (101, 2000), (102, 1500)]);
    let page = services(&used_snapshot(1500, 102 * 60 + 5), &history, 1).expect("renders");
    assert!(
        page.contains(r#"class="sparkline""#)
            && page.contains(r#"data-points="3" data-used="1500" data-peak="2000""#),
        "{page}"
    );
    assert!(
        page.contains("1500 MiB now over 1 task(s), peak 2000 MiB, SM 40% on average"),
        "{page}"
    );
    // Two hours of minutes: an hour is kept.
    for minute in 200..320 {
        history.record(&used_snapshot(minute, minute * 60));
    }
    let points = history.usage("embedder");
    assert_eq!(points.len(), 60);
    assert_eq!(points.first().map(|p| p.minute), Some(260));
    // A service gone from the state is forgotten.
    let mut gone = used_snapshot(1, 320 * 60);
    gone.state.tasks.clear();
    history.record(&gone);
    assert!(history.usage("embedder").is_empty());
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

//! The console's pages for registered hosts (issue 45 item 4), rendered from a
//! snapshot built here (apart from render.rs, which the page-load bench includes as it is).

use super::render::pages::{fleet, host};
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

//! One resource of `Desired` by its address (crates/core/src/model/desired_ops.rs):
//! every kind, jobs included, goes in from its attributes and out again, and the
//! kinds that reference others name them.

use gpushare_core::model::*;
use gpushare_testkit::plan::*;

fn addr(kind: ResourceKind, name: &str) -> ResourceAddr {
    ResourceAddr::new(kind, name.to_string())
}

fn with_everything() -> Desired {
    let mut d = quickstart(2);
    d.task_definitions
        .insert("sim".into(), mps_td("ghcr.io/example/sim:1", 10240, None));
    d.jobs.insert("sweep".into(), job("sim", "l4", 4, 2));
    d
}

#[test]
fn every_kind_round_trips_through_put_and_put_from() {
    let d = with_everything();
    let all = d.resources();
    for kind in [
        ResourceKind::CapacityProvider,
        ResourceKind::TaskDefinition,
        ResourceKind::Service,
        ResourceKind::Job,
    ] {
        assert!(all.keys().any(|a| a.kind == kind), "{kind:?} in the sample");
    }
    let mut again = d.empty_like();
    for (a, v) in &all {
        again.put(a, v).expect("put");
        assert!(again.contains(a), "{a}");
    }
    assert_eq!(again.resources(), all);
    for a in all.keys() {
        assert!(again.references_resolve(a), "{a}");
        let mut one = d.empty_like();
        assert!(one.put_from(&d, a), "{a}");
        assert_eq!(one.resources().len(), 1);
        assert_eq!(one.resources().get(a), all.get(a));
    }
    assert!(!again.put_from(&d, &addr(ResourceKind::Service, "nope")));
    let bad = serde_json::json!({"desired_count": "many"});
    assert!(again.put(&addr(ResourceKind::Service, "x"), &bad).is_err());
}

#[test]
fn a_service_and_a_job_depend_on_their_task_definition_and_pool() {
    let d = with_everything();
    let pool = addr(ResourceKind::CapacityProvider, "l4");
    assert_eq!(
        d.dependencies(&addr(ResourceKind::Job, "sweep")),
        vec![addr(ResourceKind::TaskDefinition, "sim"), pool.clone()]
    );
    let (name, s) = d.services.iter().next().expect("a service");
    assert_eq!(
        d.dependencies(&addr(ResourceKind::Service, name)),
        vec![
            addr(ResourceKind::TaskDefinition, &s.task_definition),
            addr(ResourceKind::CapacityProvider, &s.capacity_provider),
        ]
    );
    assert!(d.dependencies(&pool).is_empty());
    assert!(d
        .dependencies(&addr(ResourceKind::Service, "nope"))
        .is_empty());
    let mut less = d.clone();
    assert!(less.remove(&pool));
    assert!(!less.remove(&pool), "already gone");
    assert!(!less.references_resolve(&addr(ResourceKind::Job, "sweep")));
}

#[test]
fn addresses_list_what_resources_keys() {
    let d = with_everything();
    let keys: Vec<ResourceAddr> = d.resources().into_keys().collect();
    assert_eq!(d.addresses(), keys);
}

/// The state's records, one-off jobs aside, as the configuration gives them.
fn applied(d: &Desired) -> StoreState {
    let mut s = StoreState::default();
    for (a, v) in d.resources() {
        s.resources.insert(a, AppliedResource::new(v));
    }
    s
}

#[test]
fn as_applied_plans_the_records_not_the_configuration_and_names_an_unreadable_one() {
    let was = with_everything();
    let mut state = applied(&was);
    let mut one_off =
        AppliedResource::new(serde_json::to_value(job("sim", "l4", 1, 1)).expect("job as JSON"));
    one_off.one_off = true;
    state
        .resources
        .insert(addr(ResourceKind::Job, "adhoc"), one_off);
    // The configuration moved on: a service edited, the job gone.
    let mut now = was.clone();
    now.jobs.clear();
    if let Some(s) = now.services.values_mut().next() {
        s.desired_count += 1;
    }
    let planned = now.as_applied(&state).expect("readable");
    assert_eq!(
        planned.resources(),
        was.resources(),
        "the one-off job stays out"
    );
    assert_eq!(planned.settings, now.settings);
    // One-off jobs come from `with_one_off_jobs`; an unreadable one stops the plan.
    let with = with_one_off_jobs(&planned, &state)
        .expect("readable")
        .expect("the one-off job");
    assert_eq!(with.jobs.len(), 2, "sweep as applied and adhoc");
    assert!(with.jobs.contains_key("adhoc"));
    if let Some(r) = state.resources.get_mut(&addr(ResourceKind::Job, "adhoc")) {
        r.attrs = serde_json::json!({"task_definition": 7});
    }
    let e = with_one_off_jobs(&now, &state).expect_err("unreadable");
    assert_eq!(e.addr, addr(ResourceKind::Job, "adhoc"));
    let live = Live {
        state: state.clone(),
        ..empty_live()
    };
    let plan_err =
        gpushare_core::plan::plan(&now, &live, &Default::default()).expect_err("the plan refuses");
    assert_eq!(plan_err.addr(), &addr(ResourceKind::Job, "adhoc"));
    assert!(
        plan_err
            .to_string()
            .contains("job.adhoc as recorded in the state does not read"),
        "{plan_err}"
    );
    if let Some(r) = state
        .resources
        .get_mut(&addr(ResourceKind::Service, "embedder"))
    {
        r.attrs = serde_json::json!({"desired_count": "many"});
    }
    let e = was.as_applied(&state).expect_err("unreadable service");
    assert_eq!(e.addr.kind, ResourceKind::Service);
}

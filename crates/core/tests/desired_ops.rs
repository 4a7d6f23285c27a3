//! One resource of `Desired` by its address (crates/core/src/model/desired_ops.rs):
//! every kind, jobs included, goes in from its attributes and out again, and the
//! kinds that reference others name them.

mod plan_support;
use gpushare_core::model::*;
use plan_support::*;

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

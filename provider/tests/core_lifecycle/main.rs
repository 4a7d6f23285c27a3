//! The protocol-free core through a whole lifecycle on a real file store and the
//! local fleet, with Terraform's plan-validity and apply-consistency rules
//! checked on every plan and apply response (checks.rs).

mod checks;

use checks::{apply_consistent, plan_valid};
use gpushare_core::model::ResourceKind;
use gpushare_core::schema::schema;
use gpushare_engine::store::{FileStore, Store};
use gpushare_provider::cty::Value;
use gpushare_provider::diag::{has_errors, path_string, PathStep};
use gpushare_provider::handler::{Handler, Planned};
use gpushare_provider::schema::{provider_type, resource_type};
use serde_json::json;

fn value(kind: ResourceKind, j: serde_json::Value) -> Value {
    Value::from_json(&j, resource_type(kind)).unwrap()
}

/// What Terraform proposes: the configuration, with computed attributes left null
/// in it taken from the prior state.
fn proposed(kind: ResourceKind, prior: &Value, config: &Value) -> Value {
    let mut out = config.clone();
    if let Value::Map(m) = &mut out {
        for a in schema(kind).attributes.iter().filter(|a| a.computed) {
            if m.get(&a.name).is_none_or(Value::is_null) {
                m.insert(
                    a.name.clone(),
                    prior.attr(&a.name).cloned().unwrap_or(Value::Null),
                );
            }
        }
    }
    out
}

async fn plan(core: &Handler, kind: ResourceKind, prior: &Value, config: &Value) -> Planned {
    let proposed = if config.is_null() {
        Value::Null
    } else {
        proposed(kind, prior, config)
    };
    let p = core
        .plan_resource_change(&kind.terraform_type(), prior, &proposed, config)
        .await;
    assert!(!has_errors(&p.diags), "{:?}", p.diags);
    let errs = plan_valid(schema(kind), prior, config, &p.planned);
    assert!(errs.is_empty(), "invalid plan for {kind:?}: {errs:?}");
    p
}

async fn apply(core: &Handler, kind: ResourceKind, prior: &Value, planned: &Value) -> Value {
    let (new, diags) = core
        .apply_resource_change(&kind.terraform_type(), prior, planned)
        .await;
    assert!(!has_errors(&diags), "{diags:?}");
    let errs = apply_consistent(planned, &new);
    assert!(errs.is_empty(), "inconsistent apply for {kind:?}: {errs:?}");
    new
}

async fn plan_apply(
    core: &Handler,
    kind: ResourceKind,
    prior: &Value,
    config: &Value,
) -> (Planned, Value) {
    let p = plan(core, kind, prior, config).await;
    let new = apply(core, kind, prior, &p.planned).await;
    (p, new)
}

fn provider_config(dir: &std::path::Path) -> Value {
    Value::from_json(
        &json!({"cluster": "t", "state_dir": dir.to_str().unwrap()}),
        provider_type(),
    )
    .unwrap()
}

/// A provider process (a handler) configured on the store in `dir`.
async fn configured(dir: &std::path::Path) -> Handler {
    let core = Handler::new();
    let d = core.configure(&provider_config(dir)).await;
    assert!(!has_errors(&d), "{d:?}");
    core
}

#[tokio::test]
#[allow(
    clippy::too_many_lines,
    reason = "one provider lifecycle, step by step"
)]
async fn lifecycle_obeys_terraform_rules_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let core = configured(dir.path()).await;
    let (cp, td, svc) = (
        ResourceKind::CapacityProvider,
        ResourceKind::TaskDefinition,
        ResourceKind::Service,
    );

    let pool_cfg = value(
        cp,
        json!({"name": "l4", "instance_type": "g6.12xlarge", "max_size": 4}),
    );
    let (p, pool) = plan_apply(&core, cp, &Value::Null, &pool_cfg).await;
    assert_eq!(
        p.planned.attr("id"),
        Some(&Value::string("l4")),
        "id is planned exactly"
    );
    assert!(p.planned.attr("desired_size").unwrap().is_unknown());

    let td_cfg = value(
        td,
        json!({"name": "emb", "container": [{"name": "s", "image": "x", "gpu": {"mps": {"memory": 6144, "max_compute_percent": 25}}}]}),
    );
    let (_, task_def) = plan_apply(&core, td, &Value::Null, &td_cfg).await;
    assert_eq!(task_def.attr("revision"), Some(&Value::int(1)));

    let svc_cfg = value(
        svc,
        json!({"name": "emb", "task_definition": "emb", "capacity_provider": "l4", "desired_count": 5}),
    );
    let (_, service) = plan_apply(&core, svc, &Value::Null, &svc_cfg).await;
    assert_eq!(service.attr("running_count"), Some(&Value::int(5)));
    let Some(Value::List(placements)) = service.attr("placements") else {
        panic!("{service:?}")
    };
    assert_eq!(placements.len(), 5);
    // The service's first deployment, as the store records it (issue 43): its tasks
    // just started, none healthy yet.
    assert_eq!(service.attr("deployment_id"), Some(&Value::string("emb/1")));
    assert_eq!(service.attr("deployment_revision"), Some(&Value::int(1)));
    assert_eq!(
        service.attr("deployment_state"),
        Some(&Value::string("IN_PROGRESS"))
    );
    assert_eq!(
        service.attr("deployment_failed_tasks"),
        Some(&Value::int(0))
    );
    assert_eq!(
        service.attr("deployment_previous_revision"),
        Some(&Value::Null)
    );
    assert_eq!(service.attr("deployment_reason"), Some(&Value::Null));

    // Refresh: nothing drifts, and the pool now reports its hosts.
    let (read, _) = core.read_resource("gpushare_service", &service).await;
    assert_eq!(read, service);
    let (pool, _) = core
        .read_resource("gpushare_capacity_provider", &pool)
        .await;
    assert!(matches!(pool.attr("desired_size"), Some(Value::Number(_))));
    // An unchanged configuration plans no change.
    let p = plan(&core, svc, &service, &svc_cfg).await;
    assert_eq!(p.planned, service);
    assert!(p.requires_replace.is_empty());

    // In place: desired_count.
    let svc_cfg2 = value(
        svc,
        json!({"name": "emb", "task_definition": "emb", "capacity_provider": "l4", "desired_count": 2}),
    );
    let (p, service) = plan_apply(&core, svc, &service, &svc_cfg2).await;
    assert!(p.requires_replace.is_empty());
    assert!(p.planned.attr("running_count").unwrap().is_unknown());
    assert_eq!(service.attr("running_count"), Some(&Value::int(2)));

    // A new container image registers revision 2 in place.
    let td_cfg2 = value(
        td,
        json!({"name": "emb", "container": [{"name": "s", "image": "y", "gpu": {"mps": {"memory": 6144, "max_compute_percent": 25}}}]}),
    );
    let (p, task_def) = plan_apply(&core, td, &task_def, &td_cfg2).await;
    assert!(p.requires_replace.is_empty());
    assert_eq!(task_def.attr("revision"), Some(&Value::int(2)));

    // Forces replacement: the pool's instance type.
    let pool_cfg2 = value(
        cp,
        json!({"name": "l4", "instance_type": "g6.24xlarge", "max_size": 4}),
    );
    let p = plan(&core, cp, &pool, &pool_cfg2).await;
    assert_eq!(
        p.requires_replace,
        vec![vec![PathStep::Attr("instance_type".into())]]
    );

    // Import: the state built from the store plans clean against the configuration.
    let (imported, d) = core.import("gpushare_service", "emb").await;
    assert!(!has_errors(&d), "{d:?}");
    let (imported, _) = core.read_resource("gpushare_service", &imported).await;
    let p = plan(&core, svc, &imported, &svc_cfg2).await;
    assert_eq!(p.planned, imported, "import then plan is clean");
    let (imported_td, _) = core.import("gpushare_task_definition", "emb").await;
    let p = plan(&core, td, &imported_td, &td_cfg2).await;
    assert_eq!(p.planned, imported_td, "import then plan is clean");
    let (_, d) = core.import("gpushare_service", "nope").await;
    assert!(d.iter().any(|d| d.detail.contains("emb")), "{d:?}");

    // Data sources.
    let (placements, d) = core
        .read_data_source(
            "gpushare_placements",
            &Value::from_json(
                &json!({"service": "emb"}),
                gpushare_provider::schema::data_source_type("gpushare_placements").unwrap(),
            )
            .unwrap(),
        )
        .await;
    assert!(d.is_empty(), "{d:?}");
    assert!(matches!(placements.attr("task_ids"), Some(Value::List(v)) if v.len() == 2));
    assert_eq!(
        placements.attr("gpu_memory_mib"),
        Some(&Value::int(2 * 6144))
    );

    // Destroy in dependency order; nothing remains in the store.
    for (kind, prior) in [(svc, service), (td, task_def), (cp, pool)] {
        let p = plan(&core, kind, &prior, &Value::Null).await;
        let new = apply(&core, kind, &prior, &p.planned).await;
        assert!(new.is_null());
    }
    let state = FileStore::open(dir.path()).unwrap().load().await.unwrap();
    assert!(state.tasks.is_empty(), "{:?}", state.tasks.keys());
    assert!(
        state.hosts.values().all(|h| !h.state.is_active()),
        "{:?}",
        state.hosts
    );
    assert!(state.resources.is_empty());
}

#[tokio::test]
async fn validation_reports_attribute_paths() {
    let core = Handler::new();
    let cfg = value(
        ResourceKind::TaskDefinition,
        json!({"name": "t", "container": [{"name": "a", "image": "x", "gpu": {"mps": {"memory": 0, "max_compute_percent": 101}}}]}),
    );
    let d = core.validate_resource("gpushare_task_definition", &cfg);
    let paths: Vec<String> = d
        .iter()
        .filter_map(|d| d.path.as_deref().map(path_string))
        .collect();
    assert!(
        paths.contains(&"container[0].gpu.mps.memory".to_string()),
        "{paths:?}"
    );
    assert!(
        paths.contains(&"container[0].gpu.mps.max_compute_percent".to_string()),
        "{paths:?}"
    );
    let d = core.validate_resource("gpushare_nope", &Value::Null);
    assert!(has_errors(&d));
}

/// Regression (issue 30, item 1): a task cannot set the variables that carry its MPS
/// limits, in `env` or `secret_env`, nor forge a second value with a `K=...` key.
#[tokio::test]
async fn env_keys_the_agent_owns_are_refused_with_the_attribute() {
    let core = Handler::new();
    for (attr, key) in [
        ("env", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=99999M,1"),
        ("env", "CUDA_VISIBLE_DEVICES"),
        ("secret_env", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
        ("secret_env", "GPUSHARE_TASK_ID"),
    ] {
        let cfg = value(
            ResourceKind::TaskDefinition,
            json!({"name": "t", "container": [{"name": "a", "image": "x", attr: {"MODEL": "m", key: "0M"}, "gpu": {"mps": {"memory": 512}}}]}),
        );
        let d = core.validate_resource("gpushare_task_definition", &cfg);
        let at = format!("container[0].{attr}");
        assert!(
            d.iter()
                .any(|d| d.path.as_deref().map(path_string) == Some(at.clone())
                    && d.detail.contains(key.split('=').next().unwrap_or(key))),
            "{attr} {key}: {d:?}"
        );
    }
    let ok = value(
        ResourceKind::TaskDefinition,
        json!({"name": "t", "container": [{"name": "a", "image": "x", "env": {"MODEL": "m", "CUDA_LAUNCH_BLOCKING": "1"}, "gpu": {"mps": {"memory": 512}}}]}),
    );
    let d = core.validate_resource("gpushare_task_definition", &ok);
    assert!(!has_errors(&d), "{d:?}");
}

#[tokio::test]
async fn foreign_stores_and_bad_endpoints_are_refused_with_the_attribute() {
    let core = Handler::new();
    let cfg = Value::from_json(
        &json!({"cloud": "ec2", "store": "consul://127.0.0.1:8500", "endpoints": {"ec2": "127.0.0.1:1", "s3": "http://127.0.0.1:2"}}),
        provider_type(),
    )
    .unwrap();
    let d = core.validate_provider_config(&cfg);
    let paths: Vec<String> = d
        .iter()
        .filter_map(|d| d.path.as_deref().map(path_string))
        .collect();
    // cloud = "ec2" itself is accepted (the `ec2` feature is on by default).
    let mut want = vec![
        "endpoints".to_string(),
        "endpoints".to_string(),
        "controller_address".to_string(),
        "store".to_string(),
    ];
    if cfg!(not(feature = "ec2")) {
        want.insert(0, "cloud".to_string());
    }
    assert_eq!(paths, want, "{d:?}");
    // Hosts join the controller: an ec2 fleet needs its address, and then a file store
    // on the controller's machine works.
    let ok = Value::from_json(
        &json!({"cloud": "ec2", "region": "us-east-1", "state_dir": "st", "controller_address": "https://ctl.internal:7443", "endpoints": {"ec2": "http://127.0.0.1:1"}}),
        provider_type(),
    )
    .unwrap();
    let d = core.validate_provider_config(&ok);
    assert_eq!(d.is_empty(), cfg!(feature = "ec2"), "{d:?}");
    let no_controller = Value::from_json(
        &json!({"cloud": "ec2", "region": "us-east-1", "store": "etcd://127.0.0.1:2379/p"}),
        provider_type(),
    )
    .unwrap();
    let paths: Vec<String> = core
        .validate_provider_config(&no_controller)
        .iter()
        .filter_map(|d| d.path.as_deref().map(path_string))
        .collect();
    assert!(
        paths.contains(&"controller_address".to_string()),
        "{paths:?}"
    );
}

#[tokio::test]
async fn stop_provider_cancels_applies() {
    let dir = tempfile::tempdir().unwrap();
    let core = configured(dir.path()).await;
    core.stop();
    let cfg = value(
        ResourceKind::CapacityProvider,
        json!({"name": "l4", "instance_type": "g6.xlarge", "max_size": 1, "min_size": 1}),
    );
    let p = plan(&core, ResourceKind::CapacityProvider, &Value::Null, &cfg).await;
    let (state, d) = core
        .apply_resource_change("gpushare_capacity_provider", &Value::Null, &p.planned)
        .await;
    assert!(state.is_null());
    assert!(d.iter().any(|d| d.summary == "Interrupted"), "{d:?}");
    assert!(FileStore::open(dir.path())
        .unwrap()
        .load()
        .await
        .unwrap()
        .hosts
        .is_empty());
}

/// Creates a pool `pool` of g6.xlarge hosts (one L4 GPU) up to `max_size`.
async fn pool(core: &Handler, pool: &str, max_size: u32) {
    let cfg = value(
        ResourceKind::CapacityProvider,
        json!({"name": pool, "instance_type": "g6.xlarge", "max_size": max_size}),
    );
    plan_apply(core, ResourceKind::CapacityProvider, &Value::Null, &cfg).await;
}

/// Creates a task definition `family` of one container with an MPS share of `memory` MiB.
async fn task_definition(core: &Handler, family: &str, memory: u64) {
    let cfg = value(
        ResourceKind::TaskDefinition,
        json!({"name": family, "container": [{"name": "s", "image": "x", "gpu": {"mps": {"memory": memory}}}]}),
    );
    plan_apply(core, ResourceKind::TaskDefinition, &Value::Null, &cfg).await;
}

/// A pool and a task definition (see [`pool`] and [`task_definition`]).
async fn pool_and_task_definition(
    core: &Handler,
    pool_name: &str,
    max_size: u32,
    family: &str,
    memory: u64,
) {
    pool(core, pool_name, max_size).await;
    task_definition(core, family, memory).await;
}

/// A service `name` of `count` tasks of task definition `family` in pool `pool`.
fn named_service(name: &str, family: &str, pool: &str, count: u32) -> Value {
    value(
        ResourceKind::Service,
        json!({"name": name, "task_definition": family, "capacity_provider": pool, "desired_count": count}),
    )
}

/// A service of `count` tasks of `family` (a family of the same name) in `pool`.
fn service_config(family: &str, pool: &str, count: u32) -> Value {
    named_service(family, family, pool, count)
}

#[tokio::test]
async fn plan_warns_about_tasks_gpushare_cannot_place() {
    let dir = tempfile::tempdir().unwrap();
    let core = configured(dir.path()).await;
    let svc = ResourceKind::Service;
    // One host with one 22888 MiB GPU; each task wants 16000 MiB: only one fits.
    pool_and_task_definition(&core, "one", 1, "big", 16000).await;
    let svc_cfg = service_config("big", "one", 2);
    let p = plan(&core, svc, &Value::Null, &svc_cfg).await;
    let warned: Vec<_> = p
        .diags
        .iter()
        .filter(|d| d.summary == "Task not placed")
        .collect();
    assert_eq!(warned.len(), 1, "{:?}", p.diags);
    assert_eq!(
        warned[0].path.as_deref().map(path_string),
        Some("desired_count".to_string())
    );
    // And what the change does to the fleet, with its cost.
    let fleet: Vec<_> = p
        .diags
        .iter()
        .filter(|d| d.summary == "Fleet change after service.big")
        .collect();
    assert_eq!(fleet.len(), 1, "{:?}", p.diags);
    let detail = &fleet[0].detail;
    assert!(
        detail.contains("1 host to launch") && detail.contains("1 task to place"),
        "{detail}"
    );
    assert!(detail.contains("now $0.00, after $"), "{detail}");
    // Where it lands: the host to launch, and the task on it with its GPU.
    let launch = detail
        .lines()
        .find(|l| l.trim_start().starts_with("+ h-"))
        .unwrap_or_else(|| panic!("no host to launch listed: {detail}"));
    let host = launch.trim_start()[2..]
        .split(' ')
        .next()
        .unwrap_or_default();
    assert!(
        detail
            .lines()
            .any(|l| l.contains("big: start 1") && l.contains(&format!("on {host} GPU "))),
        "{detail}"
    );
    // A service whose pool is not in the store yet (created in the same run) is not checked.
    let other = value(
        svc,
        json!({"name": "x", "task_definition": "big", "capacity_provider": "later", "desired_count": 9}),
    );
    assert!(plan(&core, svc, &Value::Null, &other)
        .await
        .diags
        .is_empty());
}

/// One `Fleet change` warning per new fact, not one per resource: the first change of a
/// pool in a run warns; a later one warns again when it changes hosts, moves, stops
/// or the cost text (cost, saving, hints), with everything the run planned before it;
/// the same change planned again does not.
#[tokio::test]
async fn a_run_warns_about_the_fleet_again_only_when_hosts_or_cost_change() {
    let dir = tempfile::tempdir().unwrap();
    let core = configured(dir.path()).await;
    let svc = ResourceKind::Service;
    // g6.xlarge: one L4 GPU. Two 4000 MiB tasks share it; a 16000 MiB one does not fit beside them.
    pool_and_task_definition(&core, "shared", 3, "small", 4000).await;
    task_definition(&core, "large", 16000).await;
    let service = |name: &str, family: &str| named_service(name, family, "shared", 1);
    let fleet = |p: &Planned| -> Vec<String> {
        p.diags
            .iter()
            .filter(|d| d.summary.starts_with("Fleet change after "))
            .map(|d| format!("{}: {}", d.summary, d.detail))
            .collect()
    };
    let a = plan(&core, svc, &Value::Null, &service("a", "small")).await;
    let said = fleet(&a);
    assert_eq!(said.len(), 1, "{:?}", a.diags);
    assert!(
        said[0].contains("1 host to launch") && said[0].contains("1 task to place"),
        "{said:?}"
    );
    // b fits on the host planned for a: no host, but the saving changes (two tasks
    // share the GPU now), and the warnings give `gpushare plan`'s figures.
    let b = plan(&core, svc, &Value::Null, &service("b", "small")).await;
    let said = fleet(&b);
    assert_eq!(said.len(), 1, "{:?}", b.diags);
    assert!(
        said[0].contains("1 host to launch")
            && said[0].contains("2 tasks to place")
            && said[0].contains("MPS sharing: 2 tasks on 1 GPU"),
        "{said:?}"
    );
    // The same change planned again adds no fact: no warning.
    let again = plan(&core, svc, &Value::Null, &service("b", "small")).await;
    assert!(fleet(&again).is_empty(), "{:?}", again.diags);
    let c = plan(&core, svc, &Value::Null, &service("c", "large")).await;
    let said = fleet(&c);
    assert_eq!(said.len(), 1, "{:?}", c.diags);
    assert!(
        said[0].contains("2 hosts to launch") && said[0].contains("3 tasks to place"),
        "{said:?}"
    );
    // A new provider process (the next terraform run) warns afresh.
    let next = configured(dir.path()).await;
    let b = plan(&next, svc, &Value::Null, &service("b", "small")).await;
    assert_eq!(fleet(&b).len(), 1, "{:?}", b.diags);
}

/// Seconds the test clock runs ahead of the system clock.
static CLOCK_AHEAD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn test_clock() -> u64 {
    gpushare_core::util::unix_now() + CLOCK_AHEAD.load(std::sync::atomic::Ordering::SeqCst)
}

/// Regression: the provider planned with a heartbeat timeout of 0, so a host whose agent
/// went silent was never replaced through Terraform (the CLI's timeout was 120 s). Both
/// now run the engine's one reconcile pass with the same planner options.
#[tokio::test]
async fn a_silent_host_is_drained_through_the_provider_too() {
    use gpushare_core::model::HostState;
    use gpushare_engine::cloud::{Fault, LocalCloud};

    let dir = tempfile::tempdir().unwrap();
    let core = Handler::new().with_clock(test_clock);
    let d = core.configure(&provider_config(dir.path())).await;
    assert!(!has_errors(&d), "{d:?}");
    let svc = ResourceKind::Service;
    pool_and_task_definition(&core, "l4", 4, "emb", 6144).await;
    let svc_cfg = service_config("emb", "l4", 2);
    let (_, service) = plan_apply(&core, svc, &Value::Null, &svc_cfg).await;

    let store = FileStore::open(dir.path()).unwrap();
    let state = store.load().await.unwrap();
    let silent: Vec<String> = state.hosts.keys().cloned().collect();
    assert_eq!(silent.len(), 1, "two small tasks share one GPU: {silent:?}");
    let silent = &silent[0];
    LocalCloud::open(dir.path())
        .unwrap()
        .inject_fault("t", silent, Fault::Silent)
        .unwrap();
    // Ten minutes later the silent host's last report is far past the 120 s timeout.
    CLOCK_AHEAD.store(600, std::sync::atomic::Ordering::SeqCst);

    let svc_cfg3 = service_config("emb", "l4", 3);
    let (_, service) = plan_apply(&core, svc, &service, &svc_cfg3).await;
    assert_eq!(service.attr("running_count"), Some(&Value::int(3)));
    let state = store.load().await.unwrap();
    // Retired (its record gone) or still draining, never kept as it was.
    if let Some(old) = state.hosts.get(silent) {
        assert!(
            !old.state.is_active() || old.state == HostState::Draining,
            "the silent host was not drained: {old:?}"
        );
    }
    let live_tasks: Vec<_> = state
        .tasks
        .values()
        .filter(|t| {
            t.service == "emb"
                && !matches!(
                    t.state,
                    gpushare_core::model::TaskState::Stopped
                        | gpushare_core::model::TaskState::Failed
                )
        })
        .collect();
    assert_eq!(live_tasks.len(), 3, "{live_tasks:?}");
    assert!(
        live_tasks.iter().all(|t| &t.host != silent),
        "tasks left on the silent host: {live_tasks:?}"
    );
}

/// Creates service `name` as Terraform would, planned on its values alone (a plan
/// that bypasses the plan-time checks, as a stale saved plan would): the result
/// and the diagnostics.
async fn create_service(core: &Handler, cfg: Value) -> (Value, Vec<gpushare_provider::diag::Diag>) {
    let kind = ResourceKind::Service;
    let planned = core
        .plan_values(
            &kind.terraform_type(),
            &Value::Null,
            &proposed(kind, &Value::Null, &cfg),
            &cfg,
        )
        .planned;
    let (new, diags) = core
        .apply_resource_change(&kind.terraform_type(), &Value::Null, &planned)
        .await;
    if !has_errors(&diags) {
        let errs = apply_consistent(&planned, &new);
        assert!(errs.is_empty(), "inconsistent apply: {errs:?}");
    }
    (new, diags)
}

fn running(v: &Value) -> Option<serde_json::Value> {
    v.attr("running_count").and_then(|c| c.to_json().ok())
}

/// Terraform applies independent resources in parallel: the changes that arrive while
/// an engine pass runs are carried out together by the next one (group commit), each
/// with its own result, the warnings about its own tasks, and its own error.
#[tokio::test]
async fn changes_applied_in_parallel_share_an_engine_pass_and_keep_their_own_results() {
    let dir = tempfile::tempdir().unwrap();
    let core = configured(dir.path()).await;
    // Two hosts of one 22888 MiB L4 each, at most.
    pool_and_task_definition(&core, "l4", 2, "small", 2048).await;
    // And a pool of one such host, and tasks of 16000 MiB.
    pool(&core, "solo", 1).await;
    task_definition(&core, "half", 16000).await;

    // Four services at once: the first takes the engine alone, the other three wait
    // and are carried out by one pass.
    let before = core.engine_passes();
    let cfgs: Vec<Value> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| named_service(n, "small", "l4", 1))
        .collect();
    let (a, b, c, d) = tokio::join!(
        create_service(&core, cfgs[0].clone()),
        create_service(&core, cfgs[1].clone()),
        create_service(&core, cfgs[2].clone()),
        create_service(&core, cfgs[3].clone()),
    );
    for (new, diags) in [&a, &b, &c, &d] {
        assert!(diags.is_empty(), "{diags:?}");
        assert_eq!(running(new), Some(json!(1)), "{new:?}");
    }
    assert_eq!(core.engine_passes() - before, 2, "four changes, two passes");

    // A joint pass hands each change the warnings about its own service: "half"
    // wants two tasks of 16000 MiB on the one GPU of pool "solo", "e" fits.
    let (_, e, half) = tokio::join!(
        create_service(&core, named_service("lead", "small", "l4", 1)),
        create_service(&core, named_service("e", "small", "l4", 1)),
        create_service(&core, named_service("half", "half", "solo", 2)),
    );
    assert!(e.1.is_empty(), "{:?}", e.1);
    assert!(!has_errors(&half.1), "{:?}", half.1);
    assert_eq!(
        half.1
            .iter()
            .filter(|d| d.summary == "Task not placed")
            .count(),
        1,
        "{:?}",
        half.1
    );
    assert_eq!(running(&half.0), Some(json!(1)));

    // A joint pass that fails is run again one change at a time: the error lands on
    // the service that caused it (a pool that does not exist), the other is applied.
    let before = core.engine_passes();
    let (_, lost, f) = tokio::join!(
        create_service(&core, named_service("lead2", "small", "l4", 1)),
        create_service(&core, named_service("lost", "small", "nope", 1)),
        create_service(&core, named_service("f", "small", "l4", 1)),
    );
    assert!(has_errors(&lost.1), "{:?}", lost.1);
    assert!(
        lost.1.iter().any(|d| d.detail.contains("lost")),
        "{:?}",
        lost.1
    );
    assert!(lost.0.is_null(), "a failed create leaves no state");
    // (Run alone, "f" hears of the fleet's other unplaced task, as any lone pass does.)
    assert!(!has_errors(&f.1), "{:?}", f.1);
    assert!(
        f.1.iter().all(|d| !d.detail.contains("service f")),
        "{:?}",
        f.1
    );
    assert_eq!(running(&f.0), Some(json!(1)));
    assert_eq!(
        core.engine_passes() - before,
        4,
        "alone, joint, then one at a time"
    );
    let state = FileStore::open(dir.path()).unwrap().load().await.unwrap();
    let services: Vec<&str> = state
        .resources
        .keys()
        .filter(|a| a.kind == ResourceKind::Service)
        .map(|a| a.name.as_str())
        .collect();
    assert_eq!(
        services,
        ["a", "b", "c", "d", "e", "f", "half", "lead", "lead2"]
    );
}

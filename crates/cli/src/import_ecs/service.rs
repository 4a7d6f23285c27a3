//! An ECS service -> a `service` block.

use super::container::valid_name;
use super::doc::{Block, Val};
use super::ecs::{
    DeploymentConfig, LoadBalancer, PlacementStrategy, Service, BREAKER_KEYS, CAPACITY_ITEM_KEYS,
    CONTROLLER_KEYS, DEPLOYMENT_KEYS, LOAD_BALANCER_KEYS, SERVICE_KEYS, STRATEGY_KEYS,
};
use super::pool::{constraints, Constraints};
use super::report::{at, field_error, index, join, nth, FieldError, Report};
use super::taskdef::Imported;
use serde_json::Value;

const READ_ONLY: &str = "read-only state of the running ECS service";
const TAGS: &str = "ECS resource tags: tag the hosts with capacity_provider.tags";

/// Service keys gpushare knows and does not carry over, with the reason.
const DROPPED: &[(&str, &str)] = &[
    ("networkConfiguration", "awsvpc subnets and security groups: tasks use their host's network (the pool's subnets and security_groups)"),
    ("healthCheckGracePeriodSeconds", "use the container health_check's start_period (failures before it do not count)"),
    ("enableExecuteCommand", "ECS Exec is not supported (`gpushare logs TASK` shows a task's output)"),
    ("propagateTags", TAGS),
    ("enableECSManagedTags", TAGS),
    ("tags", TAGS),
    ("serviceRegistries", "Cloud Map is not supported: `gpushare endpoints` lists each task's address (also for Prometheus)"),
    ("serviceConnectConfiguration", "Service Connect is not supported"),
    ("volumeConfigurations", "EBS volumes configured at deployment are not supported"),
    ("platformVersion", "Fargate platform versions do not apply"),
    ("platformFamily", "Fargate platform versions do not apply"),
    ("role", "ECS's service role has no counterpart"),
    ("roleArn", READ_ONLY),
    ("clientToken", "the idempotency token of one create-service call"),
    ("availabilityZoneRebalancing", "tasks are not rebalanced over zones: placement_strategy = \"spread\" spreads them over hosts"),
    ("cluster", "the cluster is the configuration's gpushare { cluster } setting"),
    ("clusterArn", "the cluster is the configuration's gpushare { cluster } setting"),
    ("serviceArn", READ_ONLY),
    ("status", READ_ONLY),
    ("runningCount", READ_ONLY),
    ("pendingCount", READ_ONLY),
    ("deployments", READ_ONLY),
    ("taskSets", READ_ONLY),
    ("events", READ_ONLY),
    ("createdAt", READ_ONLY),
    ("createdBy", READ_ONLY),
    ("currentServiceDeployment", READ_ONLY),
    ("currentServiceRevisions", READ_ONLY),
];

const DEPLOYMENT_DROPPED: &[(&str, &str)] = &[
    (
        "alarms",
        "CloudWatch alarm rollback is not supported (the circuit breaker is)",
    ),
    ("bakeTimeInMinutes", "gpushare deploys rolling updates only"),
    (
        "lifecycleHooks",
        "deployment lifecycle hooks are not supported",
    ),
    (
        "canaryConfiguration",
        "gpushare deploys rolling updates only",
    ),
    (
        "linearConfiguration",
        "gpushare deploys rolling updates only",
    ),
];

/// The name the generated pool takes from the service's first capacity provider
/// strategy item, when it is a valid gpushare name.
pub fn pool_hint(s: &Service) -> Option<String> {
    s.capacity_provider_strategy
        .first()
        .and_then(|c| c.capacity_provider.clone())
        .filter(|n| valid_name(n))
}

/// The imported service.
#[derive(Debug)]
pub struct ServiceOut {
    pub block: Block,
    /// Tasks at once at the peak of a deployment (desired count plus the surge).
    pub peak_tasks: u64,
    pub constraints: Constraints,
}

/// Map the service `s` (raw JSON `raw`, at `path`) of the imported task definition
/// `td`, run in the pool `pool`.
pub fn service(
    s: &Service,
    raw: &Value,
    path: &str,
    td: &Imported,
    pool: &str,
    report: &mut Report,
) -> Result<ServiceOut, FieldError> {
    report.keys(raw, path, SERVICE_KEYS, DROPPED);
    let name = s.service_name.clone().unwrap_or_else(|| td.family.clone());
    if !valid_name(&name) {
        return Err(field_error(
            join(path, "serviceName"),
            format!("{name:?} is not a gpushare name (letters, digits, `_`, `-`, at most 63)"),
        ));
    }
    check_task_definition(s, path, td, report);
    launch(s, raw, path, report);
    let mut b = Block::new("service", Some(name));
    b.attr(
        "task_definition",
        Val::Ref("task_definition", td.family.clone()),
    );
    b.attr(
        "capacity_provider",
        Val::Ref("capacity_provider", pool.to_string()),
    );
    let desired = match s.desired_count {
        Some(n) => n,
        None => {
            report.note(join(path, "desiredCount"), "not set: desired_count = 1");
            1
        }
    };
    b.attr("desired_count", Val::Num(i64::from(desired)));
    strategy(
        &s.placement_strategy,
        at(raw, "placementStrategy"),
        &join(path, "placementStrategy"),
        &mut b,
        report,
    );
    let mut cons = Constraints::default();
    constraints(
        &s.placement_constraints,
        at(raw, "placementConstraints"),
        &join(path, "placementConstraints"),
        report,
        &mut cons,
    );
    if cons.distinct_host {
        b.attr("distinct_host", Val::Bool(true));
    }
    let mut surge = 100;
    if let Some(d) = &s.deployment_configuration {
        let (block, s) = deployment(
            d,
            at(raw, "deploymentConfiguration"),
            &join(path, "deploymentConfiguration"),
            report,
        )?;
        surge = s;
        b.block(block);
    }
    load_balancers(
        &s.load_balancers,
        at(raw, "loadBalancers"),
        &join(path, "loadBalancers"),
        td,
        &mut b,
        report,
    )?;
    let desired = u64::from(desired);
    Ok(ServiceOut {
        block: b,
        peak_tasks: desired + (desired * u64::from(surge)).div_ceil(100),
        constraints: cons,
    })
}

/// A service of another family than the imported one is still tied to it, with a note.
fn check_task_definition(s: &Service, path: &str, td: &Imported, report: &mut Report) {
    let Some(t) = &s.task_definition else { return };
    let tail = t.rsplit('/').next().unwrap_or(t);
    let family = tail.split(':').next().unwrap_or(tail);
    if family != td.family {
        report.note(
            join(path, "taskDefinition"),
            format!(
                "the service runs {t:?}; it now runs the imported family {:?}",
                td.family
            ),
        );
    }
}

fn launch(s: &Service, raw: &Value, path: &str, report: &mut Report) {
    match s.launch_type.as_deref() {
        None | Some("EC2") | Some("MANAGED_INSTANCES") => {}
        Some("FARGATE") => report.drop(join(path, "launchType"), at(raw, "launchType"), "Fargate has no GPUs: the tasks run on the capacity_provider's EC2 GPU hosts"),
        Some("EXTERNAL") => report.note(join(path, "launchType"), "ECS Anywhere: use a capacity_provider with hosts = \"registered\" for your own servers (docs/own-hosts.md)"),
        Some(_) => report.drop(join(path, "launchType"), at(raw, "launchType"), "an unknown launch type"),
    }
    if s.scheduling_strategy.as_deref() == Some("DAEMON") {
        report.drop(join(path, "schedulingStrategy"), at(raw, "schedulingStrategy"), "daemon services (a task on every host) are not supported: desired_count with distinct_host = true comes close");
    }
    if let Some(c) = &s.deployment_controller {
        let p = join(path, "deploymentController");
        report.keys(at(raw, "deploymentController"), &p, CONTROLLER_KEYS, &[]);
        if c.kind.as_deref().is_some_and(|k| k != "ECS") {
            report.drop(
                join(&p, "type"),
                at(at(raw, "deploymentController"), "type"),
                "gpushare deploys its own rolling updates (ECS's controller)",
            );
        }
    }
    let cps = at(raw, "capacityProviderStrategy");
    let cpath = join(path, "capacityProviderStrategy");
    for (i, item) in s.capacity_provider_strategy.iter().enumerate() {
        report.keys(nth(cps, i), &index(&cpath, i), CAPACITY_ITEM_KEYS, &[]);
        let what = item.capacity_provider.clone().unwrap_or_default();
        if i > 0 {
            report.drop(
                index(&cpath, i),
                &Value::String(what),
                "a service runs in one capacity provider: the first one's",
            );
        } else if !valid_name(&what) {
            report.drop(
                index(&cpath, i),
                &Value::String(what),
                "not a gpushare name, so the pool is named after the task definition",
            );
        }
    }
}

fn strategy(
    list: &[PlacementStrategy],
    raw: &Value,
    path: &str,
    b: &mut Block,
    report: &mut Report,
) {
    for (i, st) in list.iter().enumerate() {
        let p = index(path, i);
        report.keys(nth(raw, i), &p, STRATEGY_KEYS, &[]);
        if i > 0 {
            report.drop(
                p,
                nth(raw, i),
                "gpushare places by one strategy: the first one's",
            );
            continue;
        }
        match (st.kind.as_deref(), st.field.as_deref()) {
            (Some("binpack"), _) => b.attr("placement_strategy", Val::Str("binpack".into())),
            (Some("spread"), Some("instanceId" | "host") | None) => {
                b.attr("placement_strategy", Val::Str("spread".into()));
            }
            (Some("spread"), Some(f)) => {
                b.attr("placement_strategy", Val::Str("spread".into()));
                report.note(join(&p, "field"), format!("spread over {f} became spread over hosts (hosts in a pool over several subnets are in several zones)"));
            }
            _ => report.drop(
                p,
                nth(raw, i),
                "only binpack and spread carry over (the default is binpack)",
            ),
        }
    }
}

/// The deployment block and the surge percent.
fn deployment(
    d: &DeploymentConfig,
    raw: &Value,
    path: &str,
    report: &mut Report,
) -> Result<(Block, u32), FieldError> {
    report.keys(raw, path, DEPLOYMENT_KEYS, DEPLOYMENT_DROPPED);
    let max = d.maximum_percent.unwrap_or(200);
    if !(100..=300).contains(&max) {
        return Err(field_error(join(path, "maximumPercent"), format!("{max}: gpushare takes 100 to 300 (max_surge_percent = maximumPercent - 100, 0 to 200)")));
    }
    let min = d.minimum_healthy_percent.unwrap_or(100);
    if min > 100 {
        return Err(field_error(
            join(path, "minimumHealthyPercent"),
            format!("{min}: gpushare takes 0 to 100"),
        ));
    }
    let surge = max - 100;
    if surge == 0 && min == 100 {
        return Err(field_error(
            path,
            "maximumPercent 100 with minimumHealthyPercent 100 leaves no room to replace a task",
        ));
    }
    match d.strategy.as_deref() {
        None | Some("ROLLING") => {}
        Some(_) => report.drop(
            join(path, "strategy"),
            at(raw, "strategy"),
            "gpushare deploys rolling updates only",
        ),
    }
    let mut b = Block::new("deployment", None);
    b.attr("max_surge_percent", Val::Num(i64::from(surge)));
    b.attr("min_healthy_percent", Val::Num(i64::from(min)));
    if let Some(cb) = &d.deployment_circuit_breaker {
        report.keys(
            at(raw, "deploymentCircuitBreaker"),
            &join(path, "deploymentCircuitBreaker"),
            BREAKER_KEYS,
            &[],
        );
        let mut c = Block::new("circuit_breaker", None);
        c.attr("enable", Val::Bool(cb.enable.unwrap_or(false)));
        c.attr("rollback", Val::Bool(cb.rollback.unwrap_or(false)));
        b.block(c);
    }
    Ok((b, surge))
}

fn load_balancers(
    list: &[LoadBalancer],
    raw: &Value,
    path: &str,
    td: &Imported,
    b: &mut Block,
    report: &mut Report,
) -> Result<(), FieldError> {
    for (i, lb) in list.iter().enumerate() {
        let p = index(path, i);
        let rawlb = nth(raw, i);
        report.keys(
            rawlb,
            &p,
            LOAD_BALANCER_KEYS,
            &[(
                "loadBalancerName",
                "Classic Load Balancers are not supported: use a target group (targetGroupArn)",
            )],
        );
        let Some(arn) = lb.target_group_arn.clone() else {
            if at(rawlb, "loadBalancerName").is_null() {
                return Err(field_error(join(&p, "targetGroupArn"), "missing"));
            }
            continue;
        };
        let container = lb
            .container_name
            .clone()
            .ok_or_else(|| field_error(join(&p, "containerName"), "missing"))?;
        let port = lb
            .container_port
            .ok_or_else(|| field_error(join(&p, "containerPort"), "missing"))?;
        let Some((_, ports)) = td.ports.iter().find(|(n, _)| *n == container) else {
            return Err(field_error(
                join(&p, "containerName"),
                format!("{container:?} is no container of the task definition"),
            ));
        };
        if !ports.contains(&port) {
            return Err(field_error(
                join(&p, "containerPort"),
                format!("{port}: container {container:?} maps no such port"),
            ));
        }
        let mut l = Block::new("load_balancer", None);
        l.attr("target_group_arn", Val::Str(arn));
        l.attr("container_name", Val::Str(container));
        l.attr("container_port", Val::Num(i64::from(port)));
        b.block(l);
    }
    Ok(())
}

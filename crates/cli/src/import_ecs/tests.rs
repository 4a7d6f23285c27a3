//! Unit tests of the ECS mapping: field by field, and errors with their JSON paths.

use super::doc::{quote, Format};
use super::pool::{choose, tasks_per_host, Needs};
use super::{convert, ImportError, Inputs, Outcome};
use gpushare_core::catalog::lookup;
use serde_json::{json, Value};

fn run(
    td: Value,
    service: Option<Value>,
    pool: Option<&str>,
    format: Format,
) -> Result<Outcome, ImportError> {
    let inputs = Inputs {
        td_file: "td.json",
        td_json: &td,
        service: service.as_ref().map(|s| ("svc.json", s)),
        capacity_provider: pool,
    };
    convert(&inputs, format)
}

fn hcl(td: Value) -> Outcome {
    run(td, None, None, Format::Hcl).expect("imports")
}

/// The error text of an import that must fail.
fn error(td: Value, service: Option<Value>) -> String {
    match run(td, service, None, Format::Hcl) {
        Ok(o) => panic!("imported:\n{}", o.text),
        Err(e) => e.to_string(),
    }
}

fn one(container: Value) -> Value {
    json!({"family": "f", "containerDefinitions": [container]})
}

#[track_caller]
fn has(o: &Outcome, lines: &[&str]) {
    for l in lines {
        assert!(o.text.contains(l), "no {l:?} in:\n{}", o.text);
    }
}

#[track_caller]
fn dropped(o: &Outcome, entry: &str) {
    assert!(
        o.report
            .dropped
            .iter()
            .any(|e| e.to_string().starts_with(entry)),
        "{entry:?} not reported: {:#?}",
        o.report.dropped
    );
}

#[test]
fn container_fields_map_one_to_one() {
    let o = hcl(one(json!({
        "name": "server", "image": "img:1", "essential": false,
        "entryPoint": ["python3"], "command": ["serve", "--port", "80"],
        "cpu": 1024, "memory": 2048, "user": "1000:1000", "workingDirectory": "/app",
        "stopTimeout": 60,
        "linuxParameters": {"initProcessEnabled": true, "sharedMemorySize": 1024},
        "environment": [{"name": "A", "value": "1"}],
        "dockerLabels": {"team": "x", "gpushare.task": "no"},
        "ulimits": [{"name": "nofile", "softLimit": 1024, "hardLimit": 4096}]
    })));
    has(
        &o,
        &[
            "container \"server\" {",
            "image                = \"img:1\"",
            "entry_point          = [\"python3\"]",
            "command              = [\"serve\", \"--port\", \"80\"]",
            "cpu                  = 1024",
            "memory               = 2048",
            "essential            = false",
            "user                 = \"1000:1000\"",
            "working_directory    = \"/app\"",
            "stop_timeout         = 60",
            "shared_memory_size   = 1024",
            "init_process_enabled = true",
            "A = \"1\"",
            "team = \"x\"",
            "name = \"nofile\"\n      soft = 1024\n      hard = 4096",
        ],
    );
    dropped(
        &o,
        "containerDefinitions[0].dockerLabels.gpushare.task = no",
    );
}

#[test]
fn gpu_requirements_become_whole_gpus_or_an_mps_share() {
    let whole = hcl(one(
        json!({"name": "c", "image": "i", "resourceRequirements": [{"type": "GPU", "value": "2"}]}),
    ));
    has(&whole, &["gpu {\n      count = 2\n    }"]);
    let mps = hcl(one(
        json!({"name": "c", "image": "i", "resourceRequirements": [
        {"type": "GPU", "sharingStrategy": {"nvidiaMps": {"memory": 6144, "maxComputePercent": 30}}}]}),
    ));
    has(
        &mps,
        &["mps {\n        memory              = 6144\n        max_compute_percent = 30"],
    );
    let acc = hcl(one(
        json!({"name": "c", "image": "i", "resourceRequirements": [{"type": "InferenceAccelerator", "value": "dev1"}]}),
    ));
    dropped(&acc, "containerDefinitions[0].resourceRequirements[0]");
}

#[test]
fn gpu_errors_name_the_json_path() {
    let e = error(
        one(
            json!({"name": "c", "image": "i", "resourceRequirements": [{"type": "GPU", "value": "0.5"}]}),
        ),
        None,
    );
    assert!(
        e.starts_with(
            "td.json: containerDefinitions[0].resourceRequirements[0].value: \"0.5\": fractional"
        ),
        "{e}"
    );
    let e = error(
        one(
            json!({"name": "c", "image": "i", "resourceRequirements": [{"type": "GPU", "sharingStrategy": {"nvidiaMps": {"memory": 9999999}}}]}),
        ),
        None,
    );
    assert!(
        e.contains("sharingStrategy.nvidiaMps.memory: 9999999 MiB fits on no GPU"),
        "{e}"
    );
    let e = error(
        one(
            json!({"name": "c", "image": "i", "resourceRequirements": [{"type": "GPU", "sharingStrategy": {"nvidiaMps": {"memory": 10, "maxComputePercent": 101}}}]}),
        ),
        None,
    );
    assert!(
        e.contains("nvidiaMps.maxComputePercent: 101 is out of range"),
        "{e}"
    );
    let mixed = json!({"family": "f", "containerDefinitions": [
        {"name": "a", "image": "i", "resourceRequirements": [{"type": "GPU", "value": "1"}]},
        {"name": "b", "image": "i", "resourceRequirements": [{"type": "GPU", "sharingStrategy": {"nvidiaMps": {"memory": 10}}}]}]});
    let e = error(mixed, None);
    assert!(
        e.contains(
            "containerDefinitions[1].resourceRequirements: whole GPUs and MPS shares do not mix"
        ),
        "{e}"
    );
    let e = error(
        json!({"family": "f", "containerDefinitions": [
        {"name": "a", "image": "i", "resourceRequirements": [{"type": "GPU", "sharingStrategy": {"nvidiaMps": {"memory": 200000}}}]},
        {"name": "b", "image": "i", "resourceRequirements": [{"type": "GPU", "sharingStrategy": {"nvidiaMps": {"memory": 200000}}}]}]}),
        None,
    );
    assert!(e.contains("td.json: containerDefinitions: the task's MPS containers share one GPU and need 400000 MiB"), "{e}");
}

#[test]
fn ports_follow_the_network_mode() {
    let bridge = hcl(one(json!({"name": "c", "image": "i", "portMappings": [
        {"containerPort": 80, "hostPort": 8080, "name": "http"}, {"containerPort": 81, "protocol": "udp"}]})));
    has(
        &bridge,
        &[
            "name           = \"http\"\n      container_port = 80\n      host_port      = 8080",
            "protocol       = \"udp\"",
        ],
    );
    let mut td = one(
        json!({"name": "c", "image": "i", "portMappings": [{"containerPort": 80, "hostPort": 80}]}),
    );
    td["networkMode"] = json!("awsvpc");
    let awsvpc = hcl(td);
    dropped(&awsvpc, "networkMode = awsvpc");
    assert!(!awsvpc.text.contains("host_port"), "{}", awsvpc.text);
    assert!(awsvpc
        .report
        .notes
        .iter()
        .any(|n| n.path == "containerDefinitions[0].portMappings[0].hostPort"));
    let mut td = one(
        json!({"name": "c", "image": "i", "portMappings": [{"containerPort": 80, "hostPort": 81}]}),
    );
    td["networkMode"] = json!("host");
    let e = error(td, None);
    assert!(
        e.contains("containerDefinitions[0].portMappings[0].hostPort: 81: in host mode"),
        "{e}"
    );
    let e = error(
        one(json!({"name": "c", "image": "i", "portMappings": [{"containerPort": 70000}]})),
        None,
    );
    assert!(
        e.contains("containerDefinitions[0].portMappings[0].containerPort: 70000 is out of range"),
        "{e}"
    );
}

#[test]
fn health_checks_mounts_and_volumes() {
    let td = json!({"family": "f",
        "volumes": [
            {"name": "w", "host": {"sourcePath": "/opt/w"}},
            {"name": "cache", "dockerVolumeConfiguration": {"scope": "shared", "driver": "local", "driverOpts": {"type": "tmpfs"}}},
            {"name": "scratch"},
            {"name": "efs", "efsVolumeConfiguration": {"fileSystemId": "fs-1"}}],
        "containerDefinitions": [{"name": "c", "image": "i",
            "healthCheck": {"command": ["CMD", "true"], "interval": 30, "timeout": 7, "retries": 3, "startPeriod": 20},
            "mountPoints": [{"sourceVolume": "w", "containerPath": "/w", "readOnly": true}]}]});
    let o = hcl(td);
    has(
        &o,
        &[
            "volume \"w\" {\n    host_path = \"/opt/w\"",
            "scope  = \"shared\"",
            "type = \"tmpfs\"",
            "volume \"scratch\" {}",
            "command      = [\"CMD\", \"true\"]\n      timeout      = 7\n      start_period = 20",
            "source_volume  = \"w\"",
        ],
    );
    dropped(&o, "volumes[3].efsVolumeConfiguration");
    let e = error(
        one(
            json!({"name": "c", "image": "i", "mountPoints": [{"sourceVolume": "nope", "containerPath": "/x"}]}),
        ),
        None,
    );
    assert!(
        e.contains("containerDefinitions[0].mountPoints[0].sourceVolume: \"nope\" names no volume"),
        "{e}"
    );
    let e = error(
        one(
            json!({"name": "c", "image": "i", "healthCheck": {"command": ["CMD", "true"], "interval": 1}}),
        ),
        None,
    );
    assert!(
        e.contains("containerDefinitions[0].healthCheck.interval: 1 is out of range"),
        "{e}"
    );
}

#[test]
fn secrets_become_sensitive_variables() {
    let o = hcl(json!({"family": "f", "containerDefinitions": [
        {"name": "a", "image": "i", "secrets": [{"name": "TOKEN", "valueFrom": "arn:1"}]},
        {"name": "b-2", "image": "i", "secrets": [{"name": "TOKEN", "valueFrom": "arn:2"}, {"name": "OTHER", "valueFrom": "arn:1"}]}]}));
    has(
        &o,
        &[
            "variable \"token\" {\n  description = \"ECS secret, valueFrom arn:1\"\n  sensitive   = true",
            "variable \"b_2_token\"",
            "TOKEN = var.token",
            "TOKEN = var.b_2_token",
            "OTHER = var.other",
        ],
    );
}

#[test]
fn memory_takes_the_hard_limit_and_task_size_goes_to_a_lone_container() {
    let o = hcl(json!({"family": "f", "cpu": "1 vCPU", "memory": "2048",
        "containerDefinitions": [{"name": "c", "image": "i", "memoryReservation": 512}]}));
    has(&o, &["cpu    = 1024", "memory = 512"]);
    assert!(
        o.report.notes.iter().any(|n| n.path == "cpu"),
        "{:?}",
        o.report.notes
    );
    // The container's own memory wins over the task's: the task value is reported.
    let o = hcl(
        json!({"family": "f", "memory": "4096", "containerDefinitions": [
        {"name": "c", "image": "i", "memory": 1024}, {"name": "d", "image": "i", "memory": 1024}]}),
    );
    dropped(&o, "memory = 4096: gpushare reserves per container");
}

#[test]
fn service_fields_map_to_the_service_block() {
    let td = one(json!({"name": "web", "image": "i", "portMappings": [{"containerPort": 80}]}));
    let svc = json!({"serviceName": "api", "desiredCount": 3, "taskDefinition": "other:2",
        "deploymentConfiguration": {"maximumPercent": 200, "minimumHealthyPercent": 50,
            "deploymentCircuitBreaker": {"enable": true, "rollback": false}},
        "loadBalancers": [{"targetGroupArn": "arn:tg", "containerName": "web", "containerPort": 80},
                          {"loadBalancerName": "classic"}],
        "placementStrategy": [{"type": "spread", "field": "instanceId"}],
        "placementConstraints": [{"type": "distinctInstance"}],
        "deploymentController": {"type": "CODE_DEPLOY"}});
    let o = run(td, Some(svc), Some("pool"), Format::Hcl).expect("imports");
    has(
        &o,
        &[
            "service \"api\" {",
            "task_definition    = task_definition.f",
            "capacity_provider  = capacity_provider.pool",
            "desired_count      = 3",
            "placement_strategy = \"spread\"",
            "distinct_host      = true",
            "max_surge_percent   = 100",
            "min_healthy_percent = 50",
            "enable   = true\n      rollback = false",
            "target_group_arn = \"arn:tg\"\n    container_name   = \"web\"\n    container_port   = 80",
        ],
    );
    assert!(
        !o.text.contains("capacity_provider \"pool\""),
        "a named pool is not generated"
    );
    dropped(&o, "loadBalancers[1].loadBalancerName = classic");
    dropped(&o, "deploymentController.type = CODE_DEPLOY");
    assert!(
        o.report.notes.iter().any(|n| n.path == "taskDefinition"),
        "{:?}",
        o.report.notes
    );
}

#[test]
fn service_errors_name_the_json_path() {
    let td = one(json!({"name": "web", "image": "i", "portMappings": [{"containerPort": 80}]}));
    let lb = json!({"services": [{"serviceName": "s", "desiredCount": 1,
        "loadBalancers": [{"targetGroupArn": "arn", "containerName": "web", "containerPort": 81}]}]});
    let e = error(td.clone(), Some(lb));
    assert!(
        e.starts_with("svc.json: services[0].loadBalancers[0].containerPort: 81"),
        "{e}"
    );
    let stuck = json!({"serviceName": "s", "desiredCount": 1,
        "deploymentConfiguration": {"maximumPercent": 100, "minimumHealthyPercent": 100}});
    let e = error(td.clone(), Some(stuck));
    assert!(
        e.contains(
            "svc.json: deploymentConfiguration: maximumPercent 100 with minimumHealthyPercent 100"
        ),
        "{e}"
    );
    let two = json!({"services": [{"serviceName": "a"}, {"serviceName": "b"}]});
    assert!(error(td.clone(), Some(two)).contains("exactly one service"));
    let typed = json!({"serviceName": "s", "desiredCount": "three"});
    let e = error(td, Some(typed));
    assert!(
        e.starts_with("svc.json: desiredCount: invalid type: string \"three\""),
        "{e}"
    );
}

#[test]
fn terraform_format_names_resources_by_attribute() {
    let td = one(json!({"name": "c", "image": "i"}));
    let o = run(
        td,
        Some(json!({"serviceName": "s", "desiredCount": 1})),
        None,
        Format::Tf,
    )
    .expect("imports");
    has(
        &o,
        &[
            "resource \"gpushare_capacity_provider\" \"f\" {\n  name = \"f\"",
            "resource \"gpushare_task_definition\" \"f\" {\n  name = \"f\"\n  container {\n    name  = \"c\"",
            "task_definition   = gpushare_task_definition.f.name",
        ],
    );
}

#[test]
fn the_pool_is_the_cheapest_for_the_peak_of_the_tasks() {
    let mps = Needs {
        mps_memory: 4096,
        cpu: 2048,
        memory: 4096,
        ..Needs::default()
    };
    let g4 = lookup("g4dn.xlarge").expect("type");
    assert_eq!(tasks_per_host(g4, &mps), 2);
    // One task: the cheapest host; nine: the type whose hosts hold them for the least.
    assert_eq!(choose(&mps, &[], 1).map(|t| t.name), Some("g4dn.xlarge"));
    let nine = choose(&mps, &[], 9).expect("a type");
    let hosts = |t| 9u64.div_ceil(tasks_per_host(t, &mps)) as f64 * t.price_per_hour.unwrap_or(0.0);
    assert!(
        hosts(nine) <= hosts(g4),
        "{} costs more than g4dn.xlarge",
        nine.name
    );
    let arm = Needs {
        arm64: true,
        ..Needs::default()
    };
    assert!(choose(&arm, &[], 1).is_some_and(|t| t.name.starts_with("g5g.")));
    let huge = Needs {
        whole_gpus: 4,
        ..Needs::default()
    };
    assert_eq!(choose(&huge, &["g5.xlarge".to_string()], 1), None);
}

#[test]
fn strings_are_escaped_for_hcl() {
    assert_eq!(quote("a\"b\\c\n${x}%{y}"), "\"a\\\"b\\\\c\\n$${x}%%{y}\"");
    let o = hcl(one(
        json!({"name": "c", "image": "i", "command": ["sh", "-c", "echo ${HOME} \"hi\""]}),
    ));
    has(
        &o,
        &["command = [\"sh\", \"-c\", \"echo $${HOME} \\\"hi\\\"\"]"],
    );
}

#[test]
fn shapes_that_are_not_ecs_documents_are_refused() {
    let e = error(json!({"services": []}), None);
    assert!(e.starts_with("td.json: not an ECS task definition"), "{e}");
    let e = error(json!({"family": "f"}), None);
    assert!(
        e.contains("td.json: containerDefinitions: missing or empty"),
        "{e}"
    );
    let e = error(
        json!({"family": "bad name", "containerDefinitions": [{"name": "c", "image": "i"}]}),
        None,
    );
    assert!(
        e.contains("td.json: family: \"bad name\" is not a gpushare name"),
        "{e}"
    );
    let e = error(one(json!({"name": "c"})), None);
    assert!(e.contains("containerDefinitions[0].image: missing"), "{e}");
    let e = error(
        json!({"taskDefinition": {"family": "f", "containerDefinitions": [{"name": "c", "image": "i", "cpu": -1}]}}),
        None,
    );
    assert!(
        e.starts_with("td.json: taskDefinition.containerDefinitions[0].cpu: invalid value"),
        "{e}"
    );
}

//! `gpushare import-ecs` through the real binary: real-shaped ECS task definitions
//! and services (tests/fixtures/ecs/) become configuration that `gpushare validate`
//! and `gpushare plan` accept on the embedded default (local cloud, file store), with
//! the fields that could not be carried over named on stderr and atop the file.

use gpushare_testkit::{gp, Run};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ecs")
        .join(name)
        .display()
        .to_string()
}

/// `import-ecs ARGS` in `cwd`, expected to succeed.
fn import(cwd: &Path, args: &[&str]) -> Run {
    let mut all = vec!["import-ecs"];
    all.extend_from_slice(args);
    let r = gp(cwd, &all).run();
    r.expect_code(0);
    r
}

/// `validate` and `plan` of `dir` succeed (the secret variables set); the plan's text.
fn validate_and_plan(dir: &Path, vars: &[&str]) -> String {
    let mut args = vec!["validate"];
    for v in vars {
        args.extend(["-var", v]);
    }
    gp(dir, &args).run().expect_code(0);
    args[0] = "plan";
    let r = gp(dir, &args).run();
    r.expect_code(0);
    r.stdout
}

fn read(path: PathBuf) -> String {
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[track_caller]
fn assert_names(r: &Run, text: &str, fields: &[&str]) {
    for f in fields {
        assert!(
            r.stderr.contains(f),
            "stderr does not name {f:?}:\n{}",
            r.stderr
        );
        assert!(
            text.contains(f),
            "the file's comments do not name {f:?}:\n{text}"
        );
    }
}

#[test]
fn mps_embedder_and_its_service_with_a_load_balancer_validate_and_plan() {
    let d = tempfile::tempdir().expect("tempdir");
    let out = d.path().join("cfg");
    let out_s = out.display().to_string();
    let r = import(
        d.path(),
        &[
            &fixture("embedder-mps.json"),
            "--service",
            &fixture("embedder-service.json"),
            "--write",
            &out_s,
        ],
    );
    let text = read(out.join("text-embedder.hcl"));
    assert_names(
        &r,
        &text,
        &[
            "taskDefinition.networkMode = awsvpc",
            "taskDefinition.executionRoleArn",
            "taskDefinition.taskRoleArn",
            "taskDefinition.containerDefinitions[0].logConfiguration",
            "taskDefinition.containerDefinitions[1].firelensConfiguration",
            "taskDefinition.containerDefinitions[0].dependsOn",
            "taskDefinition.containerDefinitions[0].environment[1].name = CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
            "services[0].networkConfiguration",
            "services[0].healthCheckGracePeriodSeconds = 120",
        ],
    );
    for want in [
        "max_compute_percent = 25",
        "memory              = 4096",
        "HF_TOKEN = var.hf_token",
        "max_surge_percent   = 50",
        "rollback = true",
        "capacity_provider \"gpu-l4\"",
        "load_balancer {",
        "target_group_arn = \"arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/embedder/6d0ecf831eec9f09\"",
        "container_port   = 8080",
    ] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }
    // The secret's ARN is a description; its value is a sensitive variable.
    assert!(!text.contains("valueFrom ="), "{text}");
    gp(&out, &["fmt", "--check"]).run().expect_code(0);

    let plan = validate_and_plan(&out, &["hf_token=hf_secret_value"]);
    assert!(plan.contains("6 tasks to place"), "{plan}");
    assert!(!plan.contains("hf_secret_value"), "{plan}");
}

#[test]
fn whole_gpu_llm_with_weights_and_its_service_validate_and_plan() {
    let d = tempfile::tempdir().expect("tempdir");
    let r = import(
        d.path(),
        &[
            &fixture("llm-whole-gpu.json"),
            "--service",
            &fixture("llm-service.json"),
            "--write",
            "cfg",
        ],
    );
    let text = read(d.path().join("cfg/llm-server.hcl"));
    assert_names(
        &r,
        &text,
        &[
            "ipcMode = host",
            "executionRoleArn",
            "containerDefinitions[0].logConfiguration",
            "volumes[1].dockerVolumeConfiguration.autoprovision = true",
            "deploymentConfiguration.alarms",
            "placementStrategy[1]",
            "placementConstraints[1].expression = attribute:ecs.os-type == linux",
            "cluster = ml-inference",
        ],
    );
    for want in [
        "count = 1",
        "host_path = \"/opt/models\"",
        "read_only      = true",
        "shared_memory_size = 8192",
        "start_period = 300",
        "distinct_host      = true",
        "placement_strategy = \"spread\"",
        "max_surge_percent   = 0",
        "min_healthy_percent = 50",
        // memberOf instance-type in [g5.2xlarge, g6.2xlarge]: the cheaper that fits.
        "instance_type = \"g6.2xlarge\"",
    ] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }
    let plan = validate_and_plan(&d.path().join("cfg"), &[]);
    assert!(plan.contains("2 tasks to place"), "{plan}");
}

#[test]
fn cpu_sidecar_task_without_a_service_validates_and_plans() {
    let d = tempfile::tempdir().expect("tempdir");
    let r = import(d.path(), &[&fixture("sidecar-cpu.json"), "--write", "cfg"]);
    let text = read(d.path().join("cfg/metrics-exporter.hcl"));
    assert_names(
        &r,
        &text,
        &[
            "requiresCompatibilities[1] = FARGATE",
            "containerDefinitions[0].privileged = true",
            "containerDefinitions[0].links",
            "containerDefinitions[0].environmentFiles",
            "memory = 1 GB",
        ],
    );
    assert!(text.contains("network_mode = \"host\""), "{text}");
    assert!(text.contains("protocol       = \"udp\""), "{text}");
    assert!(!text.contains("service \""), "{text}");
    let plan = validate_and_plan(&d.path().join("cfg"), &[]);
    assert!(plan.contains("metrics-exporter revision 1"), "{plan}");
}

#[test]
fn terraform_format_is_read_by_validate_and_plan() {
    let d = tempfile::tempdir().expect("tempdir");
    import(
        d.path(),
        &[
            &fixture("llm-whole-gpu.json"),
            "--service",
            &fixture("llm-service.json"),
            "--format",
            "tf",
            "--write",
            "cfg",
        ],
    );
    import(
        d.path(),
        &[
            &fixture("embedder-mps.json"),
            "--format",
            "tf",
            "--write",
            "cfg",
        ],
    );
    let text = read(d.path().join("cfg/llm-server.tf"));
    for want in [
        "resource \"gpushare_task_definition\" \"llm-server\" {",
        "task_definition    = gpushare_task_definition.llm-server.name",
        "capacity_provider  = gpushare_capacity_provider.llm-server.name",
        "container {\n    name ",
        "volume {\n    name      = \"weights\"\n    host_path = \"/opt/models\"",
    ] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }
    let plan = validate_and_plan(&d.path().join("cfg"), &["hf_token=x"]);
    assert!(plan.contains("text-embedder revision 1"), "{plan}");
}

#[test]
fn a_service_can_run_in_a_named_capacity_provider() {
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(d.path().join("cfg")).expect("mkdir");
    std::fs::write(
        d.path().join("cfg/pool.hcl"),
        "capacity_provider \"a10g\" {\n  instance_type = \"g5.2xlarge\"\n  max_size      = 4\n}\n",
    )
    .expect("write");
    import(
        d.path(),
        &[
            &fixture("llm-whole-gpu.json"),
            "--service",
            &fixture("llm-service.json"),
            "--capacity-provider",
            "a10g",
            "--write",
            "cfg",
        ],
    );
    let text = read(d.path().join("cfg/llm-server.hcl"));
    assert!(!text.contains("capacity_provider \""), "{text}");
    assert!(
        text.contains("capacity_provider  = capacity_provider.a10g"),
        "{text}"
    );
    assert!(
        text.contains("instance_types     = [\"g5.2xlarge\", \"g6.2xlarge\"]"),
        "{text}"
    );
    validate_and_plan(&d.path().join("cfg"), &[]);
}

#[test]
fn unknown_fields_are_reported_not_dropped() {
    let d = tempfile::tempdir().expect("tempdir");
    let td = serde_json::json!({
        "family": "probe",
        "futureTaskSetting": {"on": true},
        "containerDefinitions": [{"name": "c", "image": "busybox", "memory": 64, "futureContainerFlag": false}]
    });
    std::fs::write(d.path().join("td.json"), td.to_string()).expect("write");
    let r = import(d.path(), &["td.json"]);
    for f in [
        "futureTaskSetting",
        "containerDefinitions[0].futureContainerFlag = false",
    ] {
        assert!(r.stderr.contains(f), "{f:?} not reported:\n{}", r.stderr);
        assert!(
            r.stdout.contains(f),
            "{f:?} not in the comments:\n{}",
            r.stdout
        );
    }
    assert!(r.stderr.contains("unknown to the importer"), "{}", r.stderr);
}

/// `import-ecs` of `json` fails with exit 1 naming `want` and writes nothing.
#[track_caller]
fn refused(json: &str, want: &str) {
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::write(d.path().join("taskdef.json"), json).expect("write");
    let r = gp(d.path(), &["import-ecs", "taskdef.json", "--write", "out"]).run();
    r.expect_code(1);
    assert!(
        r.stderr.contains(want),
        "stderr lacks {want:?}:\n{}",
        r.stderr
    );
    assert!(!d.path().join("out").exists(), "something was written");
}

#[test]
fn bad_input_names_the_file_and_the_json_path_and_writes_nothing() {
    refused("family: x", "taskdef.json: not JSON");
    refused("[1, 2]", "taskdef.json: not an ECS task definition");
    refused(
        r#"{"family": "f", "containerDefinitions": [
             {"name": "a", "image": "i"},
             {"name": "b", "image": "i", "portMappings": [{"containerPort": 80, "hostPort": "eighty"}]}]}"#,
        "taskdef.json: containerDefinitions[1].portMappings[0].hostPort: invalid type: string \"eighty\"",
    );
    refused(
        r#"{"taskDefinition": {"family": "f", "containerDefinitions": [
             {"name": "a", "image": "i", "resourceRequirements": [{"type": "GPU", "value": "32"}]}]}}"#,
        "taskdef.json: taskDefinition.containerDefinitions[0].resourceRequirements[0].value: 32 GPUs cannot be placed",
    );
    refused(
        r#"{"family": "f", "containerDefinitions": [
             {"name": "a", "image": "i", "resourceRequirements": [{"type": "GPU", "sharingStrategy": {"nvidiaMps": {"maxComputePercent": 20}}}]}]}"#,
        "containerDefinitions[0].resourceRequirements[0].sharingStrategy.nvidiaMps.memory: required",
    );
    refused(
        r#"{"family": "f", "containerDefinitions": [
             {"name": "a", "image": "i", "resourceRequirements": [{"type": "GPU", "value": "16"}]},
             {"name": "b", "image": "i", "resourceRequirements": [{"type": "GPU", "value": "4"}]}]}"#,
        "containerDefinitions: the task's containers need 20 GPUs together",
    );
}

#[test]
fn an_existing_file_is_replaced_only_with_force() {
    let d = tempfile::tempdir().expect("tempdir");
    let td = fixture("sidecar-cpu.json");
    import(d.path(), &[&td, "--write", "cfg"]);
    std::fs::write(d.path().join("cfg/metrics-exporter.hcl"), "# mine\n").expect("write");
    let r = gp(d.path(), &["import-ecs", &td, "--write", "cfg"]).run();
    r.expect_code(1);
    assert!(r.stderr.contains("exists (pass --force"), "{}", r.stderr);
    assert_eq!(read(d.path().join("cfg/metrics-exporter.hcl")), "# mine\n");
    import(d.path(), &[&td, "--write", "cfg", "--force"]);
    assert!(read(d.path().join("cfg/metrics-exporter.hcl"))
        .contains("task_definition \"metrics-exporter\""));
}

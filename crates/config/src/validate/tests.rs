//! Tests of the semantic validation (kept beside validate.rs to keep it under 800 lines).

use super::*;
use serde_json::json;

#[test]
fn one_resource_alone_gets_its_own_checks_only() {
    let cp = json!({ "instance_type": "g6.12xlarg", "max_size": 1, "min_size": 2 });
    let d = validate_resource(ResourceKind::CapacityProvider, "l4", &cp);
    let text: Vec<String> = d.iter().map(ToString::to_string).collect();
    assert!(
        text.iter()
            .any(|t| t.contains("unknown instance type `g6.12xlarg`")),
        "{text:?}"
    );
    assert!(
        text.iter()
            .any(|t| t.contains("capacity_provider.l4: min_size (2) is larger than max_size (1)")),
        "{text:?}"
    );
    // A service alone refers to resources the provider cannot see: no reference errors.
    let svc = json!({ "task_definition": "t", "capacity_provider": "p", "desired_count": 1 });
    assert!(validate_resource(ResourceKind::Service, "s", &svc).is_empty());
    let bad =
        json!({ "container": [{ "name": "c", "image": "i", "gpu": { "mps": { "memory": 0 } } }] });
    let d = validate_resource(ResourceKind::TaskDefinition, "t", &bad);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(
        d[0].path.as_deref(),
        Some("task_definition.t.container.c.gpu.mps.memory")
    );
}

fn errors(text: &str) -> Vec<String> {
    let src = crate::Source {
        name: "main.hcl".into(),
        text: text.into(),
    };
    let d = crate::load_sources(&[src], &crate::LoadOptions::default())
        .unwrap_or_else(|e| panic!("{e}"));
    validate(&d)
        .into_iter()
        .filter(Diagnostic::is_error)
        .map(|d| d.to_string())
        .collect()
}

#[test]
fn ec2_hosts_need_the_controller_address_not_a_networked_store() {
    let pool = "capacity_provider \"p\" {\n  instance_type = \"g6.xlarge\"\n  max_size = 1\n}\n";
    let e = errors(&format!("gpushare {{\n  cloud = \"ec2\"\n}}\n{pool}"));
    assert!(
        e.iter()
            .any(|m| m.contains("hosts on EC2 need the controller's address")),
        "{e:?}"
    );
    // With the address, a file store (the default) is fine: no host reads it.
    let ok = format!(
            "gpushare {{\n  cloud = \"ec2\"\n  controller_address = \"https://ctl.internal:7443\"\n}}\n{pool}"
        );
    assert!(errors(&ok).is_empty(), "{:?}", errors(&ok));
    // Not a URL of the agent API: refused at load, at its file:line:col.
    let bad = crate::Source {
        name: "main.hcl".into(),
        text: ok.replace("https://ctl.internal:7443", "ctl.internal:7443"),
    };
    let err = crate::load_sources(&[bad], &crate::LoadOptions::default())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("main.hcl:3:24") && err.contains("controller_address"),
        "{err}"
    );
}

#[test]
fn tags_over_ec2_limits_are_refused_with_their_location() {
    let t = "gpushare {\n  default_tags = {\n    team = \"ml\"\n  }\n}\ncapacity_provider \"p\" {\n  instance_type = \"g6.xlarge\"\n  max_size = 1\n  tags = {\n    TAGS\n  }\n}\n";
    assert!(errors(&t.replace("TAGS", "env = \"prod\"")).is_empty());
    let long_key = "k".repeat(129);
    for (tags, want) in [
        ("\"aws:owner\" = \"me\"", "reserved for AWS"),
        (
            "\"gpushare:cluster\" = \"forged\"",
            "reserved for the tags gpushare sets",
        ),
        (&format!("{long_key} = \"v\"") as &str, "EC2 takes 1 to 128"),
        (
            &format!("k = \"{}\"", "v".repeat(257)) as &str,
            "at most 256",
        ),
    ] {
        let e = errors(&t.replace("TAGS", tags));
        assert!(
            e.iter()
                .any(|m| m.contains("invalid tag in capacity_provider.p.tags")
                    && m.contains(want)
                    && m.contains("main.hcl:")),
            "{tags}: {e:?}"
        );
    }
    // 43 of the user's (one a default tag) and 7 of gpushare's: 50, the limit.
    let many = |n: usize| {
        (0..n)
            .map(|i| format!("t{i} = \"v\""))
            .collect::<Vec<_>>()
            .join("\n    ")
    };
    assert!(
        errors(&t.replace("TAGS", &many(42))).is_empty(),
        "{:?}",
        errors(&t.replace("TAGS", &many(42)))
    );
    let e = errors(&t.replace("TAGS", &many(43)));
    assert!(
        e.iter().any(|m| m.contains(
            "too many tags for an EC2 instance in capacity_provider.p.tags: 51, at most 50"
        ) && m.contains("main.hcl:9:")),
        "{e:?}"
    );
    let e = errors(
        &t.replace("team = \"ml\"", "\"aws:x\" = \"y\"")
            .replace("TAGS", ""),
    );
    assert!(
        e.iter()
            .any(|m| m.contains("invalid tag in gpushare.default_tags") && m.contains("main.hcl:")),
        "{e:?}"
    );
}

#[test]
fn mps_pipe_directory_outside_tmp() {
    let t = "capacity_provider \"p\" {\n  instance_type = \"g6.xlarge\"\n  max_size = 1\n  mps {\n    pipe_directory = \"/tmp/mps\"\n  }\n}\n";
    let e = errors(t);
    assert!(
        e.iter().any(|m| m
            .contains("the MPS pipe_directory of capacity_provider.p is not a safe directory")
            && m.contains("main.hcl:5:5")),
        "{e:?}"
    );
    assert!(errors(&t.replace("/tmp/mps", "/run/mps")).is_empty());
    // Judged normalised (issue 46 item 12).
    for sneaky in ["//tmp/x", "/./tmp/mps", "/dev/shm/mps", "/run/lock/mps"] {
        assert!(
            !errors(&t.replace("/tmp/mps", sneaky)).is_empty(),
            "{sneaky}"
        );
    }
}

#[test]
fn a_pinned_larger_host_can_take_what_the_pool_type_cannot() {
    let base = r#"
capacity_provider "p" {
  instance_type = "g6.xlarge"
  max_size      = 2
}
gpu_instance "big" {
  capacity_provider = capacity_provider.p
  instance_type     = "p4de.24xlarge"
}
task_definition "llm" {
  container "server" {
    image = "i"
    gpu {
      mps {
        memory = 30000
      }
    }
  }
}
"#;
    let free = format!("{base}service \"llm\" {{\n  task_definition = task_definition.llm\n  capacity_provider = capacity_provider.p\n  desired_count = 1\n}}\n");
    assert!(errors(&free).is_empty(), "{:?}", errors(&free));
    let narrowed = free.replace(
        "desired_count = 1",
        "desired_count = 1\n  instance_types = [\"g6.xlarge\"]",
    );
    let e = errors(&narrowed);
    assert!(
        e.iter().any(|m| m
            .contains("asks for 30000 MiB of GPU memory; one l4 GPU of g6.xlarge has 22888 MiB")
            && m.contains("main.hcl:15:9")),
        "{e:?}"
    );
    let none = free.replace(
        "desired_count = 1",
        "desired_count = 1\n  instance_types = [\"g5.xlarge\"]",
    );
    let e = errors(&none);
    assert!(
        e.iter().any(|m| m
            .contains("no host of capacity_provider.p matches the instance_types of service.llm")),
        "{e:?}"
    );
}

#[test]
fn registered_pools_refuse_launch_settings_and_launched_pools_need_theirs() {
    let ok =
        "capacity_provider \"lab\" {\n  hosts = \"registered\"\n  host_hourly_cost = \"1.5\"\n}\n";
    assert_eq!(errors(ok), Vec::<String>::new());
    let sized = "capacity_provider \"lab\" {\n  hosts = \"registered\"\n  max_size = 3\n}\n";
    let e = errors(sized);
    assert!(
        e.iter()
            .any(|e| e.contains("registered pool") && e.contains("max_size")),
        "{e:?}"
    );
    let priced = "capacity_provider \"p\" {\n  instance_type = \"g6.xlarge\"\n  max_size = 1\n  host_hourly_cost = \"1\"\n}\n";
    let e = errors(priced);
    assert!(e.iter().any(|e| e.contains("host_hourly_cost")), "{e:?}");
    // A launched pool without instance_type and max_size: both named, at load.
    let src = crate::Source {
        name: "main.hcl".into(),
        text: "capacity_provider \"p\" {\n  min_size = 0\n}\n".into(),
    };
    let e = crate::load_sources(&[src], &crate::LoadOptions::default())
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("`instance_type`") && e.contains("`max_size`"),
        "{e}"
    );
    assert!(e.contains("main.hcl:1"), "located: {e}");
    // Terraform's one-resource check says the same.
    let d = validate_resource(
        ResourceKind::CapacityProvider,
        "p",
        &json!({ "min_size": 0 }),
    );
    let text: Vec<String> = d.iter().map(ToString::to_string).collect();
    assert!(text.iter().any(|t| t.contains("instance_type")), "{text:?}");
    let reg = json!({ "hosts": "registered" });
    assert!(validate_resource(ResourceKind::CapacityProvider, "lab", &reg).is_empty());
}

/// Issue 45 item 2, regression: `store = "etcd:/localhost:2379"` (one slash) validated
/// and planned a new fleet against a directory of that name; `s3://` passed validate.
/// Both fail validate at the attribute, saying what was probably meant.
#[test]
fn a_mistyped_store_url_fails_validate_at_its_attribute() {
    let t = "gpushare {\n  cluster = \"c\"\n  store   = \"STORE\"\n}\n";
    let e = errors(&t.replace("STORE", "etcd:/localhost:2379"));
    assert!(
        e.iter().any(|m| m.contains("slashes wrong")
            && m.contains("did you mean etcd://localhost:2379")
            && m.contains("main.hcl:3:")),
        "{e:?}"
    );
    let e = errors(&t.replace("STORE", "s3://bucket/state"));
    assert!(
        e.iter()
            .any(|m| m.contains("no \"s3\" store") && m.contains("main.hcl:3:")),
        "{e:?}"
    );
    assert!(errors(&t.replace("STORE", "etcd://127.0.0.1:2379/p")).is_empty());
    assert!(errors(&t.replace("STORE", "state-dir")).is_empty());
}

/// Serving settings that do not go together are refused at validate, each at its
/// own file:line:col (issue 47).
#[test]
fn serving_settings_are_checked_with_their_location() {
    let td = |network: &str, body: &str, volumes: &str| {
        format!(
            "task_definition \"web\" {{\n  network_mode = \"{network}\"\n{volumes}  container \"s\" {{\n    image = \"i\"\n{body}  }}\n}}\n"
        )
    };
    let cases: Vec<(String, &str)> = vec![
        (
            td("bridge", "    port_mapping {\n      container_port = 8080\n    }\n    port_mapping {\n      container_port = 8080\n    }\n", ""),
            "container s of task_definition.web maps container port 8080/tcp twice\n  --> main.hcl:8:5",
        ),
        (
            td("none", "    port_mapping {\n      container_port = 8080\n    }\n", ""),
            "but the task's network_mode is none",
        ),
        (
            td("host", "    port_mapping {\n      container_port = 8080\n      host_port = 9090\n    }\n", ""),
            "container s of task_definition.web maps container port 8080/tcp to host port 9090 in host mode\n  --> main.hcl:7:7",
        ),
        (
            td("bridge", "    mount_point {\n      source_volume = \"models\"\n      container_path = \"/m\"\n    }\n", ""),
            "container s of task_definition.web mounts volume \"models\", which task_definition.web does not declare\n  --> main.hcl:6:7",
        ),
        (
            td("bridge", "", "  volume \"models\" {\n    host_path = \"models\"\n  }\n"),
            "the host_path \"models\" of volume models in task_definition.web is not an absolute path\n  --> main.hcl:4:5",
        ),
        (
            td("bridge", "    health_check {\n      command = [\"curl\", \"-f\", \"http://localhost\"]\n    }\n", ""),
            "is neither [\"CMD\", ...] nor [\"CMD-SHELL\", \"...\"]",
        ),
        (
            td("bridge", "    ulimit {\n      name = \"nofile\"\n      soft = 10\n      hard = 5\n    }\n", ""),
            "the nofile ulimit of container s in task_definition.web has a soft limit above its hard one",
        ),
        (
            td("bridge", "    docker_labels = {\n      \"gpushare.task\" = \"x\"\n    }\n", ""),
            "uses the agent's prefix",
        ),
        (
            td("bridge", "    port_mapping {\n      container_port = 70000\n    }\n", ""),
            "container_port",
        ),
        (
            "capacity_provider \"p\" {\n  instance_type = \"g6.xlarge\"\n  max_size = 1\n  host_port_range = \"9000-8000\"\n}\n".to_string(),
            "the host_port_range of capacity_provider.p is not a port range\n  --> main.hcl:4:3",
        ),
    ];
    for (text, want) in cases {
        let e = match std::panic::catch_unwind(|| errors(&text)) {
            Ok(e) => e,
            Err(_) => {
                // Out-of-range values are refused by the loader itself.
                let src = crate::Source {
                    name: "main.hcl".into(),
                    text: text.clone(),
                };
                let err = crate::load_sources(&[src], &crate::LoadOptions::default())
                    .expect_err("refused by the loader");
                vec![err.to_string()]
            }
        };
        assert!(
            e.iter().any(|m| m.contains(want)),
            "want {want:?} in {e:#?}\nfor\n{text}"
        );
    }
    // A valid serving task definition passes.
    let ok = td(
        "bridge",
        "    port_mapping {\n      name = \"http\"\n      container_port = 8080\n    }\n    mount_point {\n      source_volume = \"models\"\n      container_path = \"/models\"\n      read_only = true\n    }\n    health_check {\n      command = [\"CMD-SHELL\", \"true\"]\n      start_period = 60\n    }\n",
        "  volume \"models\" {\n    host_path = \"/opt/models\"\n  }\n",
    );
    assert_eq!(errors(&ok), Vec::<String>::new());
}

/// A service tracking a Prometheus metric of its tasks' endpoint: `target.port`
/// names a TCP port mapping of its task definition, the error says which ones do;
/// a GPU metric takes no port, and a Prometheus metric needs one.
#[test]
fn an_endpoint_metric_names_a_port_mapping_of_the_task() {
    let config = |target: &str| {
        format!(
            r#"
capacity_provider "p" {{
  instance_type = "g6.xlarge"
  max_size      = 2
}}
task_definition "t" {{
  container "c" {{
    image = "vllm/vllm-openai:v0.6.3"
    port_mapping {{
      name           = "http"
      container_port = 8000
    }}
    gpu {{
      mps {{ memory = 4096 }}
    }}
  }}
}}
service "s" {{
  task_definition   = "t"
  capacity_provider = "p"
  desired_count     = 2
  auto_scaling {{
    min_count = 1
    max_count = 4
    target {{
      {target}
      value = 5
    }}
  }}
}}
"#
        )
    };
    let ok = errors(&config(
        "metric = \"vllm:num_requests_waiting\"\n      port = \"http\"",
    ));
    assert!(ok.is_empty(), "{ok:?}");
    let e = errors(&config(
        "metric = \"vllm:num_requests_waiting\"\n      port = \"metrics\"",
    ));
    assert!(
        e.iter()
            .any(|m| m.contains("service.s.auto_scaling.target.port")
                && m.contains("no TCP port mapping named \"metrics\"")
                && m.contains("name one of its TCP port mappings: http")),
        "{e:?}"
    );
    let e = errors(&config("metric = \"vllm:num_requests_waiting\""));
    assert!(
        e.iter().any(|m| m.contains("auto_scaling.target.port")
            && m.contains("port must name the port mapping")),
        "{e:?}"
    );
    let e = errors(&config(
        "metric = \"gpu_sm_percent\"\n      port = \"http\"",
    ));
    assert!(
        e.iter().any(|m| m.contains("auto_scaling.target.port")
            && m.contains("measured by the agent through NVML")),
        "{e:?}"
    );
    let e = errors(&config(
        "metric = \"vllm:num_requests_waiting\"\n      port = \"http\"\n      path = \"metrics\"",
    ));
    assert!(
        e.iter().any(|m| m.contains("auto_scaling.target.path")),
        "{e:?}"
    );
}

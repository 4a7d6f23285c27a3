//! The provider driven by the real `terraform` binary (found on PATH), through a
//! CLI configuration with `dev_overrides` pointing at the freshly built provider:
//! no `terraform init`, loopback only.

mod tfwork;

use gpushare_core::model::StoreState;
use gpushare_engine::cloud::LocalCloud;
use gpushare_engine::store::{FileStore, Store};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tfwork::Workdir;

impl Workdir {
    /// What `gpushare plan` of the same .tf files sees: the configuration loaded as
    /// the CLI loads it (the provider block's cluster) and the fleet observed.
    fn cli_view(&self) -> (gpushare_core::model::Desired, gpushare_core::model::Live) {
        let loaded =
            gpushare_config::load_dir(&self.path(), &gpushare_config::LoadOptions::default())
                .unwrap();
        let mut desired = loaded.desired;
        desired.settings.cluster = "tf-example".into();
        let live = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let store = FileStore::open(self.state_dir()).unwrap();
                let cloud = LocalCloud::open(self.state_dir()).unwrap();
                gpushare_engine::observe::observe(&store, &cloud, "tf-example", 0)
                    .await
                    .unwrap()
            });
        (desired, live)
    }

    fn state_dir(&self) -> PathBuf {
        self.path().join(".gpushare")
    }

    fn store(&self) -> StoreState {
        let store = FileStore::open(self.state_dir()).unwrap();
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(store.load())
            .unwrap()
    }

    /// The plan's actions for `address` in `terraform show -json` of a saved plan.
    fn planned_actions(&self, vars: &[&str]) -> std::collections::BTreeMap<String, Vec<String>> {
        let mut args = vec!["plan", "-out=tfplan", "-no-color"];
        args.extend_from_slice(vars);
        self.ok(&args);
        let json: serde_json::Value =
            serde_json::from_str(&self.ok(&["show", "-json", "tfplan"])).unwrap();
        json["resource_changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|rc| {
                let actions = rc["change"]["actions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_str().unwrap().to_string())
                    .collect();
                (rc["address"].as_str().unwrap().to_string(), actions)
            })
            .collect()
    }
}

fn example() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/terraform/main.tf"),
    )
    .unwrap()
}

/// Checks that every task sits on a known host and the local fleet holds exactly one
/// running instance per active host (no duplicate launches).
fn assert_consistent(w: &Workdir) -> StoreState {
    let state = w.store();
    for t in state.tasks.values() {
        assert!(
            state.hosts.contains_key(&t.host),
            "task {} on unknown host {}",
            t.id,
            t.host
        );
    }
    let fleet = LocalCloud::open(w.state_dir())
        .unwrap()
        .instances()
        .unwrap();
    let running = fleet.iter().filter(|i| i.state.is_active()).count();
    let active = state.hosts.values().filter(|h| h.state.is_active()).count();
    assert_eq!(
        running, active,
        "fleet {fleet:?} vs hosts {:?}",
        state.hosts
    );
    state
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one Terraform lifecycle, step by step"
)]
fn example_applies_plans_clean_updates_replaces_imports_and_destroys() {
    let w = Workdir::new(&example());
    // terraform plan shows what the run does to the fleet, with its cost.
    let planned = w.run(&["plan", "-no-color"]);
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&planned.stdout),
        String::from_utf8_lossy(&planned.stderr)
    );
    assert!(planned.status.success(), "{shown}");
    assert!(
        shown.contains("Warning: Fleet change after gpushare_service.")
            || shown.contains("Warning: Fleet change after service."),
        "{shown}"
    );
    assert!(
        shown.contains("to launch") && shown.contains("Cost per hour"),
        "{shown}"
    );
    // ... and where the tasks land (host and GPU), which the plan's values leave unknown.
    assert!(
        shown.contains("Tasks:") && shown.contains(": start ") && shown.contains(" GPU "),
        "{shown}"
    );
    w.ok(&["apply", "-auto-approve", "-no-color"]);
    let state = assert_consistent(&w);
    assert_eq!(
        state
            .tasks
            .values()
            .filter(|t| t.service == "embedder")
            .count(),
        3
    );
    assert_eq!(
        state
            .tasks
            .values()
            .filter(|t| t.service == "batch")
            .count(),
        1
    );

    // No perpetual diff.
    let out = w.run(&["plan", "-detailed-exitcode", "-no-color"]);
    assert_eq!(out.status.code(), Some(0), "plan after apply is not clean");

    // The pool's computed size and hourly cost, as refreshed into Terraform's state:
    // its hosts at the catalogue's price.
    w.ok(&["apply", "-refresh-only", "-auto-approve", "-no-color"]);
    let shown: serde_json::Value =
        serde_json::from_str(&w.ok(&["show", "-json", "-no-color"])).unwrap();
    let pool = shown["values"]["root_module"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["address"] == "gpushare_capacity_provider.l4")
        .unwrap()["values"]
        .clone();
    let hosts = pool["desired_size"].as_f64().unwrap();
    let price = gpushare_core::catalog::lookup("g6.12xlarge")
        .and_then(|t| t.price_per_hour)
        .unwrap();
    assert!(hosts >= 1.0, "{pool:#}");
    let want = (hosts * price * 100.0).round() / 100.0;
    assert!(
        (pool["hourly_cost"].as_f64().unwrap() - want).abs() < 1e-9,
        "hourly_cost {} for {hosts} hosts at ${price}/h: {pool:#}",
        pool["hourly_cost"]
    );
    // Each service's deployment (issue 43): its first, as the store records it.
    let embedder = shown["values"]["root_module"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["address"] == "gpushare_service.embedder")
        .unwrap()["values"]
        .clone();
    assert_eq!(embedder["deployment_id"], "embedder/1", "{embedder:#}");
    assert_eq!(embedder["deployment_revision"], 1, "{embedder:#}");
    assert_eq!(embedder["deployment_failed_tasks"], 0, "{embedder:#}");
    assert!(
        embedder["deployment_previous_revision"].is_null()
            && embedder["deployment_reason"].is_null(),
        "{embedder:#}"
    );
    // IN_PROGRESS until a run finds its tasks healthy and writes COMPLETED.
    assert!(
        ["IN_PROGRESS", "COMPLETED"].contains(&embedder["deployment_state"].as_str().unwrap_or("")),
        "{embedder:#}"
    );
    let out = w.run(&["plan", "-detailed-exitcode", "-no-color"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "plan after the refresh is not clean"
    );

    // One config, two engines: `gpushare plan` of the same .tf files over the store the
    // provider wrote plans nothing, and its placements are the ones the provider recorded.
    let (desired, live) = w.cli_view();
    let cli_plan =
        gpushare_core::plan::plan(&desired, &live, &gpushare_core::plan::Options::default())
            .unwrap();
    assert!(
        cli_plan.is_empty(),
        "the CLI would change what the provider applied: {:?}",
        cli_plan.resource_changes
    );
    let placed = |s: &StoreState| {
        s.tasks
            .values()
            .map(|t| (t.id.clone(), t.host.clone(), t.gpus.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(placed(&cli_plan.after), placed(&state));

    // In place: desired_count.
    let actions = w.planned_actions(&["-var", "embedder_count=5"]);
    assert_eq!(actions["gpushare_service.embedder"], vec!["update"]);
    assert_eq!(actions["gpushare_capacity_provider.l4"], vec!["no-op"]);
    // Forced replacement: the pool's instance type.
    let actions = w.planned_actions(&["-var", "l4_instance_type=g6.24xlarge"]);
    assert_eq!(
        actions["gpushare_capacity_provider.l4"],
        vec!["delete", "create"]
    );
    // Apply the in-place change for real.
    w.ok(&[
        "apply",
        "-auto-approve",
        "-no-color",
        "-var",
        "embedder_count=5",
    ]);
    assert_eq!(
        assert_consistent(&w)
            .tasks
            .values()
            .filter(|t| t.service == "embedder")
            .count(),
        5
    );
    assert_eq!(
        w.run(&[
            "plan",
            "-detailed-exitcode",
            "-no-color",
            "-var",
            "embedder_count=5"
        ])
        .status
        .code(),
        Some(0)
    );

    // Import after forgetting a resource, then plan clean.
    w.ok(&[
        "state",
        "rm",
        "gpushare_service.batch",
        "gpushare_task_definition.batch",
    ]);
    w.ok(&[
        "import",
        "-no-color",
        "-var",
        "embedder_count=5",
        "gpushare_service.batch",
        "batch",
    ]);
    w.ok(&[
        "import",
        "-no-color",
        "-var",
        "embedder_count=5",
        "gpushare_task_definition.batch",
        "batch",
    ]);
    let out = w.run(&[
        "plan",
        "-detailed-exitcode",
        "-no-color",
        "-var",
        "embedder_count=5",
    ]);
    assert_eq!(out.status.code(), Some(0), "plan after import is not clean");

    // Destroy leaves no hosts or tasks.
    w.ok(&[
        "destroy",
        "-auto-approve",
        "-no-color",
        "-var",
        "embedder_count=5",
    ]);
    let state = assert_consistent(&w);
    assert!(state.tasks.is_empty(), "{:?}", state.tasks.keys());
    assert!(state.hosts.is_empty(), "{:?}", state.hosts.keys());
    assert!(state.resources.is_empty(), "{:?}", state.resources.keys());
}

#[test]
fn validate_shows_the_providers_diagnostics_with_attribute_paths() {
    let w = Workdir::new(
        r#"
terraform {
  required_providers {
    gpushare = { source = "gpushare/gpushare" }
  }
}

resource "gpushare_capacity_provider" "p" {
  name          = "p"
  instance_type = "g6.xlarg"
  max_size      = 5000
}

resource "gpushare_task_definition" "t" {
  name = "t"
  container {
    name  = "c"
    image = "x"
    gpu {
      mps {
        memory              = 1024
        max_compute_percent = 150
      }
    }
  }
}
"#,
    );
    let out = w.run(&["validate", "-no-color"]);
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Unknown instance type"), "{text}");
    assert!(
        text.contains("did you mean") && text.contains("g6.xlarge,"),
        "{text}"
    );
    // Terraform quotes the source line the attribute path points at.
    assert!(text.contains(r#"instance_type = "g6.xlarg""#), "{text}");
    assert!(text.contains("max_size      = 5000"), "{text}");
    assert!(text.contains("max_compute_percent = 150"), "{text}");
    assert!(!w.state_dir().exists(), "validate changed nothing");
}

/// Checks across resources at plan time: Terraform plans the service after the task
/// definition and pool it references, and the provider checks the service against
/// what this same run planned for them (not only against the store, which has
/// neither yet). An MPS share larger than the pool's GPU, and a whole-GPU count over
/// the instance's GPUs, fail `terraform plan` at the service's attribute.
#[test]
fn plan_checks_a_service_against_the_pool_and_task_definition_planned_in_the_same_run() {
    let config = |share: &str, gpus: u32| {
        format!(
            r#"
terraform {{
  required_providers {{
    gpushare = {{ source = "gpushare/gpushare" }}
  }}
}}

provider "gpushare" {{
  cluster   = "cross"
  state_dir = ".gpushare"
}}

resource "gpushare_capacity_provider" "l4" {{
  name          = "l4"
  instance_type = "g6.xlarge"
  max_size      = 2
}}

resource "gpushare_task_definition" "big" {{
  name = "big"
  container {{
    name   = "main"
    image  = "x"
    cpu    = 1024
    memory = 1024
    gpu {{
      mps {{
        memory = {share}
      }}
    }}
  }}
}}

resource "gpushare_task_definition" "whole" {{
  name = "whole"
  container {{
    name   = "main"
    image  = "x"
    cpu    = 1024
    memory = 1024
    gpu {{
      count = {gpus}
    }}
  }}
}}

resource "gpushare_service" "big" {{
  name              = "big"
  task_definition   = gpushare_task_definition.big.name
  capacity_provider = gpushare_capacity_provider.l4.name
  desired_count     = 1
}}

resource "gpushare_service" "whole" {{
  name              = "whole"
  task_definition   = gpushare_task_definition.whole.name
  capacity_provider = gpushare_capacity_provider.l4.name
  desired_count     = 1
}}
"#
        )
    };
    let w = Workdir::new(&config("30000", 2));
    let out = w.run(&["plan", "-no-color"]);
    assert!(!out.status.success(), "the plan must fail");
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("asks for 30000 MiB of GPU memory") && text.contains("22888 MiB"),
        "{text}"
    );
    assert!(text.contains("with gpushare_service.big"), "{text}");
    assert!(text.contains("with gpushare_service.whole"), "{text}");
    // Terraform quotes the line of the attribute the diagnostic points at.
    assert!(
        text.contains("task_definition   = gpushare_task_definition.big.name"),
        "{text}"
    );
    let hosts = w.state_dir().exists().then(|| w.store().hosts.len());
    assert!(matches!(hosts, None | Some(0)), "plan changed nothing");

    // Within the pool's GPU: the same run plans cleanly.
    std::fs::write(w.path().join("main.tf"), config("8192", 1)).expect("config");
    w.ok(&["plan", "-no-color"]);
}

const LONG: &str = r#"
terraform {
  required_providers {
    gpushare = { source = "gpushare/gpushare" }
  }
}

provider "gpushare" {
  cluster = "long"
}

resource "gpushare_capacity_provider" "big" {
  name          = "big"
  instance_type = "g6.48xlarge"
  max_size      = 100
}

resource "gpushare_task_definition" "tiny" {
  name = "tiny"
  container {
    name  = "c"
    image = "x"
    gpu {
      mps {
        memory = 512
      }
    }
  }
}

resource "gpushare_service" "many" {
  name              = "many"
  task_definition   = gpushare_task_definition.tiny.name
  capacity_provider = gpushare_capacity_provider.big.name
  desired_count     = 200
}
"#;

#[test]
fn sigint_during_a_long_apply_leaves_the_store_consistent_and_a_rerun_converges() {
    let w = Workdir::new(LONG);
    // The provider's test hook slows every engine step down, so the apply is surely long.
    let mut child = w
        .command(&["apply", "-auto-approve", "-no-color"])
        .env(gpushare_engine::apply::STEP_DELAY_ENV, "25")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the service's apply is under way: its journal lists the task starts.
    let journal = w.state_dir().join("journal.json");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "the long apply never started");
        if let Some(status) = child.try_wait().unwrap() {
            panic!("terraform finished ({status}) before it could be interrupted");
        }
        let started = std::fs::read_to_string(&journal)
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .is_some_and(|j| {
                j["plan"]["starts"]
                    .as_array()
                    .is_some_and(|a| a.len() == 200)
            });
        if started {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // A few steps in (each one pauses 25 ms), far from the end.
    std::thread::sleep(Duration::from_millis(500));
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    eprintln!("{text}");
    assert!(
        !out.status.success(),
        "the interrupted apply reported success"
    );
    assert!(
        text.contains("Interrupted") || text.contains("cancelled"),
        "{text}"
    );

    // Consistent: readable, every task on a known host, one instance per host; not finished.
    let state = assert_consistent(&w);
    assert!(
        state.tasks.len() < 200,
        "the apply was not interrupted ({} tasks)",
        state.tasks.len()
    );

    // A re-run converges (finishing the interrupted journal), and plans clean.
    w.ok(&["apply", "-auto-approve", "-no-color"]);
    let state = assert_consistent(&w);
    assert_eq!(
        state.tasks.values().filter(|t| t.service == "many").count(),
        200
    );
    assert!(!journal.exists(), "journal left behind");
    assert_eq!(
        w.run(&["plan", "-detailed-exitcode", "-no-color"])
            .status
            .code(),
        Some(0)
    );
}

/// A `secret_env` value is sensitive in the provider's schema: `terraform plan` and
/// `apply` never print it, and the provider's store keeps it only in private files.
#[test]
fn secret_env_is_sensitive_in_terraform_output_and_private_in_the_store() {
    const SECRET: &str = "tf_S3cret_Value_4b1e";
    let config = r#"
terraform {
  required_providers {
    gpushare = { source = "gpushare/gpushare" }
  }
}

variable "token" {
  type = string
}

provider "gpushare" {
  cluster   = "tf-secrets"
  state_dir = ".gpushare"
}

resource "gpushare_capacity_provider" "l4" {
  name          = "l4"
  instance_type = "g6.xlarge"
  max_size      = 1
}

resource "gpushare_task_definition" "embedder" {
  name = "embedder"
  container {
    name       = "server"
    image      = "ghcr.io/example/embedder:1.4"
    env        = { MODEL = "bge-small" }
    secret_env = { HF_TOKEN = var.token }
    gpu {
      mps {
        memory = 2048
      }
    }
  }
}

resource "gpushare_service" "embedder" {
  name              = "embedder"
  task_definition   = gpushare_task_definition.embedder.name
  capacity_provider = gpushare_capacity_provider.l4.name
  desired_count     = 1
}
"#;
    let w = Workdir::new(config);
    let var = format!("-var=token={SECRET}");
    let plan = w.ok(&["plan", "-no-color", &var]);
    assert!(!plan.contains(SECRET), "{plan}");
    assert!(plan.contains("(sensitive value)"), "{plan}");
    let apply = w.ok(&["apply", "-auto-approve", "-no-color", &var]);
    assert!(!apply.contains(SECRET), "{apply}");
    // The store holds it for the agents, in 0600 files of a 0700 directory.
    use std::os::unix::fs::PermissionsExt;
    let dir = w.state_dir();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    // The file store keeps a snapshot (state.json) and the change sets since
    // (state.log): the secret is in one of them, and both are private.
    let files: Vec<_> = ["state.json", "state.log"]
        .iter()
        .map(|f| dir.join(f))
        .filter(|p| p.exists())
        .collect();
    assert!(files
        .iter()
        .any(|p| std::fs::read_to_string(p).unwrap().contains(SECRET)));
    for p in &files {
        assert_eq!(mode(p), 0o600, "{}", p.display());
    }
    let out = w.run(&["plan", "-detailed-exitcode", "-no-color", &var]);
    assert_eq!(out.status.code(), Some(0), "no perpetual diff on a secret");
}

/// The registry layout's examples (`examples/provider/provider.tf` and every
/// `examples/resources/<type>/resource.tf`, generated from the schemas) make one
/// configuration that the real `terraform validate` accepts with this provider.
#[test]
fn the_registry_examples_validate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut config =
        "terraform {\n  required_providers {\n    gpushare = { source = \"gpushare/gpushare\" }\n  }\n}\n\n"
            .to_string();
    config.push_str(&std::fs::read_to_string(root.join("provider/provider.tf")).unwrap());
    let mut resources = 0;
    for e in std::fs::read_dir(root.join("resources")).unwrap() {
        let dir = e.unwrap().path();
        config.push('\n');
        config.push_str(&std::fs::read_to_string(dir.join("resource.tf")).unwrap());
        let import = std::fs::read_to_string(dir.join("import.sh")).unwrap();
        let ty = dir.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            import.contains(&format!("terraform import {ty}.")),
            "{import}"
        );
        resources += 1;
    }
    assert_eq!(resources, 5);
    let w = Workdir::new(&config);
    w.ok(&["validate", "-no-color"]);
}

/// Terraform's platform name for this machine (`linux_amd64`).
fn terraform_platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    format!("{}_{arch}", std::env::consts::OS)
}

/// `terraform init` installs the provider from a filesystem mirror in Terraform's
/// unpacked layout, as docs/index.md tells users to lay it out, with no
/// dev_overrides; the installed provider then plans and applies.
#[test]
fn terraform_init_installs_the_provider_from_a_filesystem_mirror() {
    let w = Workdir::new(&example());
    let version = env!("CARGO_PKG_VERSION");
    let mirror = w.dir.path().join("mirror");
    let dir = mirror.join(format!(
        "registry.terraform.io/gpushare/gpushare/{version}/{}",
        terraform_platform()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        env!("CARGO_BIN_EXE_terraform-provider-gpushare"),
        dir.join(format!("terraform-provider-gpushare_v{version}")),
    )
    .unwrap();
    std::fs::write(
        &w.cli_config,
        format!(
            "provider_installation {{\n  filesystem_mirror {{\n    path    = \"{}\"\n    include = [\"registry.terraform.io/gpushare/gpushare\"]\n  }}\n  direct {{\n    exclude = [\"registry.terraform.io/gpushare/gpushare\"]\n  }}\n}}\n",
            mirror.display()
        ),
    )
    .unwrap();
    let init = w.ok(&["init", "-no-color", "-input=false"]);
    assert!(
        init.contains(&format!("Installing gpushare/gpushare v{version}")),
        "{init}"
    );
    let lock = std::fs::read_to_string(w.path().join(".terraform.lock.hcl")).unwrap();
    assert!(
        lock.contains("provider \"registry.terraform.io/gpushare/gpushare\"")
            && lock.contains(&format!("version = \"{version}\""))
            && lock.contains("h1:"),
        "{lock}"
    );
    let apply = w.run(&["apply", "-auto-approve", "-no-color"]);
    let stdout = String::from_utf8_lossy(&apply.stdout);
    let stderr = String::from_utf8_lossy(&apply.stderr);
    assert!(apply.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("Apply complete!"), "{stdout}");
    assert!(
        !stderr.contains("development overrides"),
        "installed, not overridden: {stderr}"
    );
    assert_consistent(&w);
}

/// The provider block's `heartbeat_timeout_seconds` is what the provider plans with
/// (it planned with the CLI's default before): a host whose agent went silent a few
/// seconds ago is replaced under a 2 s timeout, and kept under the default 120 s.
#[test]
fn a_provider_plan_uses_the_provider_blocks_heartbeat_timeout() {
    let config = |heartbeat: &str, count: u32| {
        format!(
            r#"
terraform {{
  required_providers {{
    gpushare = {{ source = "gpushare/gpushare" }}
  }}
}}

provider "gpushare" {{
  cluster   = "hb"
  state_dir = ".gpushare"
  {heartbeat}
}}

resource "gpushare_capacity_provider" "l4" {{
  name          = "l4"
  instance_type = "g6.12xlarge"
  max_size      = 4
}}

resource "gpushare_task_definition" "small" {{
  name = "small"
  container {{
    name  = "main"
    image = "x"
    gpu {{
      mps {{
        memory = 2048
      }}
    }}
  }}
}}

resource "gpushare_service" "emb" {{
  name              = "emb"
  task_definition   = gpushare_task_definition.small.name
  capacity_provider = gpushare_capacity_provider.l4.name
  desired_count     = {count}
}}
"#
        )
    };
    let w = Workdir::new(&config("", 2));
    w.ok(&["apply", "-auto-approve", "-no-color"]);
    let hosts: Vec<String> = w.store().hosts.keys().cloned().collect();
    assert_eq!(hosts.len(), 1, "{hosts:?}");
    LocalCloud::open(w.state_dir())
        .unwrap()
        .inject_fault("hb", &hosts[0], gpushare_engine::cloud::Fault::Silent)
        .unwrap();
    // Let the host's last report age past a 2 s timeout (not a timing assert: the
    // default 120 s keeps it either way).
    std::thread::sleep(Duration::from_secs(4));
    let plan = |heartbeat: &str| {
        std::fs::write(w.path().join("main.tf"), config(heartbeat, 3)).expect("config");
        let out = w.run(&["plan", "-no-color"]);
        assert!(out.status.success(), "plan failed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let default = plan("");
    assert!(default.contains("0 hosts to launch"), "{default}");
    let short = plan("heartbeat_timeout_seconds = 2");
    assert!(short.contains("1 host to launch"), "{short}");
}

/// The serving settings of a task definition (issue 47) through Terraform: applied,
/// read back into the state as written (defaults included), no perpetual diff, and
/// the planner's host port recorded with the task.
#[test]
fn serving_settings_apply_and_plan_clean() {
    let config = r#"
terraform {
  required_providers {
    gpushare = { source = "gpushare/gpushare" }
  }
}

provider "gpushare" {
  cluster   = "tf-serving"
  state_dir = ".gpushare"
}

resource "gpushare_capacity_provider" "l4" {
  name            = "l4"
  instance_type   = "g6.xlarge"
  max_size        = 1
  host_port_range = "42000-42010"
}

resource "gpushare_task_definition" "web" {
  name         = "web"
  network_mode = "bridge"
  volume {
    name      = "models"
    host_path = "/opt/models"
  }
  volume {
    name = "cache"
    docker_volume {
      scope = "shared"
    }
  }
  container {
    name               = "server"
    image              = "ghcr.io/example/embedder:1.4"
    shared_memory_size = 1024
    entry_point        = ["/bin/serve"]
    port_mapping {
      name           = "http"
      container_port = 8080
    }
    health_check {
      command      = ["CMD-SHELL", "curl -f http://localhost:8080/health"]
      start_period = 60
    }
    mount_point {
      source_volume  = "models"
      container_path = "/models"
      read_only      = true
    }
    ulimit {
      name = "nofile"
      soft = 65536
      hard = 65536
    }
  }
}

resource "gpushare_service" "web" {
  name              = "web"
  task_definition   = gpushare_task_definition.web.name
  capacity_provider = gpushare_capacity_provider.l4.name
  desired_count     = 2
}
"#;
    let w = Workdir::new(config);
    w.ok(&["apply", "-auto-approve", "-no-color"]);
    let out = w.run(&["plan", "-detailed-exitcode", "-no-color"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "no perpetual diff: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let state = assert_consistent(&w);
    let mut ports: Vec<u16> = state
        .tasks
        .values()
        .flat_map(|t| t.ports.iter().map(|p| p.host_port))
        .collect();
    ports.sort();
    assert_eq!(ports, vec![42000, 42001]);
    let rev = &state.revisions["web"][0].spec;
    assert_eq!(
        rev.containers[0]
            .health_check
            .as_ref()
            .map(|h| h.start_period),
        Some(60)
    );
    assert_eq!(rev.volumes.len(), 2);
    // A bad value is refused at plan with its attribute path.
    let bad = config.replace(
        "container_path = \"/models\"",
        "container_path = \"models\"",
    );
    let w2 = Workdir::new(&bad);
    let out = w2.run(&["plan", "-no-color"]);
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("is not an absolute path"), "{text}");
}

/// Whitespace runs as one space: Terraform wraps a diagnostic's text at spaces.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The fleet-change warnings of a `terraform plan` output, each as one line.
fn fleet_warnings(shown: &str) -> Vec<String> {
    shown
        .split("Warning: Fleet change")
        .skip(1)
        .map(|w| one_line(w.split("Warning:").next().unwrap_or(w)))
        .collect()
}

/// Issue 45: `terraform plan`'s warnings and `gpushare plan` give the same cost,
/// saving, hints and placements. Terraform plans the two services in parallel; the
/// run's last check counts both, so one warning holds the whole plan, and it says
/// what the CLI's plan of the same files says. `terraform plan -destroy` warns too.
#[test]
fn plan_warnings_give_the_cli_plans_numbers_and_placements_and_destroy_warns() {
    let w = Workdir::new(&example());
    let planned = w.run(&["plan", "-no-color"]);
    let shown = String::from_utf8_lossy(&planned.stdout).to_string();
    assert!(planned.status.success(), "{shown}");
    let warnings = fleet_warnings(&shown);
    let whole = warnings
        .iter()
        .find(|w| w.contains("4 tasks to place"))
        .unwrap_or_else(|| panic!("no warning counts the whole run: {warnings:#?}"));

    // The CLI's plan of the same .tf files against the same empty fleet.
    let (desired, live) = w.cli_view();
    let cli = gpushare_core::plan::plan(&desired, &live, &gpushare_core::plan::Options::default())
        .unwrap();
    let cost = one_line(&gpushare_core::render::cost_text(&cli));
    assert!(cost.contains("(saves "), "{cost}");
    assert!(whole.contains(&cost), "warning:\n{whole}\nCLI:\n{cost}");
    let placements = gpushare_core::render::placement_text(&cli, &live.state, 40);
    let tasks = placements
        .split("Tasks:")
        .nth(1)
        .expect("the CLI's plan places tasks");
    for line in tasks.lines().filter(|l| l.contains(": start ")) {
        assert!(
            whole.contains(&one_line(line)),
            "{line:?} not in the warning:\n{whole}"
        );
    }

    // A destroy says what it retires and what the fleet then costs.
    w.ok(&["apply", "-auto-approve", "-no-color"]);
    let out = w.run(&["plan", "-destroy", "-no-color"]);
    let shown = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{shown}");
    let warnings = fleet_warnings(&shown);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("1 host to retire") || w.contains("1 to retire")),
        "{warnings:#?}"
    );
    assert!(
        warnings.iter().any(|w| w.contains("after $0.00")),
        "{warnings:#?}"
    );
    // The plan changed nothing: the fleet is still up.
    assert_eq!(
        assert_consistent(&w)
            .hosts
            .values()
            .filter(|h| h.state.is_active())
            .count(),
        1
    );
}

//! Terraform's habits in the CLI, run through the real binary: single-dash flags,
//! variable files and their precedence, -target, -replace, -refresh-only,
//! -lock-timeout, -parallelism, -no-color, -input=false; `state show|rm|mv`,
//! `import`; shell completions and the man page.

use gpushare_tests::{gp, plan_json, show_json};
use std::path::Path;

const CONFIG: &str = r#"
gpushare {
  cluster = "habits"
  cloud   = "local"
}

variable "replicas" {
  type    = number
  default = 1
}

capacity_provider "l4" {
  instance_type = "g6.4xlarge"
  max_size      = 4
}

capacity_provider "spare" {
  instance_type = "g6.4xlarge"
  max_size      = 2
}

task_definition "emb" {
  container "server" {
    image  = "ghcr.io/example/emb:1"
    cpu    = 1024
    memory = 2048
    gpu {
      mps {
        memory = 4096
      }
    }
  }
}

service "emb" {
  task_definition   = task_definition.emb
  capacity_provider = capacity_provider.l4
  desired_count     = var.replicas
}
"#;

fn config() -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::write(d.path().join("main.hcl"), CONFIG).expect("write config");
    d
}

/// A scratch copy of CONFIG, applied: (dir, first host id, its instance id).
fn applied() -> (tempfile::TempDir, String, String) {
    let d = config();
    gp(d.path(), &["apply", "-auto-approve"])
        .run()
        .expect_code(0);
    let hosts = show_json(d.path())["hosts"].clone();
    let host = hosts[0]["id"].as_str().expect("a host").to_string();
    let instance = hosts[0]["instance_id"]
        .as_str()
        .expect("an instance")
        .to_string();
    (d, host, instance)
}

/// Ids of the running hosts.
fn running_hosts(dir: &Path) -> Vec<String> {
    show_json(dir)["hosts"]
        .as_array()
        .expect("hosts")
        .iter()
        .filter(|h| h["state"] == "running")
        .filter_map(|h| h["id"].as_str().map(str::to_string))
        .collect()
}

/// The addresses a plan JSON document changes.
fn changed(plan: &serde_json::Value) -> Vec<String> {
    plan["resource_changes"]
        .as_array()
        .expect("changes")
        .iter()
        .filter_map(|c| c["addr"].as_str().map(str::to_string))
        .collect()
}

/// The desired_count `plan -json` plans for service.emb (with extra arguments).
fn planned_replicas(dir: &Path, extra: &[&str], env: Option<&str>) -> i64 {
    let mut args = vec!["plan", "-json"];
    args.extend_from_slice(extra);
    let mut cmd = gp(dir, &args);
    if let Some(v) = env {
        cmd = cmd.env("GPUSHARE_VAR_replicas", v);
    }
    let r = cmd.run();
    r.expect_code(0);
    let plan = r.plan_doc();
    plan["resource_changes"]
        .as_array()
        .expect("resource_changes")
        .iter()
        .find(|c| c["addr"] == "service.emb")
        .and_then(|c| c["after"]["desired_count"].as_i64())
        .unwrap_or_else(|| panic!("no service.emb in {plan:#}"))
}

#[test]
fn variable_precedence_follows_terraform() {
    let d = config();
    let p = d.path();
    let w = |name: &str, text: &str| std::fs::write(p.join(name), text).expect("write");
    w("terraform.tfvars", "replicas = 3\n");
    w("terraform.tfvars.json", "{\"replicas\": 4}\n");
    w("a.auto.tfvars", "replicas = 5\n");
    w("b.auto.tfvars.json", "{\"replicas\": 6}\n");
    w("x.tfvars", "replicas = 7\n");
    w("y.tfvars.json", "{\"replicas\": 8}\n");
    let files = ["-var-file=x.tfvars", "-var-file", "y.tfvars.json"];
    let all: Vec<&str> = files
        .iter()
        .copied()
        .chain(["-var", "replicas=9"])
        .collect();
    // Highest first, each layer removed in turn.
    assert_eq!(planned_replicas(p, &all, Some("2")), 9, "-var wins");
    assert_eq!(
        planned_replicas(p, &files, Some("2")),
        8,
        "the later -var-file"
    );
    assert_eq!(
        planned_replicas(p, &["--var-file=x.tfvars"], Some("2")),
        7,
        "a -var-file over *.auto.tfvars"
    );
    assert_eq!(
        planned_replicas(p, &[], Some("2")),
        6,
        "the last *.auto.tfvars in lexical order"
    );
    std::fs::remove_file(p.join("b.auto.tfvars.json")).expect("rm");
    assert_eq!(planned_replicas(p, &[], Some("2")), 5);
    std::fs::remove_file(p.join("a.auto.tfvars")).expect("rm");
    assert_eq!(
        planned_replicas(p, &[], Some("2")),
        4,
        "terraform.tfvars.json over terraform.tfvars"
    );
    std::fs::remove_file(p.join("terraform.tfvars.json")).expect("rm");
    assert_eq!(
        planned_replicas(p, &[], Some("2")),
        3,
        "terraform.tfvars over the environment"
    );
    std::fs::remove_file(p.join("terraform.tfvars")).expect("rm");
    assert_eq!(
        planned_replicas(p, &[], Some("2")),
        2,
        "the environment over the default"
    );
    assert_eq!(planned_replicas(p, &[], None), 1, "the default");
}

#[test]
fn bad_variable_files_get_located_errors_and_change_nothing() {
    let d = config();
    let p = d.path();
    std::fs::write(
        p.join("bad.tfvars"),
        "replicas = 2\nreplicas_typo = var.x\n",
    )
    .expect("write");
    let r = gp(p, &["plan", "-var-file=bad.tfvars"]).run();
    r.expect_code(1);
    assert!(r.stderr.contains("bad.tfvars:2:"), "{}", r.stderr);
    std::fs::write(p.join("bad.tfvars"), "replicas = \"many\"\n").expect("write");
    let r = gp(p, &["plan", "-var-file=bad.tfvars"]).run();
    r.expect_code(1);
    assert!(
        r.stderr.contains("invalid value for variable \"replicas\"")
            && r.stderr.contains("bad.tfvars:1:1"),
        "{}",
        r.stderr
    );
    std::fs::write(p.join("terraform.tfvars.json"), "{\"replicas\": }").expect("write");
    let r = gp(p, &["validate"]).run();
    r.expect_code(1);
    assert!(
        r.stderr.contains("terraform.tfvars.json:1:"),
        "{}",
        r.stderr
    );
    let r = gp(p, &["plan", "-var-file=missing.tfvars"]).run();
    r.expect_code(1);
    assert!(
        !p.join(".gpushare").join("state.json").exists(),
        "nothing was written"
    );
}

#[test]
fn single_dash_flags_plan_save_and_apply() {
    let d = config();
    let p = d.path();
    // -detailed-exitcode: 2 with changes; -out=FILE saves; -no-color, -input=false accepted.
    let r = gp(
        p,
        &[
            "plan",
            "-detailed-exitcode",
            "-out=p.plan",
            "-no-color",
            "-input=false",
            "-lock-timeout=5s",
        ],
    )
    .run();
    r.expect_code(2);
    assert!(!r.stdout.contains('\u{1b}'), "no colour codes");
    assert!(p.join("p.plan").is_file());
    gp(p, &["apply", "p.plan", "-lock-timeout=30s"])
        .run()
        .expect_code(0);
    let r = gp(p, &["plan", "-detailed-exitcode"]).run();
    r.expect_code(0);
    // -input=false: no question is asked (and stdin is no terminal anyway): refused clearly.
    let r = gp(p, &["apply", "-input=false", "-var", "replicas=2"]).run();
    r.expect_code(1);
    assert!(r.stderr.contains("-input=false"), "{}", r.stderr);
    // -auto-approve and -parallelism.
    let r = gp(
        p,
        &[
            "apply",
            "-auto-approve",
            "-parallelism=2",
            "-var",
            "replicas=2",
        ],
    )
    .run();
    r.expect_code(0);
    assert_eq!(show_json(p)["tasks"].as_array().map(Vec::len), Some(2));
    let r = gp(p, &["apply", "-auto-approve", "-parallelism=0"]).run();
    r.expect_code(1);
    // A unit is required, as in Terraform.
    let r = gp(p, &["plan", "-lock-timeout=30"]).run();
    r.expect_code(1);
    assert!(r.stderr.contains("30s, 2m or 1h"), "{}", r.stderr);
}

#[test]
fn lock_timeout_zero_refuses_at_once_naming_the_holder() {
    let d = config();
    let p = d.path();
    gp(p, &["apply", "-auto-approve"]).run().expect_code(0);
    // A slow apply holds the lock while the other waits -lock-timeout=0s: refused at once.
    let slow = gp(p, &["apply", "-auto-approve", "-var", "replicas=3"])
        .env("GPUSHARE_TEST_STEP_DELAY_MS", "1500")
        .spawn();
    // Wait until the slow apply holds the lock (at most 20 s).
    let t0 = std::time::Instant::now();
    while t0.elapsed() < std::time::Duration::from_secs(20)
        && !gp(p, &["state", "rm", "-lock-timeout=0s", "task.none"])
            .run()
            .stderr
            .contains("locked")
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let r = gp(p, &["state", "rm", "-lock-timeout=0s", "task.none"]).run();
    let out = slow.wait_with_output().expect("slow apply");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    r.expect_code(1);
    assert!(
        r.stderr.contains("locked by \"gpushare apply\""),
        "{}",
        r.stderr
    );
    // With a generous timeout the lock is free again and the error is the address.
    let r = gp(p, &["state", "rm", "-lock-timeout=2m", "task.none"]).run();
    r.expect_code(1);
    assert!(
        r.stderr.contains("no task.none in the state"),
        "{}",
        r.stderr
    );
}

#[test]
fn target_plans_the_resource_and_its_dependencies_only() {
    let d = config();
    let p = d.path();
    let plan = plan_json(p, &["-target=service.emb"]);
    assert_eq!(
        changed(&plan),
        ["capacity_provider.l4", "task_definition.emb", "service.emb"]
    );
    assert!(
        plan["notes"].to_string().contains("partial plan (-target)"),
        "{:#}",
        plan["notes"]
    );
    let r = gp(p, &["plan", "-target", "service.emb"]).run();
    r.expect_code(0);
    assert!(r.stdout.contains("partial plan"), "{}", r.stdout);
    gp(p, &["apply", "-auto-approve", "-target=service.emb"])
        .run()
        .expect_code(0);
    // The untargeted pool was not created; a full plan creates it.
    let plan = plan_json(p, &[]);
    assert_eq!(changed(&plan), ["capacity_provider.spare"]);
    let r = gp(p, &["plan", "-target=service.nope"]).run();
    r.expect_code(1);
    assert!(
        r.stderr.contains("declares no service.nope"),
        "{}",
        r.stderr
    );
}

#[test]
fn replace_a_host_launches_another_and_retires_it() {
    let (d, old, _) = applied();
    let p = d.path();
    let plan = plan_json(p, &[&format!("-replace=host.{old}")]);
    assert_eq!(plan["summary"]["launch"], 1, "{:#}", plan["summary"]);
    assert!(
        plan["notes"].to_string().contains("-replace"),
        "{:#}",
        plan["notes"]
    );
    gp(
        p,
        &["apply", "-auto-approve", &format!("-replace=host.{old}")],
    )
    .run()
    .expect_code(0);
    // Once the new host runs the task, the old one is retired.
    gp(p, &["apply", "-auto-approve"]).run().expect_code(0);
    let ids = running_hosts(p);
    assert!(
        !ids.is_empty() && !ids.contains(&old),
        "{ids:?} still has {old}"
    );
    let r = gp(p, &["plan", "-replace=service.emb"]).run();
    r.expect_code(1);
    assert!(r.stderr.contains("gpushare replaces hosts"), "{}", r.stderr);
    let r = gp(p, &["plan", "-replace=host.h-nope"]).run();
    r.expect_code(1);
}

#[test]
fn refresh_only_reports_and_records_changes_outside_gpushare() {
    let (d, host, _) = applied();
    let p = d.path();
    // Record what the agents reported since (MPS healthy, hosts running), then nothing is left.
    gp(p, &["apply", "-refresh-only", "-auto-approve"])
        .run()
        .expect_code(0);
    let r = gp(p, &["plan", "-refresh-only", "-detailed-exitcode"]).run();
    r.expect_code(0);
    gp(p, &["debug", "fault", &host, "mps-down"])
        .run()
        .expect_code(0);
    let state_before = gpushare_tests::file_store_files(&p.join(".gpushare"));
    // Three failed probes make the host impaired; the refresh notices.
    let mut r = gp(p, &["plan", "-refresh-only", "-detailed-exitcode"]).run();
    for _ in 0..3 {
        if r.code == 2 {
            break;
        }
        r = gp(p, &["plan", "-refresh-only", "-detailed-exitcode"]).run();
    }
    r.expect_code(2);
    assert!(
        r.stdout.contains(&format!("host.{host}: MPS")),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("proposes no change"), "{}", r.stdout);
    assert_eq!(
        gpushare_tests::file_store_files(&p.join(".gpushare")),
        state_before,
        "a refresh-only plan writes nothing"
    );
    let r = gp(p, &["apply", "-refresh-only", "-auto-approve"]).run();
    r.expect_code(0);
    assert!(r.stdout.contains("Recorded"), "{}", r.stdout);
    let r = gp(p, &["state", "show", &format!("host.{host}"), "-json"]).run();
    r.expect_code(0);
    assert_eq!(r.json()["mps_health"], "impaired");
    let r = gp(p, &["plan", "-refresh-only", "-target=service.emb"]).run();
    r.expect_code(1);
}

#[test]
fn state_show_rm_mv_and_import_round_trip() {
    let (d, host, instance) = applied();
    let p = d.path();
    let r = gp(p, &["state", "show", "service.emb"]).run();
    r.expect_code(0);
    assert!(
        r.stdout.contains("desired_count") && r.stdout.contains("= 1"),
        "{}",
        r.stdout
    );
    let r = gp(p, &["state", "show", "service.nope"]).run();
    r.expect_code(1);
    assert!(
        r.stderr.contains("no service.nope in the state"),
        "{}",
        r.stderr
    );

    // mv: the service and its tasks follow; the config still says "emb", so a plan
    // shows the rename's effect (service.emb to create, service.embed to delete).
    gp(p, &["state", "mv", "service.emb", "service.embed"])
        .run()
        .expect_code(0);
    let list = gp(p, &["state", "list"]).run();
    assert!(
        list.stdout.contains("service.embed") && !list.stdout.contains("service.emb\n"),
        "{}",
        list.stdout
    );
    let r = gp(p, &["state", "mv", "service.embed", "task_definition.x"]).run();
    r.expect_code(1);
    gp(p, &["state", "mv", "service.embed", "service.emb"])
        .run()
        .expect_code(0);
    gp(p, &["plan", "-detailed-exitcode"]).run().expect_code(0);

    // rm a host: it becomes a stray; import adopts it back into its pool.
    let r = gp(p, &["state", "rm", "capacity_provider.l4"]).run();
    r.expect_code(1);
    assert!(r.stderr.contains(&format!("host.{host}")), "{}", r.stderr);
    let r = gp(p, &["state", "rm", &format!("host.{host}")]).run();
    r.expect_code(0);
    assert!(
        r.stdout.contains(&format!("Removed host.{host}")),
        "{}",
        r.stdout
    );
    let r = gp(p, &["show"]).run();
    assert!(
        r.stdout.contains(&format!("stray instance {instance}")),
        "{}",
        r.stdout
    );

    let r = gp(p, &["import", "service.emb", &instance]).run();
    r.expect_code(1);
    assert!(r.stderr.contains("not importable"), "{}", r.stderr);
    let r = gp(p, &["import", "capacity_provider.l4", "i-nope"]).run();
    r.expect_code(1);
    assert!(
        r.stderr.contains("only instances gpushare launched"),
        "{}",
        r.stderr
    );
    let r = gp(p, &["import", "capacity_provider.spare", &instance]).run();
    r.expect_code(1);
    assert!(
        r.stderr.contains("launched for pool \"l4\""),
        "{}",
        r.stderr
    );
    let r = gp(p, &["import", "capacity_provider.l4", &instance]).run();
    r.expect_code(0);
    assert!(r.stdout.contains(&format!("host.{host}")), "{}", r.stdout);
    let r = gp(p, &["import", "capacity_provider.l4", &instance]).run();
    r.expect_code(1);
    assert!(r.stderr.contains("already in the state"), "{}", r.stderr);
    // The imported host takes the task again: one host, no launch.
    gp(p, &["apply", "-auto-approve"]).run().expect_code(0);
    assert_eq!(running_hosts(p), [host]);
}

#[test]
fn import_checks_the_pools_instance_type() {
    let (d, host, instance) = applied();
    let p = d.path();
    gp(p, &["state", "rm", &format!("host.{host}")])
        .run()
        .expect_code(0);
    std::fs::write(
        p.join("main.hcl"),
        CONFIG.replace(
            "instance_type = \"g6.4xlarge\"\n  max_size      = 4",
            "instance_type = \"g6.8xlarge\"\n  max_size      = 4",
        ),
    )
    .expect("write");
    let r = gp(p, &["import", "capacity_provider.l4", &instance]).run();
    r.expect_code(1);
    assert!(
        r.stderr
            .contains("is a g6.4xlarge, but capacity_provider.l4 runs g6.8xlarge"),
        "{}",
        r.stderr
    );
}

#[test]
fn completions_and_man_page() {
    let d = tempfile::tempdir().expect("tempdir");
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef gpushare"),
        ("fish", "complete -c gpushare"),
    ] {
        let r = gp(d.path(), &["completions", shell]).run();
        r.expect_code(0);
        assert!(
            r.stdout.contains(marker),
            "{shell}: {}",
            &r.stdout[..r.stdout.len().min(300)]
        );
        assert!(r.stdout.contains("auto-approve"), "{shell} completes flags");
    }
    gp(d.path(), &["completions", "tcsh"]).run().expect_code(1);
    let r = gp(d.path(), &["man"]).run();
    r.expect_code(0);
    assert!(
        r.stdout.starts_with(".ie") || r.stdout.contains(".TH gpushare"),
        "{}",
        &r.stdout[..200.min(r.stdout.len())]
    );
    assert!(r.stdout.contains("Declarative GPU sharing"));
    // The man page and completions are real: bash parses the script.
    if std::process::Command::new("bash")
        .arg("--version")
        .output()
        .is_ok()
    {
        let script = d.path().join("gpushare.bash");
        std::fs::write(&script, gp(d.path(), &["completions", "bash"]).run().stdout)
            .expect("write");
        let ok = std::process::Command::new("bash")
            .arg("-n")
            .arg(&script)
            .status()
            .expect("bash -n");
        assert!(ok.success(), "bash -n rejects the completion script");
    }
}

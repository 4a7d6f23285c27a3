//! `store = "etcd://..."` end to end: the real `gpushare` binary applies a
//! configuration whose state lives in a real etcd (Debian's etcd-server, started on a
//! loopback port by the test; missing etcd is a failure), `show` reads it back, nothing
//! of the state is written to the configuration directory, and `gpushare agent` opens
//! the same store.

#[path = "../../store-etcd/tests/common/mod.rs"]
mod etcd_support;

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_gpushare");

fn gpushare(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("GPUSHARE_FAILPOINT")
        .output()
        .expect("running gpushare")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n{}{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_and_the_agent_keep_the_state_in_etcd() {
    let etcd = etcd_support::Etcd::start().await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let url = etcd.url("cli-e2e");
    std::fs::write(
        dir.join("main.hcl"),
        format!(
            r#"
gpushare {{
  cluster = "etcd-e2e"
  store   = "{url}"
}}

capacity_provider "l4" {{
  instance_type = "g6.xlarge"
  max_size      = 2
}}

task_definition "emb" {{
  container "main" {{
    image = "emb:1"
    gpu {{
      mps {{
        memory = 4096
      }}
    }}
  }}
}}

service "emb" {{
  task_definition   = "emb"
  capacity_provider = "l4"
  desired_count     = 3
}}
"#
        ),
    )
    .expect("config");

    let out = gpushare(dir, &["apply", "--auto-approve"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        etcd.count("cli-e2e/").await > 0,
        "nothing was written to etcd"
    );
    assert!(
        !dir.join(".gpushare/state.json").exists(),
        "the state went to a file, not to etcd"
    );

    let out = gpushare(dir, &["show", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let show: serde_json::Value = serde_json::from_slice(&out.stdout).expect("show --json");
    let tasks = show["tasks"].as_array().expect("tasks");
    assert_eq!(tasks.len(), 3, "{show:#}");
    assert!(tasks.iter().all(|t| t["state"] == "running"), "{show:#}");

    // A second apply of the same configuration finds nothing to do.
    let out = gpushare(dir, &["plan", "--detailed-exitcode"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // The agent opens the same store by URL: a host id the store does not know is
    // refused by name, and nothing is started.
    let out = gpushare(
        dir,
        &[
            "agent",
            "--store",
            &url,
            "--cluster",
            "etcd-e2e",
            "--host-id",
            "h-nope",
            "--runtime",
            "process",
            "--state-dir",
            &dir.join("agent").display().to_string(),
            "--no-mps",
            "--once",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("h-nope") && err.contains("etcd://"), "{err}");
}

//! `store = "etcd://..."` end to end: the real `gpushare` binary applies a
//! configuration whose state lives in a real etcd (Debian's etcd-server, started on a
//! loopback port by the test; missing etcd is a failure), `show` reads it back, nothing
//! of the state is written to the configuration directory, and `gpushare agent` opens
//! the same store.

use gpushare_testkit_engine::etcd as etcd_support;

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

/// `main.hcl`: one pool, one MPS service of `count` tasks, state in the etcd store `url`.
fn write_config(dir: &Path, cluster: &str, url: &str, count: u32) {
    std::fs::write(
        dir.join("main.hcl"),
        format!(
            r#"
gpushare {{
  cluster = "{cluster}"
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
  desired_count     = {count}
}}
"#
        ),
    )
    .expect("config");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_and_the_agent_keep_the_state_in_etcd() {
    let etcd = etcd_support::Etcd::start().await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let url = etcd.url("cli-e2e");
    write_config(dir, "etcd-e2e", &url, 3);

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

/// Lines a child process printed on stdout so far, collected by a thread.
struct Lines(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Lines {
    fn follow(child: &mut std::process::Child) -> Lines {
        use std::io::BufRead;
        let out = child.stdout.take().expect("piped stdout");
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let l = lines.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                l.lock().expect("lines").push(line);
            }
        });
        Lines(lines)
    }

    fn any(&self, pat: &str) -> bool {
        self.0
            .lock()
            .expect("lines")
            .iter()
            .any(|l| l.contains(pat))
    }

    fn text(&self) -> String {
        self.0.lock().expect("lines").join("\n")
    }

    /// Waits up to `secs` for a line containing `pat`.
    fn wait_for(&self, pat: &str, secs: u64) {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        while std::time::Instant::now() < until {
            if self.any(pat) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("no line with {pat:?} within {secs} s:\n{}", self.text());
    }
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn reconcile_process(dir: &Path) -> (KillOnDrop, Lines) {
    let mut child = Command::new(BIN)
        .current_dir(dir)
        .args(["reconcile", "--interval", "1"])
        .env("NO_COLOR", "1")
        .env_remove("GPUSHARE_FAILPOINT")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawning gpushare reconcile");
    let lines = Lines::follow(&mut child);
    (KillOnDrop(child), lines)
}

/// Two `gpushare reconcile` processes on one etcd store: one leads and reconciles,
/// the other waits as a standby naming the leader; when the leader is killed
/// (SIGKILL: no resignation), the standby takes over once the leader's lease expires
/// and reconciles, and `gpushare status` names it.
#[tokio::test(flavor = "multi_thread")]
async fn two_reconcilers_one_leads_and_a_standby_takes_over_when_it_dies() {
    let etcd = etcd_support::Etcd::start().await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let url = etcd.url("leaders");
    write_config(dir, "leaders", &url, 2);

    let (mut a, a_out) = reconcile_process(dir);
    a_out.wait_for("leading the store's reconcilers", 60);
    a_out.wait_for("reconcile pass 1:", 60);
    let (_b, b_out) = reconcile_process(dir);
    b_out.wait_for("standby;", 60);
    let a_pid = a.0.id();
    assert!(
        b_out.text().contains(&format!("pid {a_pid} ")),
        "{}",
        b_out.text()
    );
    // The standby does not reconcile while the leader lives.
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(!b_out.any("reconcile pass"), "{}", b_out.text());
    let status = gpushare(dir, &["status", "--json"]);
    assert!(status.status.success(), "{}", text(&status));
    let s: serde_json::Value = serde_json::from_slice(&status.stdout).expect("JSON");
    assert!(
        s["leader"]
            .as_str()
            .is_some_and(|l| l.contains(&format!("pid {a_pid} "))),
        "{s}"
    );

    // SIGKILL: the leader cannot resign; its lease (10 s) expires.
    a.0.kill().expect("kill");
    let _ = a.0.wait();
    b_out.wait_for("leading the store's reconcilers", 60);
    b_out.wait_for("reconcile pass 1:", 30);
    let status = gpushare(dir, &["status", "--json"]);
    let s: serde_json::Value = serde_json::from_slice(&status.stdout).expect("JSON");
    assert!(
        s["holder"]
            .as_str()
            .is_some_and(|h| !h.contains(&format!("pid {a_pid} "))),
        "{s}"
    );
    assert!(
        s["leader"]
            .as_str()
            .is_some_and(|l| !l.contains(&format!("pid {a_pid} "))),
        "{s}"
    );
    let show = gpushare(dir, &["show", "--json"]);
    let fleet: serde_json::Value = serde_json::from_slice(&show.stdout).expect("JSON");
    assert_eq!(fleet["tasks"].as_array().map(Vec::len), Some(2), "{fleet}");
}

/// `GET path` over loopback; the status code (0 when nothing answers).
fn http_status(addr: &str, path: &str) -> u16 {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return 0;
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Polls `/readyz` until it answers `want`, for at most `secs` (a bound, not a timing assertion).
fn wait_ready(addr: &str, want: u16, secs: u64) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < until {
        if http_status(addr, "/readyz") == want {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    false
}

/// `/readyz` turns unready when the store is unreachable for two intervals (etcd
/// killed: every pass fails) and ready again once a pass succeeds after etcd returns;
/// `/healthz` answers throughout.
#[tokio::test(flavor = "multi_thread")]
async fn readiness_follows_the_store() {
    let mut etcd = etcd_support::Etcd::start().await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    write_config(dir, "ready", &etcd.url("ready"), 1);
    let mut child = Command::new(BIN)
        .current_dir(dir)
        .args(["reconcile", "--interval", "1", "--listen", "127.0.0.1:0"])
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawning gpushare reconcile");
    let out = Lines::follow(&mut child);
    let _child = KillOnDrop(child);
    out.wait_for("serving /metrics", 60);
    let addr = out
        .text()
        .lines()
        .find_map(|l| l.split("http://").nth(1).map(|a| a.trim().to_string()))
        .expect("the listener's address");
    assert!(wait_ready(&addr, 200, 60), "never ready:\n{}", out.text());

    etcd.kill();
    assert!(
        wait_ready(&addr, 503, 60),
        "still ready with etcd gone:\n{}",
        out.text()
    );
    assert_eq!(http_status(&addr, "/healthz"), 200, "the process answers");

    etcd.restart().await;
    assert!(
        wait_ready(&addr, 200, 90),
        "not ready again after etcd came back:\n{}",
        out.text()
    );
}

/// Moving a fleet's state from the file store to etcd with `state pull` and `state
/// push`: after the push the configuration, now pointing at etcd, plans no change
/// (the etcd store took over the file store's identity, so the fleet's instances are
/// still this state's, not another store's); a second push is refused without
/// --force; bad input (not a state, another cluster) is refused and changes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn state_pull_and_push_move_a_fleet_from_the_file_store_to_etcd() {
    let etcd = etcd_support::Etcd::start().await;
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    // First on the default file store (.gpushare/ beside the configuration).
    write_config(dir, "moving", ".gpushare", 3);
    let out = gpushare(dir, &["apply", "--auto-approve"]);
    assert!(out.status.success(), "{}", text(&out));
    let pulled = gpushare(dir, &["state", "pull"]);
    assert!(pulled.status.success(), "{}", text(&pulled));
    let state: serde_json::Value = serde_json::from_slice(&pulled.stdout).expect("state JSON");
    assert_eq!(state["tasks"].as_object().map(|t| t.len()), Some(3));
    let file = tmp.path().join("state.json.pulled");
    std::fs::write(&file, &pulled.stdout).expect("write the pulled state");

    // Now the same configuration on etcd: an empty store would launch a new fleet.
    let url = etcd.url("moved");
    write_config(dir, "moving", &url, 3);
    let out = gpushare(dir, &["plan", "--detailed-exitcode"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));

    // Bad input first: nothing is written.
    std::fs::write(tmp.path().join("junk.json"), "{ not json").expect("junk");
    let out = gpushare(
        dir,
        &[
            "state",
            "push",
            &tmp.path().join("junk.json").display().to_string(),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("junk.json"),
        "{}",
        text(&out)
    );
    let mut other = state.clone();
    other["cluster"] = serde_json::json!("someone-else");
    std::fs::write(tmp.path().join("other.json"), other.to_string()).expect("other");
    let out = gpushare(
        dir,
        &[
            "state",
            "push",
            &tmp.path().join("other.json").display().to_string(),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("someone-else"),
        "{}",
        text(&out)
    );
    assert_eq!(
        etcd.count("moved/state").await,
        0,
        "a refused push wrote state"
    );

    let out = gpushare(dir, &["state", "push", &file.display().to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    // The fleet is this state's: nothing to do, no instance of another store.
    let out = gpushare(dir, &["plan", "--detailed-exitcode"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = gpushare(dir, &["show", "--json"]);
    let show: serde_json::Value = serde_json::from_slice(&out.stdout).expect("show --json");
    assert_eq!(show["tasks"].as_array().map(Vec::len), Some(3), "{show:#}");

    // Into a store that records something: refused without --force, allowed with it
    // (same identity).
    let out = gpushare(dir, &["state", "push", &file.display().to_string()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--force"),
        "{}",
        text(&out)
    );
    let out = gpushare(
        dir,
        &["state", "push", "--force", &file.display().to_string()],
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = gpushare(dir, &["plan", "--detailed-exitcode"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

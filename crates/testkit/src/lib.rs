//! gpushare's test support, for the tests of every crate (issue 27, item 5): find
//! (build) the real `gpushare` binary and run it as a process in a scratch copy of a
//! configuration, look at what it left on disk, start a real etcd, run hosts as Docker
//! containers ([`docker_hosts`]) or host agents as processes ([`agents`]), and build
//! model values ([`model::host`]).
//!
//! It depends on no workspace crate but `gpushare-core` (tests/architecture.rs, rule 3),
//! so the engine and every crate above it can dev-depend on it without a cycle. What
//! needs the engine (reading a file store through `FileStore`) stays in
//! `gpushare-tests`, the end-to-end test crate, which no crate depends on.

pub mod agents;
pub mod docker_hosts;
pub mod etcd;
pub mod fleet;
pub mod model;
pub mod moto;
pub mod plan;
pub mod procstat;
mod stores;
pub use stores::{test_stores, EtcdProcess, TestStore};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The workspace root (this package lives in `<root>/crates/testkit`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/testkit has a grandparent")
        .to_path_buf()
}

/// Path of the `gpushare` executable.
///
/// In order: `GPUSHARE_BIN` (a prebuilt binary); the binary that this very
/// `cargo test` run built next to the test executable (`<target>/debug/gpushare`:
/// `crates/cli/tests/binary.rs` is an integration test of the `gpushare` package, so
/// `cargo test --workspace` builds the real binary, with the workspace's feature
/// set, before any test runs), as long as no source file is newer than it; and
/// last a nested `cargo build -p gpushare --bin gpushare` (honouring
/// CARGO_TARGET_DIR), for runs such as `cargo test -p gpushare-tests` alone after
/// an edit. The nested build resolves features for `gpushare` alone, so it may
/// compile some dependencies a second time: the reason
/// the second way exists.
pub fn gpushare_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("GPUSHARE_BIN") {
            return PathBuf::from(p);
        }
        if let Some(p) = sibling_binary().filter(|p| is_fresh(p)) {
            return p;
        }
        nested_build()
    })
}

/// `<target>/<profile>/gpushare` beside `<target>/<profile>/deps/<this test>`.
fn sibling_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let profile_dir = exe.parent()?.parent()?;
    let bin = profile_dir.join(format!("gpushare{}", std::env::consts::EXE_SUFFIX));
    bin.is_file().then_some(bin)
}

/// True when no file the binary is built from (sources, manifests, the lock file,
/// schemas and templates that are embedded) is newer than `bin`.
fn is_fresh(bin: &Path) -> bool {
    fn newest(dir: &Path, newest_seen: &mut std::time::SystemTime) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            let name = e.file_name();
            if name == "target" || name.to_string_lossy().starts_with('.') {
                continue;
            }
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                newest(&path, newest_seen);
            } else if let Ok(m) = meta.modified() {
                *newest_seen = (*newest_seen).max(m);
            }
        }
    }
    let Ok(built) = std::fs::metadata(bin).and_then(|m| m.modified()) else {
        return false;
    };
    let root = workspace_root();
    let mut seen = std::time::SystemTime::UNIX_EPOCH;
    for dir in ["crates", "schemas"] {
        newest(&root.join(dir), &mut seen);
    }
    for file in ["Cargo.toml", "Cargo.lock"] {
        if let Ok(m) = std::fs::metadata(root.join(file)).and_then(|m| m.modified()) {
            seen = seen.max(m);
        }
    }
    seen <= built
}

fn nested_build() -> PathBuf {
    let args = [
        "build",
        "-p",
        "gpushare",
        "--bin",
        "gpushare",
        "--message-format=json",
    ];
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(workspace_root())
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .expect("running cargo build for the gpushare binary");
    assert!(out.status.success(), "cargo {} failed", args.join(" "));
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| {
            m["reason"] == "compiler-artifact"
                && m["target"]["name"] == "gpushare"
                && m["target"]["kind"][0] == "bin"
                && m["profile"]["test"] == false
        })
        .filter_map(|m| m["executable"].as_str().map(PathBuf::from))
        .next_back()
        .expect("cargo reported no gpushare executable")
}

/// What one run of the binary did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not one JSON document ({e}):\n{}\n--- stderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
    /// The messages of a `plan -json` stream (one JSON object per line).
    pub fn messages(&self) -> Vec<serde_json::Value> {
        self.stdout
            .lines()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| {
                    panic!(
                        "a line of stdout is not a JSON message ({e}): {l}\n--- stdout:\n{}\n--- stderr:\n{}",
                        self.stdout, self.stderr
                    )
                })
            })
            .collect()
    }

    /// gpushare's own plan document in a `plan -json` stream (its `gpushare_plan` message).
    pub fn plan_doc(&self) -> serde_json::Value {
        self.messages()
            .into_iter()
            .find(|m| m["type"] == "gpushare_plan")
            .map(|m| m["gpushare"].clone())
            .unwrap_or_else(|| panic!("no gpushare_plan message in:\n{}", self.stdout))
    }

    /// Panics with the whole output unless the exit code is `code`.
    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code, code,
            "expected exit {code}, got {}\n--- stdout:\n{}\n--- stderr:\n{}",
            self.code, self.stdout, self.stderr
        );
        self
    }
}

/// A gpushare invocation being prepared.
pub struct Gp {
    cmd: Command,
}

/// `gpushare ARGS` with the working directory `cwd`, no colour, stdin closed,
/// and no failpoint or variables inherited from the test's environment.
pub fn gp(cwd: &Path, args: &[&str]) -> Gp {
    let mut cmd = Command::new(gpushare_bin());
    cmd.current_dir(cwd)
        .args(args)
        .stdin(Stdio::null())
        .env("NO_COLOR", "1")
        .env_remove("GPUSHARE_FAILPOINT");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("GPUSHARE_VAR_") {
            cmd.env_remove(k);
        }
    }
    Gp { cmd }
}

impl Gp {
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.cmd.env(k, v);
        self
    }
    /// Run it under a limit of `limit` open files (soft and hard), as `ulimit -n`.
    pub fn nofile(mut self, limit: u64) -> Self {
        use std::os::unix::process::CommandExt;
        let lim = libc::rlimit {
            rlim_cur: limit as libc::rlim_t,
            rlim_max: limit as libc::rlim_t,
        };
        // SAFETY: setrlimit is async-signal-safe, and the closure touches nothing
        // else of the parent between fork and exec.
        unsafe {
            self.cmd.pre_exec(move || {
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        self
    }
    pub fn run(mut self) -> Run {
        let out = self.cmd.output().expect("running gpushare");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
    /// Start the process without waiting (stdout and stderr piped).
    pub fn spawn(self) -> std::process::Child {
        self.spawn_with(Stdio::piped(), Stdio::piped())
    }

    /// Start it with its stdout and stderr going where they are told (a long-lived
    /// server's log to a file, so that no unread pipe fills up).
    pub fn spawn_with(
        mut self,
        stdout: impl Into<Stdio>,
        stderr: impl Into<Stdio>,
    ) -> std::process::Child {
        self.cmd
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("spawning gpushare")
    }
}

/// A scratch directory holding a copy of `examples/<name>` (configuration only,
/// no state), so tests never write into the repository.
pub fn example(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = workspace_root().join("examples").join(name);
    let mut n = 0;
    for entry in
        std::fs::read_dir(&src).unwrap_or_else(|e| panic!("reading {}: {e}", src.display()))
    {
        let entry = entry.expect("dir entry");
        let p = entry.path();
        if p.extension().is_some_and(|e| e == "hcl" || e == "tf") {
            std::fs::copy(&p, dir.path().join(entry.file_name())).expect("copying an example file");
            n += 1;
        }
    }
    assert!(n > 0, "examples/{name} has no configuration files");
    dir
}

/// Names of the gpushare CLI examples: the directories under `examples/` holding
/// `*.hcl` files (`examples/terraform/` is the Terraform provider's, run by its tests).
pub fn example_names() -> Vec<String> {
    let has_hcl = |dir: &Path| {
        std::fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .any(|e| e.path().extension().is_some_and(|x| x == "hcl"))
            })
            .unwrap_or(false)
    };
    let mut names: Vec<String> = std::fs::read_dir(workspace_root().join("examples"))
        .expect("examples/ exists")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir() && has_hcl(&e.path()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Every file under `dir` with its bytes (for byte-for-byte "nothing changed" checks).
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else if let Ok(bytes) = std::fs::read(&p) {
                out.insert(p.strip_prefix(base).unwrap_or(&p).to_path_buf(), bytes);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Replace every `*.hcl` / `*.tf` file in `dir` with `main.hcl` holding `text`.
pub fn replace_config(dir: &Path, text: &str) {
    for e in std::fs::read_dir(dir).expect("read dir").flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "hcl" || x == "tf") {
            std::fs::remove_file(&p).expect("remove config file");
        }
    }
    std::fs::write(dir.join("main.hcl"), text).expect("write main.hcl");
}

/// `gpushare show --json` in `dir`, parsed.
pub fn show_json(dir: &Path) -> serde_json::Value {
    let r = gp(dir, &["show", "--json"]).run();
    r.expect_code(0);
    r.json()
}

/// gpushare's plan document of `gpushare plan --json` in `dir` with extra arguments.
pub fn plan_json(dir: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["plan", "--json"];
    args.extend_from_slice(extra);
    let r = gp(dir, &args).run();
    r.expect_code(0);
    r.plan_doc()
}

/// The local cloud's instances that are not terminated, from `.gpushare/local-fleet.json`.
pub fn live_fleet_instances(dir: &Path) -> Vec<serde_json::Value> {
    let path = dir.join(".gpushare").join("local-fleet.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let fleet: serde_json::Value = serde_json::from_str(&text).expect("local-fleet.json is JSON");
    fleet["instances"]
        .as_array()
        .expect("instances[]")
        .iter()
        .filter(|i| i["state"] != "terminated")
        .cloned()
        .collect()
}

/// The array `v[key]` (panics with the document when absent).
pub fn arr<'a>(v: &'a serde_json::Value, key: &str) -> &'a Vec<serde_json::Value> {
    v[key]
        .as_array()
        .unwrap_or_else(|| panic!("no array {key:?} in {v:#}"))
}

/// Panics unless every string of `ids` is distinct.
#[track_caller]
pub fn assert_distinct(what: &str, ids: &[String]) {
    let set: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(set.len(), ids.len(), "duplicate {what}: {ids:?}");
}

/// A scratch copy of `examples/<name>`, applied (`apply --auto-approve` exited 0).
pub fn applied(name: &str) -> tempfile::TempDir {
    let d = example(name);
    gp(d.path(), &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    d
}

/// Live `sleep` processes started for `task` (its GPUSHARE_TASK_ID in their environment).
pub fn task_copies(task: &str) -> usize {
    let needle = format!("GPUSHARE_TASK_ID={task}");
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|s| s.parse::<u32>().is_ok())
        })
        .filter(|e| {
            let p = e.path();
            let cmd = std::fs::read(p.join("cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(p.join("stat")).unwrap_or_default();
            let zombie = stat
                .rfind(')')
                .is_some_and(|i| stat[i + 1..].trim_start().starts_with('Z'));
            let env = std::fs::read(p.join("environ")).unwrap_or_default();
            !zombie
                && cmd.split(|b| *b == 0).next() == Some(b"sleep")
                && env.split(|b| *b == 0).any(|v| v == needle.as_bytes())
        })
        .count()
}

/// SIGKILL every live process whose environment carries `GPUSHARE_TASK_ID=task`
/// (what the process runtime started for the task): a test's cleanup.
pub fn kill_task_processes(task: &str) {
    let needle = format!("GPUSHARE_TASK_ID={task}");
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
        if env.split(|b| *b == 0).any(|v| v == needle.as_bytes()) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// `gpushare agent` for host `host` of a local fleet whose state is the file store
/// in `dir/.gpushare` (cluster `cluster`), as the end-to-end tests run it: no MPS
/// (the test machines have no GPU; the inventory is `dir/gpus.json`, one L4, written
/// when missing), one pass a second, a 1 s stop grace, reporting `address`, its
/// state in `dir/agent-state/HOST` and its log in `dir/agent-HOST.log`. The caller
/// adds its own flags (`--runtime`, `--publish-address`...) and spawns it.
pub fn local_agent(dir: &Path, cluster: &str, host: &str, address: &str) -> Command {
    let inventory = dir.join("gpus.json");
    if !inventory.exists() {
        std::fs::write(
            &inventory,
            r#"[{"index":0,"model":"l4","memory_mib":22888,"uuid":"GPU-test-0"}]"#,
        )
        .expect("inventory");
    }
    let log = std::fs::File::create(dir.join(format!("agent-{host}.log"))).expect("agent log");
    let store = format!("file://{}", dir.join(".gpushare").display());
    let mut c = Command::new(gpushare_bin());
    c.args(["agent", "--store", &store, "--cluster", cluster])
        .args(["--host-id", host, "--no-mps"])
        .args(["--interval", "1", "--stop-grace", "1", "--address", address])
        .arg("--inventory-file")
        .arg(&inventory)
        .arg("--state-dir")
        .arg(dir.join("agent-state").join(host))
        .env("GPUSHARE_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    c
}

/// (task, process group, process) of every container the process runtime recorded
/// below `root` (each task's `task.json`: a digest line, then the record with
/// `containers[].process.{pgid,pid}`): what a test kills to take a host's tasks
/// down with it, or maps a task's processes by.
pub fn process_runtime_records(root: &Path) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == "task.json") {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                let body = text.split_once('\n').map_or("", |(_, b)| b);
                let rec: serde_json::Value =
                    serde_json::from_str(body).unwrap_or(serde_json::Value::Null);
                let task = rec["task_id"].as_str().unwrap_or_default().to_string();
                for c in rec["containers"].as_array().into_iter().flatten() {
                    if let Some(pgid) = c["process"]["pgid"].as_u64() {
                        let pid = c["process"]["pid"].as_u64().unwrap_or(pgid);
                        out.push((task.clone(), pgid, pid));
                    }
                }
            }
        }
    }
    out
}

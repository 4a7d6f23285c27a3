//! Your own GPU servers in a registered pool (issue 24), with real processes: a
//! controller serving the agent API (`gpushare serve`), and one `gpushare agent`
//! process per "server", each joining with the same pool token and running its tasks
//! with the process runtime (every task a real `sleep`). The servers' GPU inventories
//! differ, so placement by the GPUs they reported shows. Then cordon, drain, an
//! impaired host and its recovery, `host remove`, and a mixed fleet; nothing ever
//! launches or terminates a registered host (the local cloud's own record of its
//! instances is checked).
//!
//! Stand-ins, because the test machines have no GPU: the MPS control program is a
//! script that answers like a healthy daemon until a file `broken` appears beside it,
//! and each server's GPUs are an inventory file.

use gpushare_core::model::TaskState;
use gpushare_tests::{arr, gp, show_json};
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The configuration: `SMALL` is the small service's count.
const CONFIG: &str = include_str!("fixtures/own_hosts.hcl");

fn config(small: u32) -> String {
    CONFIG.replace("SMALL", &small.to_string())
}

/// The controller and the servers' agents of one test; everything is killed on drop.
struct Lab {
    dir: PathBuf,
    serve: Option<Child>,
    url: String,
    ca_hash: String,
    agents: BTreeMap<String, Child>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in self.agents.values_mut().chain(self.serve.as_mut()) {
            let _ = c.kill();
            let _ = c.wait();
        }
        // The tasks the agents started: the process groups the process runtime
        // recorded (`"pgid"` in each task's task.json, after its digest line).
        let mut stack = vec![self.dir.join("servers")];
        let mut groups = vec![];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.file_name().is_some_and(|n| n == "task.json") {
                    let text = std::fs::read_to_string(&p).unwrap_or_default();
                    let body = text.split_once('\n').map_or("", |(_, b)| b);
                    if let Ok(v) = serde_json::from_str::<serde_json::Value>(body) {
                        pgids(&v, &mut groups);
                    }
                }
            }
        }
        for g in groups {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{g}")])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Every `"pgid"` number in `v`.
fn pgids(v: &serde_json::Value, out: &mut Vec<u64>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match x.as_u64() {
                    Some(n) if k == "pgid" && n > 1 => out.push(n),
                    _ => pgids(x, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| pgids(x, out)),
        _ => {}
    }
}

impl Lab {
    fn start(dir: &Path) -> Lab {
        let log = std::fs::File::create(dir.join("serve.log")).expect("serve log");
        let mut child = gp(dir, &["serve", "--agent-listen", "127.0.0.1:0"])
            .env("GPUSHARE_LOG", "info")
            .spawn_with(Stdio::piped(), log);
        let stdout = child.stdout.take().expect("serve stdout");
        let mut lines = std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok);
        let line = lines
            .find(|l| l.contains("agent API of cluster"))
            .expect("serve announces its address");
        std::thread::spawn(move || lines.for_each(drop));
        let port = line
            .split("https://127.0.0.1:")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .expect("port")
            .to_string();
        let ca_hash = line
            .split("(CA ")
            .nth(1)
            .map(|r| r.trim().trim_end_matches(')').to_string())
            .expect("CA hash");
        Lab {
            dir: dir.to_path_buf(),
            serve: Some(child),
            url: format!("https://localhost:{port}"),
            ca_hash,
            agents: BTreeMap::new(),
        }
    }

    /// A server's own directory: its MPS stand-in, its GPUs (`gpus` MiB each), its state.
    fn server_dir(&self, name: &str, gpus: &[u64]) -> PathBuf {
        let d = self.dir.join("servers").join(name);
        std::fs::create_dir_all(d.join("pipe")).expect("server dir");
        let mps = d.join("nvidia-cuda-mps-control");
        std::fs::write(
            &mps,
            format!(
                "#!/bin/sh\n[ -e {}/broken ] && exit 1\nread -r line\necho 100.0\n",
                d.display()
            ),
        )
        .expect("MPS stand-in");
        Command::new("chmod")
            .args(["755", &mps.display().to_string()])
            .status()
            .expect("chmod");
        let inv: Vec<String> = gpus
            .iter()
            .enumerate()
            .map(|(i, m)| format!(r#"{{"index":{i},"model":"NVIDIA L4","memory_mib":{m},"uuid":"GPU-{name}-{i}"}}"#))
            .collect();
        std::fs::write(d.join("gpus.json"), format!("[{}]", inv.join(","))).expect("inventory");
        d
    }

    /// `gpushare agent --server ... --join TOKEN --host-id NAME` for server `name`
    /// (state in `state`); its exit status if it exits within `wait`.
    fn agent(&mut self, name: &str, token: &str, gpus: &[u64], state: &str) -> Option<i32> {
        let d = self.server_dir(name, gpus);
        let log = std::fs::File::create(d.join(format!("agent-{state}.log"))).expect("log");
        let mut child = Command::new(gpushare_tests::gpushare_bin())
            .args(["agent", "--server", &self.url, "--ca-hash", &self.ca_hash])
            .args(["--join", token, "--host-id", name, "--runtime", "process"])
            .args(["--interval", "1", "--stop-grace", "1"])
            .arg("--state-dir")
            .arg(d.join(state))
            .arg("--mps-control")
            .arg(d.join("nvidia-cuda-mps-control"))
            .arg("--mps-pipe-dir")
            .arg(d.join("pipe"))
            .arg("--inventory-file")
            .arg(d.join("gpus.json"))
            .env("GPUSHARE_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawning gpushare agent");
        std::thread::sleep(Duration::from_secs(2));
        if let Ok(Some(s)) = child.try_wait() {
            return s.code();
        }
        self.agents.insert(format!("{name}/{state}"), child);
        None
    }

    fn logs(&self) -> String {
        let mut out = std::fs::read_to_string(self.dir.join("serve.log")).unwrap_or_default();
        for k in self.agents.keys() {
            let (name, state) = k.split_once('/').unwrap_or((k, ""));
            let p = self
                .dir
                .join("servers")
                .join(name)
                .join(format!("agent-{state}.log"));
            out.push_str(&format!(
                "--- {k}\n{}",
                std::fs::read_to_string(p).unwrap_or_default()
            ));
        }
        out
    }

    /// Wait until `f(show --json)` holds.
    fn wait(
        &self,
        what: &str,
        secs: u64,
        f: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let show = show_json(&self.dir);
            if f(&show) {
                return show;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {secs} s\n{show:#}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Tasks per host as the agents report them running (the reports, not the plan).
    fn running(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for r in gpushare_tests::file_store_reports(&self.dir.join(".gpushare")) {
            for (t, s) in &r.tasks {
                if *s == TaskState::Running {
                    out.entry(r.host_id.clone()).or_default().push(t.clone());
                }
            }
        }
        out
    }

    /// Wait until the agents report `want` (host -> number of running tasks), every
    /// task running exactly once on the machine (the process list).
    fn wait_running(&self, want: &[(&str, usize)], secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let running = self.running();
            let counts: BTreeMap<&str, usize> = running
                .iter()
                .map(|(h, t)| (h.as_str(), t.len()))
                .filter(|(_, n)| *n > 0)
                .collect();
            let wanted: BTreeMap<&str, usize> =
                want.iter().copied().filter(|(_, n)| *n > 0).collect();
            let once = running
                .values()
                .flatten()
                .all(|t| gpushare_tests::task_copies(t) == 1);
            if counts == wanted && once {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "running {running:?}, want {want:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn gp_ok(&self, args: &[&str]) -> String {
        let r = gp(&self.dir, args).run();
        assert_eq!(r.code, 0, "{args:?}: {}\n{}", r.stderr, r.stdout);
        r.stdout.clone()
    }
}

fn host<'a>(show: &'a serde_json::Value, id: &str) -> Option<&'a serde_json::Value> {
    arr(show, "hosts").iter().find(|h| h["id"] == id)
}

/// The local cloud's record of every instance it ever launched (terminated ones too).
fn cloud_launches(dir: &Path) -> Vec<serde_json::Value> {
    let p = dir.join(".gpushare").join("local-fleet.json");
    let Ok(text) = std::fs::read_to_string(p) else {
        return vec![];
    };
    let v: serde_json::Value = serde_json::from_str(&text).expect("local-fleet.json");
    v["instances"].as_array().cloned().unwrap_or_default()
}

#[test]
fn own_servers_join_with_one_pool_token_and_are_operated_without_launches() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    std::fs::write(dir.join("main.hcl"), config(2)).expect("config");
    // No host yet: the tasks wait, with a hint to add one; nothing is launched.
    let out = gp(dir, &["apply", "--auto-approve"]).run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("registered pool"), "{}", out.stdout);
    let mut lab = Lab::start(dir);
    let r = gp(
        dir,
        &["token", "create", "--pool", "lab", "--uses", "3", "--json"],
    )
    .run();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let token = r.json()["token"].as_str().expect("token").to_string();

    // Two servers join with the one token: a 64 GiB GPU and a 16 GiB GPU.
    assert_eq!(
        lab.agent("gpu-a", &token, &[65536], "state"),
        None,
        "{}",
        lab.logs()
    );
    assert_eq!(
        lab.agent("gpu-b", &token, &[16384], "state"),
        None,
        "{}",
        lab.logs()
    );
    let show = lab.wait("both registered with their GPUs", 30, |s| {
        ["gpu-a", "gpu-b"].iter().all(|h| {
            host(s, h).is_some_and(|h| h["source"] == "registered" && h["last_heartbeat"].is_u64())
        })
    });
    assert_eq!(
        host(&show, "gpu-b").expect("b")["gpus"][0]["memory_mib"],
        16384
    );
    // A second machine claiming gpu-a's id (another key) is refused.
    assert_eq!(lab.agent("gpu-a", &token, &[65536], "impostor"), Some(1));
    let impostor =
        std::fs::read_to_string(dir.join("servers/gpu-a/agent-impostor.log")).unwrap_or_default();
    assert!(
        impostor.contains("already registered by another machine"),
        "{impostor}"
    );

    // Placed by the GPUs they reported: the 20 GiB tasks only fit gpu-a; the small
    // ones spread, one on each.
    let plan = lab.gp_ok(&["apply", "--auto-approve"]);
    assert!(
        plan.contains("$5.00/h") || plan.contains("5.00"),
        "two hosts at 2.5: {plan}"
    );
    lab.wait_running(&[("gpu-a", 3), ("gpu-b", 1)], 60);
    let show = show_json(dir);
    let on = |s: &serde_json::Value, svc: &str, h: &str| {
        arr(s, "tasks")
            .iter()
            .filter(|t| t["service"] == svc && t["host"] == h)
            .count()
    };
    assert_eq!(on(&show, "ownbig", "gpu-a"), 2, "{show:#}");

    // Cordon: nothing moves.
    lab.gp_ok(&["host", "cordon", "gpu-b"]);
    let out = lab.gp_ok(&["apply", "--auto-approve"]);
    assert!(!out.contains("move"), "{out}");
    assert_eq!(
        host(&show_json(dir), "gpu-b").expect("b")["hold"],
        "cordoned"
    );
    lab.wait_running(&[("gpu-a", 3), ("gpu-b", 1)], 30);

    // Drain: its task moves to gpu-a, started before the old one stops; gpu-b stays.
    lab.gp_ok(&["host", "drain", "gpu-b"]);
    lab.gp_ok(&["apply", "--auto-approve"]);
    lab.wait_running(&[("gpu-a", 4)], 60);
    assert!(
        host(&show_json(dir), "gpu-b").is_some(),
        "a drained host stays"
    );
    lab.gp_ok(&["host", "uncordon", "gpu-b"]);
    std::fs::write(dir.join("main.hcl"), config(3)).expect("config");
    lab.gp_ok(&["apply", "--auto-approve"]);
    lab.wait_running(&[("gpu-a", 4), ("gpu-b", 1)], 60);

    // Impaired (its MPS daemon stops answering): its task moves; the host is kept,
    // cordoned, and used again once healthy.
    let b = dir.join("servers/gpu-b");
    std::fs::write(b.join("broken"), "").expect("break MPS");
    lab.wait("gpu-b impaired", 30, |s| {
        host(s, "gpu-b").is_some_and(|h| h["mps_health"] == "impaired")
    });
    let out = lab.gp_ok(&["apply", "--auto-approve"]);
    assert!(
        out.contains("until its agent reports healthy") || out.contains("MPS daemon impaired"),
        "{out}"
    );
    lab.wait_running(&[("gpu-a", 5)], 60);
    assert!(
        host(&show_json(dir), "gpu-b").is_some(),
        "an impaired registered host is kept"
    );
    std::fs::remove_file(b.join("broken")).expect("mend MPS");
    lab.wait("gpu-b healthy", 30, |s| {
        host(s, "gpu-b").is_some_and(|h| h["mps_health"] == "healthy")
    });
    std::fs::write(dir.join("main.hcl"), config(4)).expect("config");
    lab.gp_ok(&["apply", "--auto-approve"]);
    lab.wait_running(&[("gpu-a", 5), ("gpu-b", 1)], 60);

    // Remove: drained first (its task runs on gpu-a before it stops here), then gone.
    lab.gp_ok(&["host", "remove", "gpu-b"]);
    lab.gp_ok(&["apply", "--auto-approve"]);
    lab.wait_running(&[("gpu-a", 6)], 60);
    assert!(host(&show_json(dir), "gpu-b").is_none(), "deregistered");

    // Nothing was ever launched or terminated for the registered pool.
    assert!(cloud_launches(dir).is_empty(), "{:?}", cloud_launches(dir));

    // A mixed fleet: a launched pool beside the registered one plans and applies; only
    // the launched pool's host is launched.
    let mixed = format!(
        "{}\ncapacity_provider \"l4\" {{\n  instance_type = \"g6.xlarge\"\n  min_size      = 1\n  max_size      = 2\n}}\n",
        config(4)
    );
    std::fs::write(dir.join("main.hcl"), mixed).expect("config");
    let out = lab.gp_ok(&["apply", "--auto-approve"]);
    assert!(out.contains("launch"), "{out}");
    let launches = cloud_launches(dir);
    assert_eq!(launches.len(), 1, "{launches:?}");
    assert!(
        launches.iter().all(|i| i.to_string().contains("\"l4\"")),
        "{launches:?}"
    );
    lab.wait_running(&[("gpu-a", 6)], 30);
}

/// Every file under `root`: path (relative, with a leading `/`) -> (mode, bytes).
fn tree(root: &Path) -> BTreeMap<String, (u32, Vec<u8>)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let meta = std::fs::metadata(&p).expect("metadata");
                let rel = format!("/{}", p.strip_prefix(root).expect("under root").display());
                let bytes = std::fs::read(&p).expect("read");
                out.insert(rel, (meta.permissions().mode() & 0o7777, bytes));
            }
        }
    }
    out
}

/// The dry run's files (path -> (mode, text)) and commands.
fn dry_run_listing(text: &str) -> (BTreeMap<String, (u32, String)>, Vec<String>) {
    let (files_part, commands) = text.split_once("\n# commands\n").expect("commands section");
    let mut files = BTreeMap::new();
    for section in files_part.split("\n# file ").skip(1) {
        let (header, body) = section.split_once('\n').expect("file header");
        let (path, mode) = header
            .trim_end_matches(')')
            .split_once(" (mode ")
            .expect("path and mode");
        let mode = u32::from_str_radix(mode, 8).expect("octal mode");
        files.insert(path.to_string(), (mode, body.to_string()));
    }
    (files, commands.lines().map(str::to_string).collect())
}

/// `gpushare host setup` for real, under a temporary root (`--root`): the files it
/// writes are the ones its dry run lists, the agent is installed, the units are
/// enabled and started, and a second run changes nothing. The test machine has no
/// systemd and no GPU, so `systemctl` and `nvidia-smi` are fakes, first on PATH,
/// that only record their arguments; everything else is real.
#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, step by step"
)]
fn host_setup_writes_what_its_dry_run_lists_and_starts_the_units() {
    use std::os::unix::fs::PermissionsExt;
    const TOKEN: &str = "0a1b2c3d.00112233445566778899aabbccddeeff";
    let d = tempfile::tempdir().expect("tempdir");
    let root = d.path().join("root");
    let bin = d.path().join("bin");
    let calls = d.path().join("calls.log");
    std::fs::create_dir(&bin).expect("bin");
    for fake in ["systemctl", "nvidia-smi"] {
        let p = bin.join(fake);
        std::fs::write(
            &p,
            format!("#!/bin/sh\necho \"{fake} $*\" >> {}\n", calls.display()),
        )
        .expect("fake");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let root_s = root.display().to_string();
    const CA_HASH: &str = "sha256:4f1b2b0b822cd15d6c15b0f00a089f86d081884c7d659a2feaa0c55ad015a3bf";
    let setup_in = |root: &str, ca_hash: &str, extra: &[&str]| {
        let mut args = vec![
            "host",
            "setup",
            "--server",
            "https://controller.example:7443",
            "--join",
            TOKEN,
            "--ca-hash",
            ca_hash,
            "--root",
            root,
        ];
        args.extend_from_slice(extra);
        gp(d.path(), &args).env("PATH", &path).run()
    };
    let setup = |extra: &[&str]| setup_in(&root_s, CA_HASH, extra);
    let calls_made = || std::fs::read_to_string(&calls).unwrap_or_default();

    let dry = setup(&["--dry-run"]);
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert!(!root.exists(), "a dry run writes nothing");
    assert!(calls_made().is_empty(), "a dry run runs nothing");
    assert!(!dry.stdout.contains(TOKEN), "{}", dry.stdout);
    let (listed, commands) = dry_run_listing(&dry.stdout);

    let run = setup(&[]);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, run.stdout);
    let written = tree(&root);
    // The files are the listed ones, plus the agent the `install` command put in place.
    let install = commands
        .iter()
        .find(|c| c.starts_with("install "))
        .expect("the agent is installed");
    let agent = install.rsplit(' ').next().expect("destination");
    let agent_rel = agent
        .strip_prefix(&root_s)
        .expect("installed under the root");
    let mut want: Vec<String> = listed
        .keys()
        .map(|p| {
            p.strip_prefix(&root_s)
                .expect("listed under the root")
                .to_string()
        })
        .collect();
    want.push(agent_rel.to_string());
    want.sort();
    assert_eq!(written.keys().cloned().collect::<Vec<_>>(), want);
    for (p, (mode, text)) in &listed {
        let (got_mode, got) = &written[p.strip_prefix(&root_s).expect("under root")];
        assert_eq!(got_mode, mode, "{p}");
        let got = String::from_utf8_lossy(got);
        if p.ends_with("join.env") {
            // Listed as (sensitive); written with the token, root-only.
            assert_eq!(*mode, 0o600);
            assert_eq!(got, format!("GPUSHARE_JOIN_TOKEN={TOKEN}\n"));
        } else {
            assert_eq!(&got, text, "{p} differs from its dry-run listing");
        }
    }
    let mps = String::from_utf8_lossy(&written["/etc/systemd/system/gpushare-mps.service"].1)
        .into_owned();
    assert!(
        mps.contains("CUDA_MPS_PIPE_DIRECTORY=/run/gpushare-mps/pipe") && !mps.contains("/tmp"),
        "{mps}"
    );
    let (agent_mode, agent_bytes) = &written[agent_rel];
    assert_eq!(*agent_mode, 0o755);
    assert!(
        *agent_bytes == std::fs::read(gpushare_tests::gpushare_bin()).expect("binary"),
        "the installed agent is this gpushare"
    );
    // The commands the fakes recorded: every listed one but the (real) install.
    let faked: Vec<String> = commands
        .iter()
        .filter(|c| !c.starts_with("install "))
        .cloned()
        .collect();
    let first = calls_made();
    assert_eq!(first.lines().collect::<Vec<_>>(), faked);
    for c in [
        "systemctl daemon-reload",
        "systemctl enable --now gpushare-mps.service",
        "systemctl enable --now gpushare-agent.service",
        "nvidia-smi -c EXCLUSIVE_PROCESS",
    ] {
        assert!(first.lines().any(|l| l == c), "{c} not run: {first}");
    }

    // Again: the same files, the same commands (enable --now of enabled units is a no-op).
    let again = setup(&[]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(tree(&root), written, "a second setup changes no file");
    assert_eq!(calls_made(), format!("{first}{first}"));

    // Bad input names the flag and changes nothing.
    let fresh = d.path().join("fresh");
    let fresh_s = fresh.display().to_string();
    let bad_hash = setup_in(&fresh_s, "md5:0123", &[]);
    assert_ne!(bad_hash.code, 0);
    assert!(bad_hash.stderr.contains("--ca-hash"), "{}", bad_hash.stderr);
    let no_join = Command::new(gpushare_tests::gpushare_bin())
        .args([
            "host",
            "setup",
            "--server",
            "https://controller.example:7443",
        ])
        .args(["--ca-hash", "sha256:4f1b", "--root", &fresh_s])
        .env("PATH", &path)
        .env_remove("GPUSHARE_JOIN_TOKEN")
        .output()
        .expect("running gpushare");
    assert_ne!(no_join.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&no_join.stderr);
    assert!(stderr.contains("--join"), "{stderr}");
    assert!(!fresh.exists(), "a refused setup writes nothing");
    assert_eq!(calls_made(), format!("{first}{first}"), "and runs nothing");
}

//! `gpushare-bench scale`, the command cases (issue 52): the release `gpushare` binary
//! run as a user runs it, one process per command, on the generated fleets written as
//! HCL ([`gpushare_bench::scale::fleet_hcl`]), on the file store and on etcd. Each
//! command's wall time and peak memory (`ru_maxrss` of the process, from `wait4`) are
//! measured; the console is timed from its start to its first fleet page, and then one
//! more fleet page. Printed, never asserted.

use anyhow::{bail, Context, Result};
use gpushare_bench::scale::fleet_hcl;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The commands timed on each fleet, in the order they run.
pub const COMMANDS: [&str; 8] = [
    "plan from empty",
    "apply from empty",
    "re-plan, unchanged",
    "show",
    "show --json",
    "console: start to fleet page",
    "console: fleet page",
    "apply, one service changed",
];

/// One command's measure.
#[derive(Debug, Clone, Copy)]
pub struct Measure {
    pub secs: f64,
    pub peak_mib: f64,
    /// Bytes it printed on stdout (the page's bytes for the console).
    pub out_bytes: u64,
}

/// Where the `gpushare` binary is: `--gpushare`, else beside this one.
pub fn gpushare_binary(given: Option<&Path>) -> Result<PathBuf> {
    let bin = match given {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .context("finding this binary")?
            .with_file_name("gpushare"),
    };
    if !bin.is_file() {
        bail!(
            "{} is not a file: build it (cargo build --release -p gpushare) or pass --gpushare",
            bin.display()
        );
    }
    Ok(bin)
}

/// Run every command on a fleet of `tasks` tasks in a new directory (`store`: the
/// store URL, `None` for the file store under the directory). With `plan_only`,
/// only the plan from empty.
pub fn fleet_commands(
    bin: &Path,
    tasks: u32,
    store: Option<&str>,
    plan_only: bool,
) -> Result<BTreeMap<&'static str, Measure>> {
    let dir = tempfile::tempdir()?;
    let hcl = dir.path().join("main.hcl");
    std::fs::write(&hcl, fleet_hcl(tasks, store, 1))?;
    let d = dir.path();
    let mut out = BTreeMap::new();
    out.insert(COMMANDS[0], run(bin, d, &["plan", "-input=false"])?);
    if plan_only {
        return Ok(out);
    }
    out.insert(COMMANDS[1], run(bin, d, &["apply", "--auto-approve"])?);
    out.insert(COMMANDS[2], run(bin, d, &["plan", "-input=false"])?);
    out.insert(COMMANDS[3], run(bin, d, &["show"])?);
    out.insert(COMMANDS[4], run(bin, d, &["show", "--json"])?);
    let (start, page) = console(bin, d)?;
    out.insert(COMMANDS[5], start);
    out.insert(COMMANDS[6], page);
    std::fs::write(&hcl, fleet_hcl(tasks, store, 2))?;
    out.insert(COMMANDS[7], run(bin, d, &["apply", "--auto-approve"])?);
    Ok(out)
}

/// One `gpushare` command in `dir`, its stdout counted and dropped.
fn run(bin: &Path, dir: &Path, args: &[&str]) -> Result<Measure> {
    let stdout = dir.join("stdout");
    let stderr = dir.join("stderr");
    let started = Instant::now();
    let child = Command::new(bin)
        .args(args)
        .arg(dir)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout)?)
        .stderr(std::fs::File::create(&stderr)?)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let (status, peak_mib) = wait_peak(child.id())?;
    let secs = started.elapsed().as_secs_f64();
    // plan exits 0 (no changes) or 0 with changes; 2 only with --detailed-exitcode.
    if status != 0 {
        let err = std::fs::read_to_string(&stderr).unwrap_or_default();
        let tail: String = err.lines().rev().take(20).collect::<Vec<_>>().join("\n");
        bail!("gpushare {} exited {status}: {tail}", args.join(" "));
    }
    Ok(Measure {
        secs,
        peak_mib,
        out_bytes: std::fs::metadata(&stdout)?.len(),
    })
}

/// Wait for child `pid`: its exit code and its resident high-water mark in MiB.
fn wait_peak(pid: u32) -> Result<(i32, f64)> {
    let pid = libc::pid_t::try_from(pid).context("a child pid out of range")?;
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain data that wait4 fills; status is an out parameter.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if r != pid {
        bail!(
            "waiting for child {pid}: {}",
            std::io::Error::last_os_error()
        );
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    // ru_maxrss is in KiB on Linux.
    Ok((code, usage.ru_maxrss as f64 / 1024.0))
}

/// Start `gpushare console` on a free loopback port: the time until its fleet page
/// first answers 200, then the time of one more fleet page; the peak is the console
/// process's at the end.
fn console(bin: &Path, dir: &Path) -> Result<(Measure, Measure)> {
    let port = gpushare_testkit::etcd::free_port();
    let addr = format!("127.0.0.1:{port}");
    let started = Instant::now();
    let child = Command::new(bin)
        .args(["console", "--listen", &addr])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("console.log"))?)
        .spawn()
        .with_context(|| format!("starting {} console", bin.display()))?;
    let pid = child.id();
    let guard = Kill(pid);
    let first = loop {
        if let Ok((200, body)) = get(&addr, "/") {
            break body;
        }
        if started.elapsed() > Duration::from_secs(120) {
            bail!("the console on {addr} served no fleet page in 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let start_s = started.elapsed().as_secs_f64();
    let t = Instant::now();
    let (code, body) = get(&addr, "/")?;
    let page_s = t.elapsed().as_secs_f64();
    if code != 200 {
        bail!("the console's second fleet page answered {code}");
    }
    let peak_mib = gpushare_bench::scale::vm_hwm_mib(&format!("/proc/{pid}/status"));
    drop(guard);
    Ok((
        Measure {
            secs: start_s,
            peak_mib,
            out_bytes: first.len() as u64,
        },
        Measure {
            secs: page_s,
            peak_mib,
            out_bytes: body.len() as u64,
        },
    ))
}

/// Kills and reaps the console when dropped.
struct Kill(u32);

impl Drop for Kill {
    fn drop(&mut self) {
        if let Ok(pid) = libc::pid_t::try_from(self.0) {
            // SAFETY: the pid is our own child, not yet reaped.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            let _ = wait_peak(self.0);
        }
    }
}

/// A plain HTTP/1.1 GET on loopback: the status code and the body.
fn get(addr: &str, path: &str) -> Result<(u16, Vec<u8>)> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let head_end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("an HTTP answer without a header end")?;
    let head = String::from_utf8_lossy(&buf[..head_end]);
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("an HTTP answer without a status code")?;
    Ok((code, buf[head_end + 4..].to_vec()))
}

/// The rounds' measures of each (store, tasks), in round order.
pub type Rounds<'a> = BTreeMap<(String, u32), Vec<BTreeMap<&'a str, Measure>>>;

/// The median of the rounds' measures of one command (by time; its peak with it).
fn median(runs: &[BTreeMap<&str, Measure>], cmd: &str) -> Option<Measure> {
    let mut v: Vec<Measure> = runs.iter().filter_map(|m| m.get(cmd).copied()).collect();
    v.sort_by(|a, b| a.secs.total_cmp(&b.secs));
    v.get(v.len() / 2).copied()
}

/// The table: a row per command, per store a column per task count (median time and
/// peak), and the growth 40k/10k where both ran.
pub fn print_table(rounds: &Rounds) {
    let stores: Vec<&String> = {
        let mut s: Vec<&String> = rounds.keys().map(|(s, _)| s).collect();
        s.dedup();
        s
    };
    let mut head = String::from("| command |");
    let mut rule = String::from("|---|");
    let columns: Vec<(String, u32)> = rounds.keys().cloned().collect();
    for (store, n) in &columns {
        head.push_str(&format!(" {store}, {n} tasks |"));
        rule.push_str("---|");
    }
    for store in &stores {
        head.push_str(&format!(" {store}, growth 40k/10k |"));
        rule.push_str("---|");
    }
    println!(
        "\ncommands (`gpushare` processes; median time, peak resident memory)\n{head}\n{rule}"
    );
    for cmd in COMMANDS {
        let mut line = format!("| {cmd} |");
        for key in &columns {
            let cell = rounds
                .get(key)
                .and_then(|r| median(r, cmd))
                .map_or("-".into(), |m| {
                    format!("{:.2} s, {:.0} MiB", m.secs, m.peak_mib)
                });
            line.push_str(&format!(" {cell} |"));
        }
        for store in &stores {
            let at = |n: u32| {
                rounds
                    .get(&((*store).clone(), n))
                    .and_then(|r| median(r, cmd))
            };
            let growth = match (at(10_000), at(40_000)) {
                (Some(a), Some(b)) if a.secs > 0.0 => format!("{:.1}x", b.secs / a.secs),
                _ => "-".into(),
            };
            line.push_str(&format!(" {growth} |"));
        }
        println!("{line}");
    }
}

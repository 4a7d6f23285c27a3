//! The process runtime: each container's `command` runs as a process on the host,
//! with the task's environment, detached from the agent (its own process group, a
//! child of init once started), so it outlives an agent restart.
//!
//! Under `<state dir>/<cluster>/<host>/`:
//! - `agent.lock`: held (flock) by the one runtime instance using the directory;
//! - `runtime-id`: a random id, set on every process it starts as
//!   `GPUSHARE_PROCESS_RUNTIME` (with `GPUSHARE_TASK_ID`): what finds a task again
//!   when its record cannot be read;
//! - `records/<task>/task.json`: the record (the task id, its containers, each one's
//!   process: pid, group and start time), under its SHA-256 digest;
//! - `records/<task>/<container>/status`: the exit code, written by the wrapper shell
//!   when the command ends; `stdout.log`, `stderr.log`;
//! - `work/<task>/<container>/`: the task's working directory, its own. The task is
//!   not given the records (they are not where it works, nor in its environment).
//!
//! A restarted agent reads the records, finds the processes still alive (pid and
//! start time match) and adopts them; it never starts a task whose record is alive.
//! A process is signalled only once verified to be the task's: its pid and start
//! time are the record's (or it is in the group of the recorded process while that
//! one lives), or its environment carries this runtime's and the task's markers; the
//! signal goes through a pidfd opened before the check. A record that cannot be read
//! (corrupt, digest wrong, missing) does not mean the task is dead: what carries its
//! markers is listed as a task in an unknown state, so the agent stops that copy
//! before starting another.

mod health;
mod procfs;

use super::{
    safe_name, ContainerState, LaunchSpec, ObservedContainer, ObservedTask, Runtime, RuntimeError,
};
use async_trait::async_trait;
use gpushare_core::model::ContainerHealthCheck;
use gpushare_core::util::lock;
use procfs::{Ident, ProcInfo};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;

/// The wrapper: runs the command in the background, writes its exit code when it
/// ends, and records the background process's pid and the process group. `$1` is
/// the container's record directory; the working directory is the task's own.
const WRAPPER: &str = r#"dir="$1"; shift
( "$@"; echo $? > "$dir/status.tmp"; mv "$dir/status.tmp" "$dir/status" ) </dev/null >>"$dir/stdout.log" 2>>"$dir/stderr.log" &
echo "$! $$" > "$dir/pid.tmp"
"#;

/// How long a copy of a task that no record accounts for gets between SIGTERM and
/// SIGKILL when a start finds it.
const STRAY_GRACE: Duration = Duration::from_secs(10);

/// How long a start reuses the last look through `/proc` (reading every process's
/// environment costs: twenty agents starting ten tasks each, one look per start,
/// took 6 s to all running instead of 1). What this runtime starts is added to it;
/// a process of a task appears otherwise only by the task's own doing, and a stop
/// always looks afresh.
const SCAN_REUSE: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct TaskRecord {
    task_id: String,
    containers: Vec<ContainerRecord>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ContainerRecord {
    name: String,
    essential: bool,
    /// Set once started.
    #[serde(default)]
    process: Option<Pid>,
    /// The runtime runs it (`health.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    health_check: Option<ContainerHealthCheck>,
    /// What the check runs with besides PATH: the task id and its port variables
    /// (never the task's secrets, which stay out of the record).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    check_env: BTreeMap<String, String>,
    /// Seconds between SIGTERM and SIGKILL (unset: the agent's grace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stop_timeout: Option<u32>,
    /// Where the command runs (unset: the task's own directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    working_dir: Option<String>,
}

/// The wrapper's background process (which runs the command and writes its exit
/// code), its group, and its start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Pid {
    pid: u32,
    pgid: u32,
    start_time: u64,
}

impl Pid {
    fn ident(&self) -> Ident {
        Ident {
            pid: self.pid,
            start_time: self.start_time,
        }
    }
}

pub struct ProcessRuntime {
    root: PathBuf,
    runtime_id: String,
    /// Whether a listing has looked through every process for the markers (the
    /// first one does; later ones when a record cannot be read).
    swept: AtomicBool,
    /// The last look through `/proc`, reused by starts for [`SCAN_REUSE`], with the
    /// processes started since added.
    scan_cache: Mutex<Option<(Instant, Vec<ProcInfo>)>>,
    /// "task/container" of each health-check loop running.
    checkers: Arc<Mutex<BTreeSet<String>>>,
    _lock: std::fs::File,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RuntimeError + '_ {
    move |source| RuntimeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn corrupt(path: &Path, reason: impl Into<String>) -> RuntimeError {
    RuntimeError::Corrupt {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn digest(body: &str) -> String {
    hex::encode(Sha256::digest(body.as_bytes()))
}

impl ProcessRuntime {
    /// Open (creating) the records of `cluster`/`host` under `state_dir` and take its lock.
    pub fn open(
        state_dir: &Path,
        cluster: &str,
        host: &str,
    ) -> Result<ProcessRuntime, RuntimeError> {
        let root = state_dir.join(safe_name(cluster)).join(safe_name(host));
        for dir in [root.join("records"), root.join("work")] {
            std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        }
        let lock_path = root.join("agent.lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        lock.try_lock()
            .map_err(|_| RuntimeError::Locked { path: lock_path })?;
        let runtime_id = runtime_id(&root.join("runtime-id"))?;
        Ok(ProcessRuntime {
            root,
            runtime_id,
            swept: AtomicBool::new(false),
            scan_cache: Mutex::new(None),
            checkers: Arc::new(Mutex::new(BTreeSet::new())),
            _lock: lock,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn record_dir(&self, task_id: &str) -> PathBuf {
        self.root.join("records").join(safe_name(task_id))
    }

    fn work_dir(&self, task_id: &str) -> PathBuf {
        self.root.join("work").join(safe_name(task_id))
    }

    /// Where a container's command (and its health check) runs.
    fn container_work_dir(&self, task_id: &str, c: &ContainerRecord) -> PathBuf {
        match &c.working_dir {
            Some(w) => PathBuf::from(w),
            None => self.work_dir(task_id).join(safe_name(&c.name)),
        }
    }

    /// The record in `dir`, checked: its digest, and that it is the record of the
    /// task the directory is named for.
    fn read_task(&self, dir: &Path) -> Result<TaskRecord, RuntimeError> {
        let path = dir.join("task.json");
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        let Some((sum, body)) = text.split_once('\n') else {
            return Err(corrupt(&path, "no digest line"));
        };
        if sum != digest(body) {
            return Err(corrupt(&path, "its digest does not match its content"));
        }
        let rec: TaskRecord =
            serde_json::from_str(body).map_err(|e| corrupt(&path, e.to_string()))?;
        if dir.file_name() != Some(std::ffi::OsStr::new(&safe_name(&rec.task_id))) {
            return Err(corrupt(
                &path,
                format!(
                    "it is the record of task {:?}, not of this directory",
                    rec.task_id
                ),
            ));
        }
        Ok(rec)
    }

    fn write_task(&self, dir: &Path, rec: &TaskRecord) -> Result<(), RuntimeError> {
        let path = dir.join("task.json");
        let body = serde_json::to_string_pretty(rec).map_err(|e| corrupt(&path, e.to_string()))?;
        let tmp = dir.join("task.json.tmp");
        std::fs::write(&tmp, format!("{}\n{body}", digest(&body))).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io(&path))
    }

    fn observe(&self, dir: &Path, rec: &TaskRecord) -> ObservedTask {
        let mut out = ObservedTask::default();
        for c in &rec.containers {
            let cdir = dir.join(safe_name(&c.name));
            let state = match read_status(&cdir) {
                Some(code) => ContainerState::Exited { code: Some(code) },
                None => match c.process {
                    Some(p) if procfs::alive(p.ident()) => ContainerState::Running,
                    // Exited without a status (killed), or never started.
                    _ => match read_status(&cdir) {
                        // The status may have landed between the two reads.
                        Some(code) => ContainerState::Exited { code: Some(code) },
                        None => ContainerState::Exited { code: None },
                    },
                },
            };
            let health = c.health_check.as_ref().map(|check| {
                if let (ContainerState::Running, Some(p)) = (&state, c.process) {
                    health::Checker {
                        key: format!("{}/{}", rec.task_id, c.name),
                        check: check.clone(),
                        wdir: self.container_work_dir(&rec.task_id, c),
                        cdir: cdir.clone(),
                        env: c.check_env.clone(),
                    }
                    .spawn(&self.checkers, move || procfs::alive(p.ident()));
                }
                health::read(&cdir)
            });
            out.containers.insert(
                c.name.clone(),
                ObservedContainer {
                    essential: c.essential,
                    state,
                    health,
                },
            );
        }
        out
    }

    /// The live processes that are verifiably task `task_id`'s: those carrying this
    /// runtime's and the task's markers, and the members of each recorded process
    /// group whose recorded process is alive (pid, group and start time match: the
    /// group number cannot be reused while it has a member).
    fn processes_of(
        &self,
        procs: &[ProcInfo],
        task_id: &str,
        rec: Option<&TaskRecord>,
    ) -> BTreeSet<Ident> {
        let groups: BTreeSet<u32> = rec
            .into_iter()
            .flat_map(|r| r.containers.iter().filter_map(|c| c.process))
            .filter(|p| {
                procs
                    .iter()
                    .any(|q| q.ident == p.ident() && q.pgid == p.pgid)
            })
            .map(|p| p.pgid)
            .collect();
        procs
            .iter()
            .filter(|q| q.task.as_deref() == Some(task_id) || groups.contains(&q.pgid))
            .map(|q| q.ident)
            .collect()
    }

    /// Every live process, as of at most [`SCAN_REUSE`] ago.
    fn recent_scan(&self) -> Vec<ProcInfo> {
        let mut cache = lock(&self.scan_cache);
        match &*cache {
            Some((at, procs)) if at.elapsed() < SCAN_REUSE => procs.clone(),
            _ => {
                let procs = procfs::scan(&self.runtime_id);
                *cache = Some((Instant::now(), procs.clone()));
                procs
            }
        }
    }

    fn remember_scan(&self, procs: &[ProcInfo]) {
        let mut cache = lock(&self.scan_cache);
        *cache = Some((Instant::now(), procs.to_vec()));
    }

    /// Add a process this runtime just started to the last look through `/proc`.
    fn remember_started(&self, task: &str, p: Pid) {
        let mut cache = lock(&self.scan_cache);
        if let Some((_, procs)) = &mut *cache {
            procs.push(ProcInfo {
                ident: p.ident(),
                pgid: p.pgid,
                task: Some(task.to_string()),
            });
        }
    }

    async fn spawn_one(
        &self,
        task: &str,
        dir: &Path,
        c: &super::ContainerSpec,
    ) -> Result<Pid, RuntimeError> {
        if c.command.is_empty() && c.entry_point.is_empty() {
            return Err(RuntimeError::NoCommand {
                task: task.to_string(),
                container: c.name.clone(),
            });
        }
        let ignored = ignored_settings(c);
        if !ignored.is_empty() {
            tracing::warn!(task, container = %c.name, ignored = %ignored.join(", "), "the process runtime does not apply these settings (the docker runtime does)");
        }
        let cdir = dir.join(safe_name(&c.name));
        let wdir = self.work_dir(task).join(safe_name(&c.name));
        for d in [&cdir, &wdir] {
            std::fs::create_dir_all(d).map_err(io(d))?;
        }
        let mut cmd = tokio::process::Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(WRAPPER)
            .arg("gpushare-wrapper")
            .arg(&cdir)
            .args(c.entry_point.iter().chain(&c.command))
            .current_dir(c.working_dir.as_deref().map_or(wdir.as_path(), Path::new))
            .env_clear()
            .env(
                "PATH",
                std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()),
            )
            .envs(&c.env)
            // No container runtime selects the GPU here: CUDA does, by UUID (an
            // empty list hides every GPU).
            .env("CUDA_VISIBLE_DEVICES", c.gpus.join(","))
            // What finds the task again without its record.
            .env(procfs::TASK_MARKER, task)
            .env(procfs::RUNTIME_MARKER, &self.runtime_id)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        let spawn_err = |source| RuntimeError::Spawn {
            task: task.to_string(),
            container: c.name.clone(),
            source,
        };
        let out = cmd.output().await.map_err(spawn_err)?;
        if !out.status.success() {
            return Err(spawn_err(std::io::Error::other(format!(
                "the wrapper shell failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))));
        }
        // "<pid> <pgid>" from the wrapper; add the process's start time, so a reused
        // pid is never taken for our process.
        let tmp = cdir.join("pid.tmp");
        let text = std::fs::read_to_string(&tmp).map_err(io(&tmp))?;
        let _ = std::fs::remove_file(&tmp);
        let mut parts = text
            .split_whitespace()
            .filter_map(|s| s.parse::<u32>().ok());
        let (Some(pid), Some(pgid)) = (parts.next(), parts.next()) else {
            return Err(corrupt(
                &tmp,
                format!("expected \"<pid> <pgid>\", found {text:?}"),
            ));
        };
        // 0 (never a start time) when the process is already gone: nothing then
        // matches it, and its status file tells how it ended.
        let start_time = procfs::start_time(pid).unwrap_or(0);
        tracing::info!(task, container = %c.name, pid, "process started");
        Ok(Pid {
            pid,
            pgid,
            start_time,
        })
    }

    /// SIGTERM every process verifiably the task's, `grace`, then SIGKILL. The
    /// processes found at each look are remembered (pid and start time), so one
    /// whose group leader died first is still followed.
    async fn kill_all(&self, task_id: &str, rec: Option<&TaskRecord>, grace: Duration) {
        let mut known = BTreeSet::new();
        let refresh = |known: &mut BTreeSet<Ident>| {
            known.extend(self.processes_of(&procfs::scan(&self.runtime_id), task_id, rec));
            known.retain(|p| procfs::alive(*p));
            known.is_empty()
        };
        if refresh(&mut known) {
            return;
        }
        for (signal, limit) in [
            (libc::SIGTERM, grace),
            (libc::SIGKILL, Duration::from_secs(5)),
        ] {
            let deadline = tokio::time::Instant::now() + limit;
            // Each process gets each signal once (a second SIGTERM means "now" to
            // some programs); one found later gets it when found.
            let mut sent = BTreeSet::new();
            loop {
                for p in known.difference(&sent) {
                    procfs::signal(*p, signal);
                }
                sent.extend(known.iter().copied());
                tokio::time::sleep(Duration::from_millis(50)).await;
                if refresh(&mut known) {
                    return;
                }
                if tokio::time::Instant::now() >= deadline {
                    break;
                }
            }
        }
        tracing::warn!(
            task = task_id,
            left = known.len(),
            "processes of the task survived SIGKILL"
        );
    }

    fn remove(&self, task_id: &str) -> Result<(), RuntimeError> {
        for dir in [self.record_dir(task_id), self.work_dir(task_id)] {
            match std::fs::remove_dir_all(&dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&dir)(e)),
                _ => {}
            }
        }
        Ok(())
    }
}

/// The settings of `c` a process on the host cannot have: no mount namespace,
/// no user switch, no limits of its own (docs/serving.md).
fn ignored_settings(c: &super::ContainerSpec) -> Vec<&'static str> {
    [
        ("mount_point", !c.mounts.is_empty()),
        ("user", c.user.is_some()),
        ("ulimit", !c.ulimits.is_empty()),
        ("shared_memory_size", c.shm_mib.is_some()),
        ("init_process_enabled", c.init),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect()
}

/// How much of the end of a log file `logs` reads (a reply carries less).
const LOG_READ_BYTES: u64 = 256 * 1024;

/// The last `max` bytes of the file at `path` (a log may be large).
fn read_end(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(max)))?;
    let mut out = Vec::new();
    f.take(max).read_to_end(&mut out)?;
    Ok(out)
}

/// This runtime's id (created on first use): the marker its processes carry.
fn runtime_id(path: &Path) -> Result<String, RuntimeError> {
    if let Ok(id) = std::fs::read_to_string(path) {
        let id = id.trim();
        if !id.is_empty() {
            return Ok(id.to_string());
        }
    }
    let uuid = Path::new("/proc/sys/kernel/random/uuid");
    let id = std::fs::read_to_string(uuid)
        .map_err(io(uuid))?
        .trim()
        .to_string();
    std::fs::write(path, format!("{id}\n")).map_err(io(path))?;
    Ok(id)
}

fn read_status(cdir: &Path) -> Option<i64> {
    std::fs::read_to_string(cdir.join("status"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

#[async_trait]
impl Runtime for ProcessRuntime {
    fn name(&self) -> &'static str {
        "process"
    }

    /// The state directory takes a file (written, synced and removed).
    async fn health(&self) -> Result<(), RuntimeError> {
        let path = self.root.join(".health-probe");
        let probe = path.clone();
        let wrote = tokio::task::spawn_blocking(move || {
            use std::io::Write as _;
            let mut f = std::fs::File::create(&probe)?;
            f.write_all(b"ok")?;
            f.sync_all()?;
            std::fs::remove_file(&probe)
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        wrote.map_err(|source| RuntimeError::Io { path, source })
    }

    async fn list(&self) -> Result<BTreeMap<String, ObservedTask>, RuntimeError> {
        let records = self.root.join("records");
        let mut out = BTreeMap::new();
        let mut unreadable = BTreeSet::new();
        let entries = std::fs::read_dir(&records).map_err(io(&records))?;
        for entry in entries {
            let entry = entry.map_err(io(&records))?;
            let dir = entry.path();
            if !dir.is_dir() {
                continue;
            }
            match self.read_task(&dir) {
                Ok(rec) => {
                    let observed = self.observe(&dir, &rec);
                    out.insert(rec.task_id.clone(), observed);
                }
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "unreadable task record");
                    unreadable.insert(entry.file_name());
                }
            }
        }
        // What runs with this runtime's marker and no readable record: found again
        // by its marker, listed with no known container (the agent sees a start that
        // never finished: it stops this copy before starting the task again). Looked
        // for at the first listing (what a restarted agent left) and whenever a record
        // cannot be read; a start looks every time.
        let sweep = !self.swept.swap(true, Ordering::Relaxed) || !unreadable.is_empty();
        let procs = if sweep {
            let procs = procfs::scan(&self.runtime_id);
            self.remember_scan(&procs);
            procs
        } else {
            Vec::new()
        };
        for p in &procs {
            if let Some(task) = &p.task {
                if !out.contains_key(task) {
                    tracing::warn!(
                        task,
                        pid = p.ident.pid,
                        "a process of the task has no readable record"
                    );
                    out.insert(task.clone(), ObservedTask::default());
                }
            }
        }
        // An unreadable record with nothing of its task running: a start interrupted
        // before its record was written, or a record damaged after its task ended.
        for name in unreadable {
            let name = name.to_string_lossy();
            if !out.keys().any(|t| safe_name(t) == name) {
                let dir = records.join(&*name);
                tracing::warn!(dir = %dir.display(), "removing an unreadable task record: nothing of its task runs");
                let _ = std::fs::remove_dir_all(&dir);
                let _ = std::fs::remove_dir_all(self.root.join("work").join(&*name));
            }
        }
        Ok(out)
    }

    /// By the task's process groups (its records) or, for a process that left its
    /// group, the task marker in its environment.
    async fn tasks_of_pids(&self, pids: &[u32]) -> BTreeMap<u32, String> {
        let records = self.root.join("records");
        let mut groups: BTreeMap<u32, String> = BTreeMap::new();
        for entry in std::fs::read_dir(&records).into_iter().flatten().flatten() {
            if let Ok(rec) = self.read_task(&entry.path()) {
                for p in rec.containers.iter().filter_map(|c| c.process) {
                    groups.insert(p.pgid, rec.task_id.clone());
                }
            }
        }
        pids.iter()
            .filter_map(|pid| {
                let (_, pgid, _) = procfs::stat(*pid)?;
                let task = groups
                    .get(&pgid)
                    .cloned()
                    .or_else(|| procfs::task_marker(*pid, &self.runtime_id))?;
                Some((*pid, task))
            })
            .collect()
    }

    /// The last `tail` lines of the container's `stdout.log`, then of its `stderr.log`
    /// (the files keep no order between the two).
    async fn logs(
        &self,
        task_id: &str,
        container: &str,
        tail: u32,
    ) -> Result<String, RuntimeError> {
        let cdir = self.record_dir(task_id).join(safe_name(container));
        let mut out = String::new();
        for file in ["stdout.log", "stderr.log"] {
            let path = cdir.join(file);
            let text = match read_end(&path, LOG_READ_BYTES) {
                Ok(b) => String::from_utf8_lossy(&b).into_owned(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io(&path)(e)),
            };
            let lines: Vec<&str> = text.lines().collect();
            let from = lines.len().saturating_sub(tail as usize);
            for l in &lines[from..] {
                out.push_str(l);
                out.push('\n');
            }
        }
        Ok(out)
    }

    async fn start(&self, spec: &LaunchSpec) -> Result<(), RuntimeError> {
        let task = spec.task_id.as_str();
        let dir = self.record_dir(task);
        let rec = self.read_task(&dir).ok();
        let procs = self.recent_scan();
        if let Some(rec) = &rec {
            let recorded_alive = rec
                .containers
                .iter()
                .filter_map(|c| c.process)
                .any(|p| procfs::alive(p.ident()));
            if recorded_alive {
                return Err(RuntimeError::AlreadyRunning {
                    task: task.to_string(),
                });
            }
        }
        // A copy that no record accounts for (a damaged record, a process that
        // outlived its recorded one) is stopped, never joined by a second one.
        if !self.processes_of(&procs, task, rec.as_ref()).is_empty() {
            tracing::warn!(
                task,
                "stopping a copy of the task that no record accounts for"
            );
            self.kill_all(task, rec.as_ref(), STRAY_GRACE).await;
        }
        self.remove(task)?;
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let mut rec = TaskRecord {
            task_id: task.to_string(),
            containers: spec
                .containers
                .iter()
                .map(|c| ContainerRecord {
                    name: c.name.clone(),
                    essential: c.essential,
                    process: None,
                    health_check: c.health_check.clone(),
                    check_env: c
                        .env
                        .iter()
                        .filter(|(k, _)| {
                            k.starts_with("GPUSHARE_PORT_") || *k == "GPUSHARE_TASK_ID"
                        })
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                    stop_timeout: c.stop_timeout,
                    working_dir: c.working_dir.clone(),
                })
                .collect(),
        };
        // The record comes first: whatever is started after is in it.
        self.write_task(&dir, &rec)?;
        for (i, c) in spec.containers.iter().enumerate() {
            let started = self.spawn_one(task, &dir, c).await.and_then(|p| {
                self.remember_started(task, p);
                rec.containers[i].process = Some(p);
                self.write_task(&dir, &rec)
            });
            if let Err(e) = started {
                self.kill_all(task, Some(&rec), Duration::from_secs(1))
                    .await;
                let _ = self.remove(task);
                return Err(e);
            }
        }
        Ok(())
    }

    async fn stop(&self, task_id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let dir = self.record_dir(task_id);
        let rec = self.read_task(&dir).ok();
        // The containers' own stop_timeout, where they set one.
        let grace = rec
            .as_ref()
            .and_then(|r| r.containers.iter().filter_map(|c| c.stop_timeout).max())
            .map_or(grace, |s| Duration::from_secs(s.into()));
        self.kill_all(task_id, rec.as_ref(), grace).await;
        if dir.exists() {
            tracing::info!(task = task_id, "task stopped");
        }
        self.remove(task_id)
    }
}

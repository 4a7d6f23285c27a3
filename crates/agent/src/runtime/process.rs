//! The process runtime: each container's `command` runs as a process on the host,
//! with the task's environment, detached from the agent (its own process group, a
//! child of init once started), so it outlives an agent restart.
//!
//! Records live under `<state dir>/<cluster>/<host>/`:
//! - `agent.lock`: held (flock) by the one runtime instance using the directory;
//! - `tasks/<task>/task.json`: the task id and its containers (name, essential);
//! - `tasks/<task>/<container>/pid`: `<pid> <process group> <start time>`;
//! - `tasks/<task>/<container>/status`: the exit code, written by the wrapper shell
//!   when the command ends;
//! - `tasks/<task>/<container>/stdout.log`, `stderr.log`.
//!
//! A restarted agent reads these, finds the processes still alive (pid and start
//! time match) and adopts them; it never starts a task whose record is alive.

use super::{
    safe_name, ContainerState, LaunchSpec, ObservedContainer, ObservedTask, Runtime, RuntimeError,
};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// The wrapper: runs the command in the background, writes its exit code when it
/// ends, and records the background process's pid and the process group.
const WRAPPER: &str = r#"dir="$1"; shift
( "$@"; echo $? > "$dir/status.tmp"; mv "$dir/status.tmp" "$dir/status" ) </dev/null >>"$dir/stdout.log" 2>>"$dir/stderr.log" &
echo "$! $$" > "$dir/pid.tmp"
"#;

#[derive(Debug, Serialize, Deserialize)]
struct TaskRecord {
    task_id: String,
    containers: Vec<ContainerRecord>,
}

#[derive(Debug, Serialize, Deserialize)]
struct ContainerRecord {
    name: String,
    essential: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pid {
    pid: u32,
    pgid: u32,
    start_time: u64,
}

pub struct ProcessRuntime {
    root: PathBuf,
    _lock: std::fs::File,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RuntimeError + '_ {
    move |source| RuntimeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl ProcessRuntime {
    /// Open (creating) the records of `cluster`/`host` under `state_dir` and take its lock.
    pub fn open(
        state_dir: &Path,
        cluster: &str,
        host: &str,
    ) -> Result<ProcessRuntime, RuntimeError> {
        let root = state_dir.join(safe_name(cluster)).join(safe_name(host));
        let tasks = root.join("tasks");
        std::fs::create_dir_all(&tasks).map_err(io(&tasks))?;
        let lock_path = root.join("agent.lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        lock.try_lock()
            .map_err(|_| RuntimeError::Locked { path: lock_path })?;
        Ok(ProcessRuntime { root, _lock: lock })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn task_dir(&self, task_id: &str) -> PathBuf {
        self.root.join("tasks").join(safe_name(task_id))
    }

    fn read_task(&self, dir: &Path) -> Result<TaskRecord, RuntimeError> {
        let path = dir.join("task.json");
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        serde_json::from_str(&text).map_err(|e| RuntimeError::Corrupt {
            path,
            reason: e.to_string(),
        })
    }

    fn observe(&self, dir: &Path, rec: &TaskRecord) -> ObservedTask {
        let mut out = ObservedTask::default();
        for c in &rec.containers {
            let cdir = dir.join(safe_name(&c.name));
            let state = match read_status(&cdir) {
                Some(code) => ContainerState::Exited { code: Some(code) },
                None => match read_pid(&cdir) {
                    Some(p) if alive(p) => ContainerState::Running,
                    // Exited without a status (killed), or never started.
                    _ => match read_status(&cdir) {
                        // The status may have landed between the two reads.
                        Some(code) => ContainerState::Exited { code: Some(code) },
                        None => ContainerState::Exited { code: None },
                    },
                },
            };
            out.containers.insert(
                c.name.clone(),
                ObservedContainer {
                    essential: c.essential,
                    state,
                },
            );
        }
        out
    }

    fn live_pids(&self, dir: &Path) -> Vec<Pid> {
        let Ok(rec) = self.read_task(dir) else {
            return Vec::new();
        };
        rec.containers
            .iter()
            .filter_map(|c| read_pid(&dir.join(safe_name(&c.name))))
            .filter(|p| alive(*p) || group_alive(p.pgid))
            .collect()
    }

    async fn spawn_one(
        &self,
        task: &str,
        dir: &Path,
        c: &super::ContainerSpec,
    ) -> Result<(), RuntimeError> {
        if c.command.is_empty() {
            return Err(RuntimeError::NoCommand {
                task: task.to_string(),
                container: c.name.clone(),
            });
        }
        let cdir = dir.join(safe_name(&c.name));
        std::fs::create_dir_all(&cdir).map_err(io(&cdir))?;
        let mut cmd = tokio::process::Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(WRAPPER)
            .arg("gpushare-wrapper")
            .arg(&cdir)
            .args(&c.command)
            .current_dir(&cdir)
            .env_clear()
            .env(
                "PATH",
                std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()),
            )
            .envs(&c.env)
            // No container runtime selects the GPU here: CUDA does, by UUID (an
            // empty list hides every GPU).
            .env("CUDA_VISIBLE_DEVICES", c.gpus.join(","))
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
        let mut parts = text
            .split_whitespace()
            .filter_map(|s| s.parse::<u32>().ok());
        let (Some(pid), Some(pgid)) = (parts.next(), parts.next()) else {
            return Err(RuntimeError::Corrupt {
                path: tmp,
                reason: format!("expected \"<pid> <pgid>\", found {text:?}"),
            });
        };
        let start_time = proc_start_time(pid).unwrap_or(0);
        let path = cdir.join("pid");
        std::fs::write(&path, format!("{pid} {pgid} {start_time}\n")).map_err(io(&path))?;
        let _ = std::fs::remove_file(&tmp);
        tracing::info!(task, container = %c.name, pid, "process started");
        Ok(())
    }

    async fn kill_all(&self, dir: &Path, grace: Duration) {
        let pids = self.live_pids(dir);
        if pids.is_empty() {
            return;
        }
        for p in &pids {
            crate::mps::kill_group(p.pgid, libc::SIGTERM);
        }
        if !wait_dead(&pids, grace).await {
            for p in &pids {
                crate::mps::kill_group(p.pgid, libc::SIGKILL);
            }
            wait_dead(&pids, Duration::from_secs(5)).await;
        }
    }
}

/// Poll until every process of the groups is gone (zombies aside) or `limit`
/// passes; true when all are gone. The group, not the pid: the command runs under
/// the wrapper, and may have started children of its own.
async fn wait_dead(pids: &[Pid], limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if pids.iter().all(|p| !alive(*p) && !group_alive(p.pgid)) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn read_status(cdir: &Path) -> Option<i64> {
    std::fs::read_to_string(cdir.join("status"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

fn read_pid(cdir: &Path) -> Option<Pid> {
    let text = std::fs::read_to_string(cdir.join("pid")).ok()?;
    let mut it = text.split_whitespace();
    let pid = it.next()?.parse().ok()?;
    let pgid = it.next()?.parse().ok()?;
    let start_time = it.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    Some(Pid {
        pid,
        pgid,
        start_time,
    })
}

/// `/proc/<pid>/stat`: (state, start time in clock ticks).
fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    // Field 22 overall is the start time; after the name, field 3 is index 0.
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

/// Whether any live (not zombie) process is in process group `pgid`.
pub(crate) fn group_alive(pgid: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
            return false;
        };
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        let Some(close) = text.rfind(')') else {
            return false;
        };
        let fields: Vec<&str> = text[close + 1..].split_whitespace().collect();
        let state = fields.first().and_then(|s| s.chars().next());
        let pgrp = fields.get(2).and_then(|s| s.parse::<u32>().ok());
        pgrp == Some(pgid) && !matches!(state, Some('Z') | Some('X'))
    })
}

fn proc_start_time(pid: u32) -> Option<u64> {
    proc_stat(pid).map(|(_, t)| t)
}

fn alive(p: Pid) -> bool {
    match proc_stat(p.pid) {
        Some((state, start)) => {
            !matches!(state, 'Z' | 'X') && (p.start_time == 0 || start == p.start_time)
        }
        None => false,
    }
}

#[async_trait]
impl Runtime for ProcessRuntime {
    fn name(&self) -> &'static str {
        "process"
    }

    async fn list(&self) -> Result<BTreeMap<String, ObservedTask>, RuntimeError> {
        let tasks = self.root.join("tasks");
        let mut out = BTreeMap::new();
        let entries = std::fs::read_dir(&tasks).map_err(io(&tasks))?;
        for entry in entries {
            let entry = entry.map_err(io(&tasks))?;
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
                    // A start interrupted before its record was written: nothing of
                    // it can be running (the record comes first).
                    tracing::warn!(dir = %dir.display(), error = %e, "removing an unreadable task record");
                    let _ = std::fs::remove_dir_all(&dir);
                }
            }
        }
        Ok(out)
    }

    async fn start(&self, spec: &LaunchSpec) -> Result<(), RuntimeError> {
        let dir = self.task_dir(&spec.task_id);
        if dir.exists() {
            if !self.live_pids(&dir).is_empty() {
                return Err(RuntimeError::AlreadyRunning {
                    task: spec.task_id.clone(),
                });
            }
            std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
        }
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let rec = TaskRecord {
            task_id: spec.task_id.clone(),
            containers: spec
                .containers
                .iter()
                .map(|c| ContainerRecord {
                    name: c.name.clone(),
                    essential: c.essential,
                })
                .collect(),
        };
        let path = dir.join("task.json");
        let text = serde_json::to_string_pretty(&rec).map_err(|e| RuntimeError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        std::fs::write(&path, text).map_err(io(&path))?;
        for c in &spec.containers {
            if let Err(e) = self.spawn_one(&spec.task_id, &dir, c).await {
                self.kill_all(&dir, Duration::from_secs(1)).await;
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        }
        Ok(())
    }

    async fn stop(&self, task_id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let dir = self.task_dir(task_id);
        if !dir.exists() {
            return Ok(());
        }
        self.kill_all(&dir, grace).await;
        std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
        tracing::info!(task = task_id, "task stopped");
        Ok(())
    }
}

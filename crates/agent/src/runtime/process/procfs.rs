//! What the process runtime reads of `/proc`, and how it signals: a process is named
//! by its pid *and* its start time (a pid alone may belong to anyone after reuse), and
//! is signalled through a pidfd opened before its start time is checked, so the
//! signal reaches the process that was checked or none.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The environment variable naming the runtime instance that started a process
/// (its `runtime-id`), set on every process the runtime starts.
pub(super) const RUNTIME_MARKER: &str = "GPUSHARE_PROCESS_RUNTIME";
/// The environment variable naming the task (the agent sets it on every container).
pub(super) const TASK_MARKER: &str = "GPUSHARE_TASK_ID";

/// A process, as it can be told apart from one that later takes its pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Ident {
    pub pid: u32,
    /// Clock ticks since boot (field 22 of `/proc/<pid>/stat`).
    pub start_time: u64,
}

/// A live (not zombie) process.
#[derive(Debug, Clone)]
pub(super) struct ProcInfo {
    pub ident: Ident,
    pub pgid: u32,
    /// `GPUSHARE_TASK_ID` from its environment, when that environment also carries
    /// this runtime's marker (and is readable: same user, or the agent is root).
    pub task: Option<String>,
}

/// `/proc/<pid>/stat`: (state, process group, start time).
pub(super) fn stat(pid: u32) -> Option<(char, u32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    // After the name, field 3 (state) is index 0: the group is field 5, the start
    // time field 22.
    let pgid = fields.get(2)?.parse().ok()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((state, pgid, start))
}

/// The start time of `pid`, when it is a live process.
pub(super) fn start_time(pid: u32) -> Option<u64> {
    stat(pid)
        .filter(|(state, _, _)| !matches!(state, 'Z' | 'X'))
        .map(|(_, _, start)| start)
}

/// Whether the process `ident` names is alive (same pid, same start time).
pub(super) fn alive(ident: Ident) -> bool {
    start_time(ident.pid) == Some(ident.start_time)
}

/// Every live process, with the task marker of those this runtime (`runtime_id`)
/// started. The agent itself is left out.
pub(super) fn scan(runtime_id: &str) -> Vec<ProcInfo> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = std::process::id();
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|pid| *pid != me)
        .filter_map(|pid| {
            let (state, pgid, start_time) = stat(pid)?;
            if matches!(state, 'Z' | 'X') {
                return None;
            }
            Some(ProcInfo {
                ident: Ident { pid, start_time },
                pgid,
                task: task_marker(pid, runtime_id),
            })
        })
        .collect()
}

/// The task id in `pid`'s environment, if the environment carries `runtime_id`'s marker.
pub(super) fn task_marker(pid: u32, runtime_id: &str) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let mut ours = false;
    let mut task = None;
    for var in env.split(|b| *b == 0) {
        let Some((name, value)) = std::str::from_utf8(var)
            .ok()
            .and_then(|v| v.split_once('='))
        else {
            continue;
        };
        if name == RUNTIME_MARKER {
            ours = value == runtime_id;
        } else if name == TASK_MARKER {
            task = Some(value.to_string());
        }
    }
    task.filter(|_| ours)
}

/// Send `signal` to the process `ident` names, and to no other: a pidfd is opened
/// first, then the start time checked (the pidfd holds the process that had the pid
/// when the check passed). False when it is gone or is another process now.
pub(super) fn signal(ident: Ident, signal: i32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(ident.pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: pidfd_open(2) takes a pid and flags and returns a new descriptor or -1;
    // no memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let Ok(fd) = i32::try_from(fd) else {
        return false;
    };
    if fd < 0 {
        return false;
    }
    // SAFETY: `fd` was just returned by pidfd_open and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    if !alive(ident) {
        return false;
    }
    // SAFETY: pidfd_send_signal(2) on a descriptor we own, with no siginfo (null).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    rc == 0
}

//! MPS daemon health, checked the way the ECS agent does it: stat the pipe
//! directory, then ask the control utility `get_default_active_thread_percentage`
//! with `CUDA_MPS_PIPE_DIRECTORY` set, under a timeout. Three failures in a row make
//! the host impaired; one success makes it healthy again.
//!
//! The daemon answering is not enough: after a fatal GPU exception in one client an
//! MPS server enters a fault state and refuses new clients until the faulting clients
//! exit. [`MpsProbe::server_faults`] asks the daemon for its servers
//! (`get_server_list`) and each one's state (`get_server_status PID`, where the
//! driver has it); a faulted server impairs the host's GPUs (the health checks'
//! `gpus`), so their tasks move and they take no new ones until it recovers.
//!
//! Where a client probe is configured ([`MpsProbe::client_probe`]: a tiny CUDA
//! program that opens a context and exits 0), it is run on each GPU as an MPS client
//! (`CUDA_VISIBLE_DEVICES` naming that GPU, the daemon's pipe directory): a GPU whose
//! server refuses it [`IMPAIRED_AFTER`] times in a row is impaired on its own
//! ([`ClientProbeBook`]). A probe that hangs, or that cannot be started, says nothing
//! of the GPU and is not counted: a timeout never moves a healthy task.

use gpushare_core::model::MpsHealth;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Failed probes in a row that make the daemon impaired.
pub const IMPAIRED_AFTER: u32 = 3;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    #[error("MPS pipe directory {path} is missing or unreadable: {reason}")]
    PipeDir { path: PathBuf, reason: String },
    #[error("cannot run the MPS control program {program}: {reason}")]
    Spawn { program: String, reason: String },
    #[error("{program} did not answer within {} ms (killed)", timeout.as_millis())]
    Timeout { program: String, timeout: Duration },
    #[error("{program} failed ({}): {output}", exit_text(.code))]
    Failed {
        program: String,
        code: Option<i32>,
        output: String,
    },
    #[error("{program} answered {answer:?}, not a thread percentage")]
    BadAnswer { program: String, answer: String },
}

/// How a program ended, in words: `exit code 1`, or `killed by a signal`.
pub fn exit_text(code: &Option<i32>) -> String {
    match *code {
        Some(c) => format!("exit code {c}"),
        None => "killed by a signal".to_string(),
    }
}

/// The MPS daemon of a simulated host (the local fleet): up or down as a fault
/// injector says; probing it runs nothing.
#[derive(Debug, Clone)]
pub struct SimMps(Arc<AtomicBool>);

impl SimMps {
    pub fn new(up: bool) -> SimMps {
        SimMps(Arc::new(AtomicBool::new(up)))
    }
    pub fn set_up(&self, up: bool) {
        self.0.store(up, Ordering::SeqCst);
    }
    pub fn is_up(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// How to reach the MPS control daemon.
#[derive(Debug, Clone)]
pub struct MpsProbe {
    /// The control program: a path, or a name looked up on PATH.
    pub program: String,
    /// `CUDA_MPS_PIPE_DIRECTORY` of the daemon.
    pub pipe_dir: PathBuf,
    /// How long one probe may take before the program is killed.
    pub timeout: Duration,
    /// Set for a simulated host: the probe asks this instead of running the program.
    pub simulated: Option<SimMps>,
    /// A program run per GPU as an MPS client each pass (`--mps-client-probe`);
    /// `None`: the servers' states alone judge the GPUs.
    pub client_probe: Option<String>,
}

impl MpsProbe {
    pub fn new(program: impl Into<String>, pipe_dir: impl Into<PathBuf>) -> MpsProbe {
        MpsProbe {
            program: program.into(),
            pipe_dir: pipe_dir.into(),
            timeout: Duration::from_secs(3),
            simulated: None,
            client_probe: None,
        }
    }

    /// The probe of a simulated host's daemon (the local fleet).
    pub fn simulated(sim: SimMps) -> MpsProbe {
        MpsProbe {
            simulated: Some(sim),
            ..MpsProbe::new("simulated-mps-control", "/run/gpushare-mps/pipe")
        }
    }

    /// One probe: the daemon's default active thread percentage, e.g. `100.0`.
    pub async fn probe(&self) -> Result<f64, ProbeError> {
        if let Some(sim) = &self.simulated {
            return if sim.is_up() {
                Ok(100.0)
            } else {
                Err(ProbeError::Failed {
                    program: self.program.clone(),
                    code: Some(1),
                    output: "simulated fault: the MPS daemon is down".into(),
                })
            };
        }
        let stdout = self.ask("get_default_active_thread_percentage").await?;
        stdout.parse::<f64>().map_err(|_| ProbeError::BadAnswer {
            program: self.program.clone(),
            answer: stdout.clone(),
        })
    }

    /// The MPS servers in a fault state, each as a sentence naming its pid and state.
    /// Empty when every server is ACTIVE, when there is none, and when the daemon
    /// cannot say (a driver without `get_server_status`, a stand-in that answers
    /// only the probe): nothing is judged without an answer.
    pub async fn server_faults(&self) -> Vec<String> {
        if self.simulated.is_some() {
            return Vec::new();
        }
        let Ok(list) = self.ask("get_server_list").await else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for pid in list
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
        {
            let Ok(status) = self.ask(&format!("get_server_status {pid}")).await else {
                continue;
            };
            if let Some(fault) = server_fault(pid, &status) {
                out.push(fault);
            }
        }
        out
    }

    /// Run the client probe on GPU `index` alone (`uuid`, as NVML names it, when
    /// known), under the probe's timeout. `None` when no probe is configured (or the
    /// host is simulated); else the probe's outcome, for a [`ClientProbeBook`].
    pub async fn client_probe(
        &self,
        index: u32,
        uuid: Option<&str>,
    ) -> Option<Result<(), ProbeError>> {
        let program = self.client_probe.as_deref()?;
        if self.simulated.is_some() {
            return None;
        }
        let device = uuid.map_or_else(|| index.to_string(), str::to_string);
        let mut cmd = tokio::process::Command::new(program);
        cmd.env("CUDA_MPS_PIPE_DIRECTORY", &self.pipe_dir)
            .env("CUDA_VISIBLE_DEVICES", &device);
        Some(self.run(program, cmd, None).await.map(|_| ()))
    }

    /// Send one command to the control program; its answer (stdout, trimmed).
    async fn ask(&self, command: &str) -> Result<String, ProbeError> {
        match tokio::fs::metadata(&self.pipe_dir).await {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(ProbeError::PipeDir {
                    path: self.pipe_dir.clone(),
                    reason: "not a directory".into(),
                })
            }
            Err(e) => {
                return Err(ProbeError::PipeDir {
                    path: self.pipe_dir.clone(),
                    reason: e.to_string(),
                })
            }
        }
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.env("CUDA_MPS_PIPE_DIRECTORY", &self.pipe_dir);
        self.run(&self.program, cmd, Some(command)).await
    }

    /// Run `cmd` (program `program`) with `input` on its stdin, under the probe's
    /// timeout, in a process group of its own; its stdout (trimmed) when it exits 0.
    async fn run(
        &self,
        program: &str,
        mut cmd: tokio::process::Command,
        input: Option<&str>,
    ) -> Result<String, ProbeError> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own process group, so a hung program and anything it started are killed together.
            .process_group(0);
        let mut child = cmd.spawn().map_err(|e| ProbeError::Spawn {
            program: program.to_string(),
            reason: e.to_string(),
        })?;
        let pid = child.id();
        if let Some(mut stdin) = child.stdin.take() {
            // A program that exits without reading its input is judged by its exit status.
            if let Some(input) = input {
                let _ = stdin.write_all(format!("{input}\n").as_bytes()).await;
            }
        }
        let out = match tokio::time::timeout(self.timeout, child.wait_with_output()).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => {
                return Err(ProbeError::Spawn {
                    program: program.to_string(),
                    reason: e.to_string(),
                })
            }
            Err(_) => {
                if let Some(pid) = pid {
                    kill_group(pid, libc::SIGKILL);
                }
                return Err(ProbeError::Timeout {
                    program: program.to_string(),
                    timeout: self.timeout,
                });
            }
        };
        let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
            let output = [stdout, stderr]
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join("; ");
            return Err(ProbeError::Failed {
                program: program.to_string(),
                code: out.status.code(),
                output,
            });
        }
        Ok(stdout)
    }
}

/// What `get_server_status PID` answering `status` says of server `pid`: `None` when
/// it is ACTIVE (or says nothing known), else why the GPUs it serves are impaired.
pub fn server_fault(pid: u32, status: &str) -> Option<String> {
    let word = status.split_whitespace().last()?.to_ascii_uppercase();
    (word.contains("FAULT")).then(|| {
        format!(
            "MPS server {pid} is {word}: it refuses new clients until its faulting clients exit"
        )
    })
}

/// Signal a whole process group (its leader's pid); errors (already gone) are ignored.
pub(crate) fn kill_group(pgid: u32, signal: i32) {
    if let Ok(pgid) = i32::try_from(pgid) {
        if pgid > 0 {
            // SAFETY: kill(2) with a negative pid signals a process group; no memory is touched.
            unsafe {
                libc::kill(-pgid, signal);
            }
        }
    }
}

/// The health verdict over successive probes.
#[derive(Debug, Clone, Default)]
pub struct MpsHealthTracker {
    health: MpsHealth,
    failures_in_a_row: u32,
    last_error: Option<String>,
}

impl MpsHealthTracker {
    pub fn new() -> MpsHealthTracker {
        MpsHealthTracker::default()
    }

    /// Carry on from what an earlier agent of this host reported (its verdict, the
    /// failures in a row and the last error), so a restart neither forgets an impaired
    /// daemon nor restarts the count.
    pub fn resume(
        health: MpsHealth,
        failures_in_a_row: u32,
        last_error: Option<String>,
    ) -> MpsHealthTracker {
        MpsHealthTracker {
            health,
            failures_in_a_row,
            last_error,
        }
    }

    /// Record one probe's outcome.
    pub fn record<T>(&mut self, outcome: &Result<T, ProbeError>) {
        match outcome {
            Ok(_) => {
                self.health = MpsHealth::Healthy;
                self.failures_in_a_row = 0;
                self.last_error = None;
            }
            Err(e) => {
                self.failures_in_a_row = self.failures_in_a_row.saturating_add(1);
                self.last_error = Some(e.to_string());
                if self.failures_in_a_row >= IMPAIRED_AFTER {
                    self.health = MpsHealth::Impaired;
                }
            }
        }
    }

    pub fn health(&self) -> MpsHealth {
        self.health
    }
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }
    pub fn failures_in_a_row(&self) -> u32 {
        self.failures_in_a_row
    }
}

/// The client probe's verdict per GPU over successive passes, judged like the
/// daemon's ([`MpsHealthTracker`]): a GPU is impaired once its MPS server has
/// refused the probe (a non-zero exit) [`IMPAIRED_AFTER`] times in a row, and healthy
/// again at its first pass. A hung probe (killed at the timeout) or one that cannot
/// be started is logged and leaves the count as it was: it says nothing of the GPU,
/// and a timeout never moves a healthy task.
#[derive(Debug, Clone, Default)]
pub struct ClientProbeBook {
    gpus: std::collections::BTreeMap<u32, ClientProbeCount>,
}

#[derive(Debug, Clone, Default)]
struct ClientProbeCount {
    refused_in_a_row: u32,
    last_refusal: Option<String>,
}

impl ClientProbeBook {
    /// Record GPU `index`'s probe outcome; the reason it is impaired, if it is.
    pub fn record(&mut self, index: u32, outcome: &Result<(), ProbeError>) -> Option<String> {
        let count = self.gpus.entry(index).or_default();
        match outcome {
            Ok(()) => *count = ClientProbeCount::default(),
            Err(e @ ProbeError::Failed { .. }) => {
                count.refused_in_a_row = count.refused_in_a_row.saturating_add(1);
                count.last_refusal = Some(e.to_string());
            }
            Err(e) => {
                tracing::warn!(gpu = index, error = %e, "the MPS client probe did not run to an answer: not counted");
            }
        }
        self.fault(index)
    }

    /// Why GPU `index` is impaired by the client probe, or `None`.
    pub fn fault(&self, index: u32) -> Option<String> {
        let count = self.gpus.get(&index)?;
        if count.refused_in_a_row < IMPAIRED_AFTER {
            return None;
        }
        let last = count.last_refusal.as_deref().unwrap_or("refused");
        Some(format!(
            "the MPS client probe on GPU {index} failed {} times in a row: {last} (its MPS server refuses clients)",
            count.refused_in_a_row
        ))
    }
}

/// The per-task gate: before an MPS task starts, the daemon must answer one of up
/// to `attempts` probes within `within` (default 3 in 10 s).
#[derive(Debug, Clone)]
pub struct MpsGate {
    pub attempts: u32,
    pub within: Duration,
}

impl Default for MpsGate {
    fn default() -> Self {
        MpsGate {
            attempts: 3,
            within: Duration::from_secs(10),
        }
    }
}

impl MpsGate {
    /// Probe until one answer or the attempts or time run out; every outcome is
    /// recorded in `tracker`. The error is the last probe's.
    pub async fn check(
        &self,
        probe: &MpsProbe,
        tracker: &mut MpsHealthTracker,
    ) -> Result<(), ProbeError> {
        let deadline = tokio::time::Instant::now() + self.within;
        let attempts = self.attempts.max(1);
        let pause = self.within / (attempts + 1);
        let mut last = None;
        for attempt in 0..attempts {
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            if attempt > 0 && remaining.is_zero() {
                break;
            }
            let one = MpsProbe {
                timeout: probe.timeout.min(remaining.max(Duration::from_millis(1))),
                ..probe.clone()
            };
            let outcome = one.probe().await;
            tracker.record(&outcome);
            match outcome {
                Ok(_) => return Ok(()),
                Err(e) => {
                    tracing::debug!(attempt, error = %e, "MPS gate probe failed");
                    last = Some(e);
                }
            }
            if attempt + 1 < attempts {
                let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
                tokio::time::sleep(pause.min(remaining)).await;
            }
        }
        Err(last.unwrap_or_else(|| ProbeError::Timeout {
            program: probe.program.clone(),
            timeout: self.within,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 45 item 5, regression: Rust's debug text in a message (`exit Some(1)`).
    #[test]
    fn a_failed_probe_says_its_exit_code_in_words() {
        let e = ProbeError::Failed {
            program: "nvidia-cuda-mps-control".into(),
            code: Some(1),
            output: "no daemon".into(),
        };
        assert_eq!(
            e.to_string(),
            "nvidia-cuda-mps-control failed (exit code 1): no daemon"
        );
        let killed = ProbeError::Failed {
            program: "p".into(),
            code: None,
            output: String::new(),
        };
        assert!(killed.to_string().contains("killed by a signal"));
    }

    #[tokio::test]
    async fn a_simulated_daemon_follows_its_fault_switch() {
        let sim = SimMps::new(true);
        let p = MpsProbe::simulated(sim.clone());
        let mut t = MpsHealthTracker::new();
        t.record(&p.probe().await);
        assert_eq!(t.health(), MpsHealth::Healthy);
        sim.set_up(false);
        for _ in 0..IMPAIRED_AFTER {
            t.record(&p.probe().await);
        }
        assert_eq!(t.health(), MpsHealth::Impaired);
        assert!(t.last_error().unwrap_or("").contains("simulated fault"));
        sim.set_up(true);
        t.record(&p.probe().await);
        assert_eq!(t.health(), MpsHealth::Healthy);
    }

    #[test]
    fn a_server_status_is_judged_by_its_last_word() {
        assert_eq!(server_fault(7, "ACTIVE"), None);
        assert_eq!(server_fault(7, ""), None);
        let f = server_fault(7, "Server 7 status: FAULT").expect("a fault");
        assert!(f.contains("MPS server 7 is FAULT"), "{f}");
        assert!(server_fault(7, "fault").is_some());
    }

    #[tokio::test]
    async fn a_daemon_that_cannot_say_reports_no_fault() {
        let d = tempfile::tempdir().expect("tempdir");
        // Answers the probe only, as older drivers and the plain stand-in do.
        let program = d.path().join("control");
        std::fs::write(
            &program,
            "#!/bin/sh\nread -r line\n[ \"$line\" = get_default_active_thread_percentage ] || exit 2\necho 100.0\n",
        )
        .expect("write");
        std::process::Command::new("chmod")
            .args(["755", &program.display().to_string()])
            .status()
            .expect("chmod");
        let p = MpsProbe::new(program.display().to_string(), d.path());
        assert_eq!(p.probe().await, Ok(100.0));
        assert!(p.server_faults().await.is_empty());
    }

    /// The client probe (a stand-in script here: no GPU on this machine) runs once
    /// per GPU with that GPU alone visible and the daemon's pipe directory. GPU 1's
    /// server refusing clients impairs GPU 1 only, after three refusals in a row; a
    /// hung probe (GPU 2) is killed at the timeout and never counts.
    #[tokio::test]
    async fn the_client_probe_judges_each_gpu_on_its_own() {
        let d = tempfile::tempdir().expect("tempdir");
        let program = d.path().join("client");
        std::fs::write(
            &program,
            format!(
                "#!/bin/sh\n[ \"$CUDA_MPS_PIPE_DIRECTORY\" = {} ] || exit 3\n[ \"$CUDA_VISIBLE_DEVICES\" = GPU-1 ] && {{ echo 'cuInit: MPS server refused the client' >&2; exit 1; }}\n[ \"$CUDA_VISIBLE_DEVICES\" = 2 ] && sleep 30\nexit 0\n",
                d.path().display()
            ),
        )
        .expect("write");
        std::process::Command::new("chmod")
            .args(["755", &program.display().to_string()])
            .status()
            .expect("chmod");
        let mut p = MpsProbe::new("unused", d.path());
        p.timeout = Duration::from_millis(300);
        assert!(
            p.client_probe(0, Some("GPU-0")).await.is_none(),
            "no probe configured"
        );
        p.client_probe = Some(program.display().to_string());
        let mut book = ClientProbeBook::default();
        for pass in 1..=IMPAIRED_AFTER {
            for (i, uuid) in [(0, Some("GPU-0")), (1, Some("GPU-1")), (2, None)] {
                let outcome = p.client_probe(i, uuid).await.expect("configured");
                let fault = book.record(i, &outcome);
                match i {
                    0 => assert_eq!((outcome, fault), (Ok(()), None)),
                    1 => {
                        assert!(
                            matches!(outcome, Err(ProbeError::Failed { .. })),
                            "{outcome:?}"
                        );
                        assert_eq!(
                            fault.is_some(),
                            pass == IMPAIRED_AFTER,
                            "pass {pass}: {fault:?}"
                        );
                    }
                    _ => {
                        assert!(
                            matches!(outcome, Err(ProbeError::Timeout { .. })),
                            "{outcome:?}"
                        );
                        assert_eq!(fault, None, "a hang is not counted");
                    }
                }
            }
        }
        let refused = book.fault(1).expect("GPU 1 refuses");
        assert!(
            refused.contains("GPU 1")
                && refused.contains("3 times in a row")
                && refused.contains("MPS server refused the client"),
            "{refused}"
        );
        assert_eq!(
            book.record(1, &Ok(())),
            None,
            "one pass makes it healthy again"
        );
    }
}

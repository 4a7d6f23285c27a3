//! The first-boot deep check: NVIDIA DCGM's quick diagnostic (`dcgmi diag -r 1`,
//! about a minute), run once before the host takes tasks when its pool sets
//! `deep_check` (the agent's `--deep-check`). Exit 0: `ok`; another exit or a
//! timeout: `impaired`; no `dcgmi` on the host: `insufficient_data` (the host takes
//! tasks: the check cannot be made, which is not a failure of the host).

use gpushare_core::model::CheckStatus;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

/// How to run the deep check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeepCheck {
    /// The program (default `dcgmi`, found on PATH).
    pub program: PathBuf,
    pub args: Vec<String>,
    pub timeout: Duration,
    /// Where the verdict is kept, so that it runs once per host, not per agent start
    /// (`None`: kept in memory only).
    pub record: Option<PathBuf>,
}

/// The verdict as kept in [`DeepCheck::record`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeepVerdict {
    pub status: CheckStatus,
    pub reason: Option<String>,
    pub at: u64,
}

impl Default for DeepCheck {
    fn default() -> Self {
        DeepCheck {
            program: PathBuf::from("dcgmi"),
            args: vec!["diag".into(), "-r".into(), "1".into()],
            timeout: Duration::from_secs(600),
            record: None,
        }
    }
}

/// At most this much of the diagnostic's output goes into the reason.
const OUTPUT_TAIL: usize = 400;

impl DeepCheck {
    /// The verdict of an earlier run kept in the record (`None`: none, or unreadable).
    pub fn recorded(&self) -> Option<DeepVerdict> {
        let text = std::fs::read(self.record.as_ref()?).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Keep `verdict` in the record (a failure to write is logged: the check then
    /// runs again at the next start).
    pub fn keep(&self, verdict: &DeepVerdict) {
        let Some(path) = &self.record else { return };
        let written = serde_json::to_vec(verdict)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(path, bytes));
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), error = %e, "cannot keep the deep diagnostic's verdict");
        }
    }

    /// Run it once: the status of the `deep_diagnostic` check and its reason.
    pub async fn run(&self) -> (CheckStatus, Option<String>) {
        let shown = format!("{} {}", self.program.display(), self.args.join(" "));
        let child = tokio::process::Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return (
                    CheckStatus::InsufficientData,
                    Some(format!(
                        "{} is not installed: no DCGM diagnostic",
                        self.program.display()
                    )),
                )
            }
            Err(e) => {
                return (
                    CheckStatus::InsufficientData,
                    Some(format!("cannot run {shown}: {e}")),
                )
            }
        };
        let out = match tokio::time::timeout(self.timeout, child.wait_with_output()).await {
            Err(_) => {
                return (
                    CheckStatus::Impaired,
                    Some(format!(
                        "{shown} did not finish within {} s",
                        self.timeout.as_secs()
                    )),
                )
            }
            Ok(Err(e)) => {
                return (
                    CheckStatus::InsufficientData,
                    Some(format!("cannot wait for {shown}: {e}")),
                )
            }
            Ok(Ok(o)) => o,
        };
        if out.status.success() {
            return (CheckStatus::Ok, Some(format!("{shown} passed")));
        }
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let tail: String = {
            let n = text.chars().count();
            text.chars().skip(n.saturating_sub(OUTPUT_TAIL)).collect()
        };
        (
            CheckStatus::Impaired,
            Some(format!(
                "{shown} failed ({}){}",
                out.status,
                if tail.is_empty() {
                    String::new()
                } else {
                    format!(": {tail}")
                }
            )),
        )
    }
}

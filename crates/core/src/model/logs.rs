//! A task's recent output, on request (issue 47): `gpushare logs` puts a
//! [`LogRequest`] on the task's host record; the host's agent sees it in its
//! assignment (from the store or through the agent API: the host's own record is in
//! its view), reads the output from its runtime (Docker's log, the process runtime's
//! files) and answers in its report with a [`LogReply`], bounded in size. No channel
//! of its own: the assignment and the report carry it, so it works wherever an agent
//! works, and a host can only answer for itself.

use serde::{Deserialize, Serialize};

/// The most output one reply carries (the rest is cut from the front).
pub const MAX_LOG_REPLY_BYTES: usize = 64 * 1024;
/// The most lines one request asks for.
pub const MAX_LOG_TAIL: u32 = 10_000;
/// How long a request stands: an agent ignores it afterwards.
pub const LOG_REQUEST_SECONDS: u64 = 120;

/// `gpushare logs TASK`: the last `tail` lines of the task's containers (of
/// `container` alone when set), until `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRequest {
    /// Made by the requester; the reply names it.
    pub id: String,
    pub task: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    pub tail: u32,
    /// Seconds since the Unix epoch.
    pub expires_at: u64,
}

/// One container's output in a reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerLog {
    pub container: String,
    pub text: String,
    /// Older output was cut to keep the reply within [`MAX_LOG_REPLY_BYTES`].
    #[serde(default)]
    pub truncated: bool,
}

/// The agent's answer to a [`LogRequest`], in its report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogReply {
    pub id: String,
    pub task: String,
    #[serde(default)]
    pub containers: Vec<ContainerLog>,
    /// Why there is no output (the task does not run here, the runtime failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The task has ended: this is all its output (a job's run the agent kept the
    /// output of; `--follow` stops here).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ended: bool,
}

impl LogReply {
    /// Keep the reply within [`MAX_LOG_REPLY_BYTES`] (each container gets an equal
    /// share, its newest output kept) and its texts printable: what a controller
    /// stores of a report an agent sent.
    pub fn bound(&mut self) {
        let share = MAX_LOG_REPLY_BYTES / self.containers.len().max(1);
        for c in &mut self.containers {
            c.text = printable(&c.text);
            if c.text.len() > share {
                let mut cut = c.text.len() - share;
                while !c.text.is_char_boundary(cut) {
                    cut += 1;
                }
                c.text = c.text[cut..].to_string();
                c.truncated = true;
            }
            c.container = super::clean_text(&c.container);
        }
        self.containers.truncate(64);
        if let Some(e) = self.error.as_mut() {
            *e = super::clean_text(e);
        }
    }
}

/// `s` with control characters other than newline and tab replaced, so output
/// cannot drive a terminal.
fn printable(s: &str) -> String {
    super::output_tail(s, s.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_bounded_and_printable() {
        let mut r = LogReply {
            id: "r".into(),
            task: "t".into(),
            containers: vec![ContainerLog {
                container: "c".into(),
                text: format!("{}\x1b[2Jend\n", "x".repeat(2 * MAX_LOG_REPLY_BYTES)),
                truncated: false,
            }],
            error: None,
            ended: false,
        };
        r.bound();
        let c = &r.containers[0];
        assert!(c.truncated);
        assert!(c.text.len() <= MAX_LOG_REPLY_BYTES);
        assert!(
            c.text.ends_with("\u{fffd}[2Jend\n"),
            "{:?}",
            &c.text[c.text.len() - 20..]
        );
    }
}

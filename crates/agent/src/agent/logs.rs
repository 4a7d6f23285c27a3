//! The step of a pass that answers `gpushare logs`: the host's standing log request
//! (on its record in the assignment) is answered once, from the runtime, and the
//! answer is sent in every report while the request stands (docs/serving.md).
//! A job's run is removed from the runtime when it ends, so its output is kept
//! here first ([`EndedOutput`]) for `gpushare job logs` (docs/jobs.md).

use super::{error_chain, Agent};
use crate::runtime::ObservedTask;
use gpushare_core::model::{ContainerLog, LogReply, LogRequest, StoreState, MAX_LOG_TAIL};
use std::collections::{BTreeMap, VecDeque};

/// How many ended job runs' output an agent keeps (each at most
/// `MAX_LOG_REPLY_BYTES`: 2 MiB in all).
pub(crate) const KEPT_RUNS: usize = 32;

/// The output of the last [`KEPT_RUNS`] job runs that ended on this host, oldest
/// first, kept in memory (an agent restart forgets it).
#[derive(Debug, Default)]
pub(super) struct EndedOutput {
    runs: VecDeque<(String, Vec<ContainerLog>)>,
}

impl EndedOutput {
    fn keep(&mut self, task: &str, containers: Vec<ContainerLog>) {
        self.runs.retain(|(t, _)| t != task);
        while self.runs.len() >= KEPT_RUNS {
            self.runs.pop_front();
        }
        self.runs.push_back((task.to_string(), containers));
    }

    fn get(&self, task: &str) -> Option<&[ContainerLog]> {
        self.runs
            .iter()
            .find(|(t, _)| t == task)
            .map(|(_, c)| c.as_slice())
    }
}

impl Agent {
    /// Answer this host's log request, if one stands (not expired) and is not
    /// answered yet; forget the answer once the request is gone.
    pub(super) async fn answer_logs(
        &mut self,
        state: &StoreState,
        observed: &BTreeMap<String, ObservedTask>,
        now: u64,
    ) {
        let request = state
            .hosts
            .get(&self.config.host_id)
            .and_then(|h| h.log_request.as_ref())
            .filter(|r| r.expires_at >= now);
        let Some(req) = request else {
            self.log_reply = None;
            return;
        };
        if self.log_reply.as_ref().is_some_and(|r| r.id == req.id) {
            return;
        }
        let mut reply = match observed.get(&req.task) {
            Some(task) => self.read_logs(req, task).await,
            None => self.ended_logs(req, state),
        };
        reply.bound();
        self.log_reply = Some(reply);
    }

    /// Keep the output of job run `id`, which ended and is about to be removed from
    /// the runtime, for `gpushare job logs`.
    pub(super) async fn keep_output(&mut self, id: &str, observed: Option<&ObservedTask>) {
        let Some(task) = observed else { return };
        let mut kept = empty_reply(id, id);
        for name in task.containers.keys() {
            match self.runtime.logs(id, name, MAX_LOG_TAIL).await {
                Ok(text) => kept.containers.push(ContainerLog {
                    container: name.clone(),
                    text,
                    truncated: false,
                }),
                Err(e) => {
                    tracing::debug!(task = %id, container = %name, error = %error_chain(&e), "cannot keep the output of an ended run");
                }
            }
        }
        kept.bound();
        self.ended_output.keep(id, kept.containers);
    }

    /// The answer for a task the runtime does not run: its kept output when it is a
    /// job's run that ended here; no output yet when it is placed here and not
    /// started (so that `--follow` waits for it).
    fn ended_logs(&self, req: &LogRequest, state: &StoreState) -> LogReply {
        let mut reply = empty_reply(&req.id, &req.task);
        let Some(kept) = self.ended_output.get(&req.task) else {
            let placed_here = state
                .tasks
                .get(&req.task)
                .is_some_and(|t| t.host == self.config.host_id);
            if placed_here {
                return reply;
            }
            reply.error = Some(format!(
                "task {} does not run on host {} (stopped tasks leave no output behind)",
                req.task, self.config.host_id
            ));
            return reply;
        };
        reply.ended = true;
        let names: Vec<&str> = kept.iter().map(|c| c.container.as_str()).collect();
        if let Some(c) = req
            .container
            .as_ref()
            .filter(|c| !names.contains(&c.as_str()))
        {
            reply.error = Some(no_container(&req.task, c, &names));
            return reply;
        }
        reply.containers = kept
            .iter()
            .filter(|c| req.container.as_ref().is_none_or(|n| *n == c.container))
            .map(|c| ContainerLog {
                container: c.container.clone(),
                text: last_lines(&c.text, req.tail),
                truncated: c.truncated,
            })
            .collect();
        reply
    }

    async fn read_logs(&self, req: &LogRequest, task: &ObservedTask) -> LogReply {
        let mut reply = empty_reply(&req.id, &req.task);
        let names: Vec<&String> = match &req.container {
            Some(c) if task.containers.contains_key(c) => vec![c],
            Some(c) => {
                let known: Vec<&str> = task.containers.keys().map(String::as_str).collect();
                reply.error = Some(no_container(&req.task, c, &known));
                return reply;
            }
            None => task.containers.keys().collect(),
        };
        for name in names {
            match self
                .runtime
                .logs(&req.task, name, req.tail.min(MAX_LOG_TAIL))
                .await
            {
                Ok(text) => reply.containers.push(ContainerLog {
                    container: name.clone(),
                    text,
                    truncated: false,
                }),
                Err(e) => {
                    reply.error = Some(format!(
                        "reading the output of container {name}: {}",
                        error_chain(&e)
                    ));
                }
            }
        }
        reply
    }
}

fn empty_reply(id: &str, task: &str) -> LogReply {
    LogReply {
        id: id.to_string(),
        task: task.to_string(),
        containers: Vec::new(),
        error: None,
        ended: false,
    }
}

fn no_container(task: &str, container: &str, known: &[&str]) -> String {
    format!(
        "task {task} has no container {container:?} (its containers: {})",
        known.join(", ")
    )
}

/// The last `tail` lines of `text`.
fn last_lines(text: &str, tail: u32) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(tail as usize);
    lines[from..].iter().map(|l| format!("{l}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(text: &str) -> Vec<ContainerLog> {
        vec![ContainerLog {
            container: "main".into(),
            text: text.into(),
            truncated: false,
        }]
    }

    #[test]
    fn the_newest_ended_runs_are_kept_and_a_kept_run_is_kept_once() {
        let mut kept = EndedOutput::default();
        for n in 0..KEPT_RUNS + 3 {
            kept.keep(&format!("t{n}"), log(&format!("run {n}\n")));
        }
        kept.keep("t5", log("again\n"));
        assert_eq!(kept.runs.len(), KEPT_RUNS);
        assert!(kept.get("t0").is_none());
        assert!(kept.get("t3").is_some());
        assert_eq!(kept.get("t5").map(|c| c[0].text.as_str()), Some("again\n"));
        assert_eq!(kept.runs.back().map(|(t, _)| t.as_str()), Some("t5"));
    }

    #[test]
    fn a_tail_of_kept_output_is_its_last_lines() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(last_lines("a\nb", 5), "a\nb\n");
        assert_eq!(last_lines("", 5), "");
    }
}

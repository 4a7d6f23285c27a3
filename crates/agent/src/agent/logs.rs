//! The step of a pass that answers `gpushare logs`: the host's standing log request
//! (on its record in the assignment) is answered once, from the runtime, and the
//! answer is sent in every report while the request stands (docs/serving.md).

use super::{error_chain, Agent};
use crate::runtime::ObservedTask;
use gpushare_core::model::{ContainerLog, LogReply, LogRequest, StoreState, MAX_LOG_TAIL};
use std::collections::BTreeMap;

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
        let mut reply = self.read_logs(req, observed.get(&req.task)).await;
        reply.bound();
        self.log_reply = Some(reply);
    }

    async fn read_logs(&self, req: &LogRequest, observed: Option<&ObservedTask>) -> LogReply {
        let mut reply = LogReply {
            id: req.id.clone(),
            task: req.task.clone(),
            containers: Vec::new(),
            error: None,
        };
        let Some(task) = observed else {
            reply.error = Some(format!(
                "task {} does not run on host {} (stopped tasks leave no output behind)",
                req.task, self.config.host_id
            ));
            return reply;
        };
        let names: Vec<&String> = match &req.container {
            Some(c) if task.containers.contains_key(c) => vec![c],
            Some(c) => {
                let known: Vec<&str> = task.containers.keys().map(String::as_str).collect();
                reply.error = Some(format!(
                    "task {} has no container {c:?} (its containers: {})",
                    req.task,
                    known.join(", ")
                ));
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

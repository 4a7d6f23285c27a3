//! Serving (issue 47): `endpoints`, where each task of a service is reached.

use super::inspect::settings_of;
use crate::cli::PlannerArgs;
use crate::setup::reconciler;
use anyhow::Context;
use gpushare_core::model::{
    annotate_target_health, endpoints, host_addresses, prometheus_sd, Endpoint,
};
use std::path::Path;

/// How `endpoints` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EndpointsFormat {
    Text,
    Json,
    /// Prometheus' HTTP service-discovery JSON.
    Prometheus,
}

/// `endpoints [SERVICE]`: each task's published ports at its host's address, with
/// its health, read from the store and the agents' reports.
pub(crate) async fn endpoints_cmd(
    dir: &Path,
    service: Option<&str>,
    format: EndpointsFormat,
) -> anyhow::Result<u8> {
    let desired = settings_of(dir)?;
    if let Some(s) = service {
        if !desired.services.contains_key(s) {
            let known: Vec<&str> = desired.services.keys().map(String::as_str).collect();
            anyhow::bail!(
                "no service {s:?} in {} (its services: {})",
                dir.display(),
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            );
        }
    }
    let r = reconciler(&desired, dir, &PlannerArgs::default(), "gpushare endpoints").await?;
    let live = r.observe_only(&desired.settings.cluster).await?;
    let reports = r
        .store()
        .reports()
        .await
        .context("reading the agents' reports")?;
    let addresses = host_addresses(&reports, &live.state.hosts);
    let mut list = endpoints(&live.state, &live.task_status, &addresses, service);
    let mut live = live;
    r.observe_target_groups(&desired, &mut live).await;
    annotate_target_health(
        &mut list,
        &desired.services,
        &live.state.hosts,
        &live.target_groups,
    );
    match format {
        EndpointsFormat::Json => {
            let out = serde_json::json!({
                "format_version": gpushare_core::model::FORMAT_VERSION,
                "endpoints": list,
            });
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
        EndpointsFormat::Prometheus => {
            println!("{}", serde_json::to_string_pretty(&prometheus_sd(&list))?);
        }
        EndpointsFormat::Text => print!("{}", endpoints_text(&list)),
    }
    Ok(0)
}

/// One line per task port: service, task, `address:port`, name, state and health.
pub(crate) fn endpoints_text(list: &[Endpoint]) -> String {
    use std::fmt::Write as _;
    if list.is_empty() {
        return "No task publishes a port (declare port_mapping in a task definition; docs/serving.md).\n".to_string();
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<16} {:<24} {:<24} {:<10} {:<8} {:<10} READY",
        "SERVICE", "TASK", "ENDPOINT", "PORT", "STATE", "HEALTH"
    );
    for e in list {
        let target = e
            .target()
            .unwrap_or_else(|| format!("{}:{} (no address yet)", e.host, e.host_port));
        let port = gpushare_core::model::port_text(&e.port, e.protocol);
        let _ = writeln!(
            out,
            "{:<16} {:<24} {:<24} {:<10} {:<8} {:<10} {}",
            e.service,
            e.task,
            target,
            port,
            format!("{:?}", e.state).to_lowercase(),
            e.health.map_or("-", |h| h.as_str()),
            if e.ready { "yes" } else { "no" }
        );
        for (group, state) in &e.target_health {
            let _ = writeln!(out, "{:<16} {:<24} target group {group}: {state}", "", "");
        }
    }
    out
}

/// What `gpushare logs` asks for.
pub(crate) struct LogsArgs {
    pub task: String,
    /// The host the task ran on, where the state no longer holds the task (a job's
    /// ended run: `gpushare job logs`); `None`: the task's own record says.
    pub host: Option<String>,
    pub container: Option<String>,
    pub tail: u32,
    pub follow: bool,
    /// How long to wait for the host's agent to answer.
    pub wait: std::time::Duration,
}

impl LogsArgs {
    pub(crate) fn new(task: String, host: Option<String>, o: crate::cli::OutputArgs) -> LogsArgs {
        LogsArgs {
            task,
            host,
            container: o.container,
            tail: o.tail,
            follow: o.follow,
            wait: std::time::Duration::from_secs(o.wait),
        }
    }
}

/// `logs TASK`: the task's recent output, from the agent of the host it runs on.
/// A request is put on the host's record (a state edit); the agent answers in its
/// report; the request is taken off again. With `follow`, asked again every two
/// seconds, and only what is new is printed, until the task is gone or Ctrl-C.
pub(crate) async fn logs_cmd(at: &crate::cli::StoreArgs, args: LogsArgs) -> anyhow::Result<u8> {
    let (b, timeout) = crate::setup::open_for_edit(at.dir.clone(), &at.vars, &at.lock).await?;
    logs_from(&b, timeout, args).await
}

/// [`logs_cmd`] on open backends (`timeout`: how long to wait for the state lock).
pub(crate) async fn logs_from(
    b: &gpushare_engine::reconcile::Backends,
    timeout: std::time::Duration,
    args: LogsArgs,
) -> anyhow::Result<u8> {
    let mut printed: std::collections::BTreeMap<String, String> = Default::default();
    let mut round = 0u64;
    let result = loop {
        round += 1;
        let req = gpushare_core::model::LogRequest {
            id: format!(
                "{}-{}-{round}",
                std::process::id(),
                gpushare_core::util::unix_now()
            ),
            task: args.task.clone(),
            container: args.container.clone(),
            tail: args.tail.min(gpushare_core::model::MAX_LOG_TAIL),
            expires_at: gpushare_core::util::unix_now() + gpushare_core::model::LOG_REQUEST_SECONDS,
        };
        let host = crate::state_cmd::edit(b, "gpushare logs", timeout, |s| {
            put_log_request(s, &req, args.host.as_deref())
        })
        .await?;
        let reply = wait_reply(b, &host, &req.id, args.wait).await;
        let reply = match reply {
            Ok(r) => r,
            Err(e) => break Err(e),
        };
        if let Some(e) = &reply.error {
            if round == 1 || !args.follow {
                break Err(anyhow::anyhow!("host {host}: {e}"));
            }
            break Ok(0);
        }
        print_reply(&reply, &mut printed);
        if !args.follow || reply.ended {
            break Ok(0);
        }
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    };
    // Take the request off the host's record (best effort: it expires anyway).
    let task = args.task.clone();
    if let Err(e) = crate::state_cmd::edit(b, "gpushare logs", timeout, |s| {
        for h in s.hosts.values_mut() {
            if h.log_request.as_ref().is_some_and(|r| r.task == task) {
                h.log_request = None;
            }
        }
        Ok(())
    })
    .await
    {
        tracing::warn!(error = %format!("{e:#}"), "could not take the log request off the host's record");
    }
    result
}

/// Put `req` on the record of the host task `req.task` runs on (`on`, when given:
/// the host a job's run ran on); that host's id.
pub(crate) fn put_log_request(
    s: &mut gpushare_core::model::StoreState,
    req: &gpushare_core::model::LogRequest,
    on: Option<&str>,
) -> anyhow::Result<String> {
    if let Some(host) = on {
        let Some(h) = s.hosts.get_mut(host) else {
            anyhow::bail!(
                "task {} ran on host {host}, which is gone: its output went with it",
                req.task
            );
        };
        h.log_request = Some(req.clone());
        return Ok(host.to_string());
    }
    let Some(t) = s.tasks.get(&req.task) else {
        let known: Vec<&str> = s.tasks.keys().map(String::as_str).take(20).collect();
        anyhow::bail!(
            "no task {:?} in the state (tasks: {}; `gpushare show` lists them)",
            req.task,
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        );
    };
    let host = t.host.clone();
    let Some(h) = s.hosts.get_mut(&host) else {
        anyhow::bail!(
            "task {} is on host {host}, which the state does not hold",
            req.task
        );
    };
    h.log_request = Some(req.clone());
    Ok(host)
}

/// Poll the host's report until its agent answers request `id` (or `wait` passes).
async fn wait_reply(
    b: &gpushare_engine::reconcile::Backends,
    host: &str,
    id: &str,
    wait: std::time::Duration,
) -> anyhow::Result<gpushare_core::model::LogReply> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let reports = b
            .store
            .reports()
            .await
            .context("reading the agents' reports")?;
        let report = reports.iter().find(|r| r.host_id == host);
        if let Some(reply) = report.and_then(|r| r.logs.as_ref()).filter(|l| l.id == id) {
            return Ok(reply.clone());
        }
        if tokio::time::Instant::now() >= deadline {
            let last = report.map_or("it has never reported".to_string(), |r| {
                format!(
                    "its last report is {} s old",
                    gpushare_core::util::unix_now().saturating_sub(r.at)
                )
            });
            anyhow::bail!(
                "the agent of host {host} did not answer within {} s ({last}); is it running?",
                wait.as_secs()
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
}

/// Print each container's output not printed before (`printed`: what was).
fn print_reply(
    reply: &gpushare_core::model::LogReply,
    printed: &mut std::collections::BTreeMap<String, String>,
) {
    let several = reply.containers.len() > 1;
    for c in &reply.containers {
        let before = printed.get(&c.container).map(String::as_str).unwrap_or("");
        let new = new_output(before, &c.text);
        if before.is_empty() && c.truncated {
            eprintln!("(older output of container {} is cut)", c.container);
        }
        for line in new.lines() {
            if several {
                println!("{} | {line}", c.container);
            } else {
                println!("{line}");
            }
        }
        printed.insert(c.container.clone(), c.text.clone());
    }
}

/// The part of `next` (a later tail of one output) that `prev` (an earlier tail)
/// did not hold: after the longest end of `prev`, on a line boundary, that `next`
/// starts with.
pub(crate) fn new_output<'a>(prev: &str, next: &'a str) -> &'a str {
    if prev.is_empty() {
        return next;
    }
    let starts: Vec<usize> = std::iter::once(0)
        .chain(prev.match_indices('\n').map(|(i, _)| i + 1))
        .filter(|&i| i < prev.len())
        .collect();
    for i in starts {
        if let Some(rest) = next.strip_prefix(&prev[i..]) {
            return rest;
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::new_output;

    #[test]
    fn only_new_lines_are_printed_when_following() {
        assert_eq!(new_output("", "a\nb\n"), "a\nb\n");
        assert_eq!(new_output("a\nb\n", "a\nb\nc\n"), "c\n");
        // The window slid: the older lines fell out of the tail.
        assert_eq!(new_output("a\nb\nc\n", "b\nc\nd\ne\n"), "d\ne\n");
        assert_eq!(new_output("a\nb\n", "a\nb\n"), "");
        // Nothing in common: all of it.
        assert_eq!(new_output("x\n", "y\n"), "y\n");
    }
}

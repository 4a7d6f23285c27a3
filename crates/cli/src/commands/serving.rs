//! Serving (issue 47): `endpoints`, where each task of a service is reached.

use super::inspect::settings_of;
use crate::cli::PlannerArgs;
use crate::setup::reconciler;
use anyhow::Context;
use gpushare_core::model::{endpoints, host_addresses, prometheus_sd, Endpoint};
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
    let list = endpoints(&live.state, &live.task_status, &addresses, service);
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
        let port = match e.protocol {
            gpushare_core::model::Protocol::Tcp => e.port.clone(),
            gpushare_core::model::Protocol::Udp => format!("{}/udp", e.port),
        };
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
    }
    out
}

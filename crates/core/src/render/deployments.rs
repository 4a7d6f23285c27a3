//! What the plan text, `show` and the status record say of services' deployments
//! (docs/deployments.md).

use super::{Paint, BOLD, YELLOW};
use crate::model::{DeploymentState, ServiceStatus, StoreState};
use crate::plan::Plan;
use std::fmt::Write as _;

/// A line per service whose last deployment is not complete (judged from the tasks'
/// states in `state`), for the GitOps status record: `service.embedder: deployment
/// embedder/2 of revision 3 FAILED, 4 failed task(s) (circuit breaker: ...)`.
pub fn deployment_lines(state: &StoreState) -> Vec<String> {
    crate::model::service_status(state, &Default::default(), u64::MAX)
        .into_iter()
        .filter_map(|s| {
            let d = s.deployment?;
            (d.state != DeploymentState::Completed).then(|| {
                let mut line = format!(
                    "service.{}: deployment {} of revision {} {}",
                    s.service, d.id, d.revision, d.state
                );
                if d.failed_tasks > 0 {
                    line.push_str(&format!(", {} failed task(s)", d.failed_tasks));
                }
                if let Some(r) = d.reason.filter(|_| d.state.is_failed()) {
                    line.push_str(&format!(" ({r})"));
                }
                line
            })
        })
        .collect()
}

/// A line per service: its counts and its deployment (`gpushare show`).
pub fn services_text(services: &[ServiceStatus]) -> String {
    if services.is_empty() {
        return String::new();
    }
    let width = services.iter().map(|s| s.service.len()).max().unwrap_or(0);
    let mut out = String::from("\nServices:\n");
    for s in services {
        let revisions: Vec<String> = s.revisions.iter().map(u32::to_string).collect();
        let revs = match revisions.len() {
            0 => String::new(),
            1 => format!(" (rev {})", revisions[0]),
            _ => format!(" (revs {})", revisions.join(", ")),
        };
        let _ = write!(
            out,
            "  {:width$}  {} desired, {} running, {} healthy, {} pending{revs}",
            s.service, s.desired, s.running, s.healthy, s.pending
        );
        if let Some(d) = &s.deployment {
            let _ = write!(
                out,
                "; deployment {} of revision {} {}",
                d.id, d.revision, d.state
            );
            if d.failed_tasks > 0 {
                let _ = write!(out, ", {} failed task(s)", d.failed_tasks);
            }
            if d.state.is_failed() {
                if let Some(r) = &d.reason {
                    let _ = write!(out, " ({r})");
                }
            }
        }
        out.push('\n');
    }
    out
}

/// The deployment records the plan writes, one line each.
pub(super) fn deployments_section(out: &mut String, plan: &Plan, pt: &Paint) {
    if plan.deployments.is_empty() {
        return;
    }
    let _ = writeln!(out, "{}", pt.p(BOLD, "Deployments:"));
    for d in &plan.deployments {
        let r = &d.record;
        let previous = r
            .previous
            .map(|p| format!(" from revision {p}"))
            .unwrap_or_default();
        let failed = if r.failed_tasks > 0 {
            format!(", {} failed task(s)", r.failed_tasks)
        } else {
            String::new()
        };
        let reason = r
            .reason
            .as_deref()
            .map(|x| format!(": {x}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {} service.{}: deployment {} of revision {}{previous} {}{failed}{reason}",
            pt.p(YELLOW, "~"),
            d.service,
            r.id,
            r.revision,
            r.state
        );
    }
    let _ = writeln!(out);
}

/// The auto scaling records the plan writes, one line each: a count changed with its
/// reason, or a breach of the target that began or ended (docs/autoscaling.md).
pub(super) fn scaling_section(out: &mut String, plan: &Plan, pt: &Paint) {
    if plan.scaling.is_empty() {
        return;
    }
    let _ = writeln!(out, "{}", pt.p(BOLD, "Auto scaling:"));
    for u in &plan.scaling {
        let r = &u.record;
        let line = match &u.change {
            Some(c) => c.line(&u.service),
            None => {
                let state = match (r.above_since, r.below_since) {
                    (Some(t), _) => format!("above its target since {t}"),
                    (_, Some(t)) => format!("below its target since {t}"),
                    _ => "at its target".to_string(),
                };
                format!(
                    "service.{}: {} tasks, metric {state} (record only)",
                    u.service, r.count
                )
            }
        };
        let _ = writeln!(out, "  {} {line}", pt.p(YELLOW, "~"));
    }
    let _ = writeln!(out);
}

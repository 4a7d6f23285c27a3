//! The plan's load-balancer section: each task a target group gains or loses.

use super::{section, Paint, LIST_MAX};
use crate::plan::{Plan, TargetWhen};

/// `Load balancers:` one line per registration and deregistration (at most
/// `3 * LIST_MAX` of each, then a count).
pub(super) fn targets_section(out: &mut String, plan: &Plan, pt: &Paint) {
    let mut lines = Vec::new();
    for (sign, list) in [
        ("+", &plan.target_registrations),
        ("-", &plan.target_deregistrations),
    ] {
        for c in list.iter().take(3 * LIST_MAX) {
            let when = match (sign, c.when) {
                ("+", TargetWhen::Now) => "(healthy)".to_string(),
                ("+", _) => "once the task is healthy".to_string(),
                (_, TargetWhen::WithStop) => format!(
                    "once its successor is healthy in the group, then drain (at most {} s) and stop",
                    c.drain_seconds
                ),
                _ if c.task_id.is_empty() => "(no task of the service stands for it)".to_string(),
                _ => format!("drain (at most {} s), then stop", c.drain_seconds),
            };
            lines.push(format!(
                "{} service.{}: {} {}",
                pt.p(
                    if sign == "+" {
                        super::GREEN
                    } else {
                        super::RED
                    },
                    sign
                ),
                c.service,
                c.what(),
                when
            ));
        }
        if list.len() > 3 * LIST_MAX {
            lines.push(format!("{sign} ... and {} more", list.len() - 3 * LIST_MAX));
        }
    }
    if !lines.is_empty() {
        section(out, pt, "Load balancers (target groups):", lines);
    }
}

//! The plan's "Hosts to refresh" section: each pool's outdated hosts, what differs,
//! which roll now and which later, and a halted or waiting refresh.

use super::{Paint, BOLD, YELLOW};
use crate::plan::{Plan, PoolRefresh};
use std::fmt::Write as _;

pub(super) fn refresh_section(out: &mut String, plan: &Plan, pt: &Paint) {
    if plan.refreshes.is_empty() {
        return;
    }
    let _ = writeln!(out, "{}", pt.p(BOLD, "Hosts to refresh:"));
    for r in &plan.refreshes {
        for (o, when) in r
            .now
            .iter()
            .map(|o| (o, "now"))
            .chain(r.later.iter().map(|o| (o, "later")))
        {
            let _ = writeln!(
                out,
                "  {} {} ({}), {} task(s): {when}",
                pt.p(YELLOW, "~"),
                o.host_id,
                o.changes_text(),
                o.tasks
            );
        }
        let _ = writeln!(out, "  {}", pool_line(r));
    }
    let _ = writeln!(out);
}

/// `capacity_provider.l4: 2 now, 4 later within max_draining_percent 34`, with why
/// it is halted or waits.
pub fn pool_line(r: &PoolRefresh) -> String {
    let mut line = format!(
        "capacity_provider.{}: {} now, {} later within max_draining_percent {}",
        r.pool,
        r.now.len(),
        r.later.len(),
        r.max_draining_percent
    );
    if let Some(why) = &r.halted {
        let _ = write!(line, "; HALTED: {why}; the old hosts are kept");
    } else if let Some(why) = &r.waiting {
        let _ = write!(line, "; waiting: {why}");
    }
    line
}

/// The no-changes line of a plan that changes nothing while hosts are outdated (the
/// refresh is halted or waits): the fleet does not match the configuration yet.
pub(super) fn no_changes_line(plan: &Plan) -> Option<String> {
    let outdated: usize = plan.refreshes.iter().map(|r| r.later.len()).sum();
    if outdated == 0 {
        return None;
    }
    let how = if plan.refreshes.iter().any(|r| r.halted.is_some()) {
        "a refresh is halted"
    } else {
        "the refresh waits"
    };
    Some(format!(
        "No changes now: {outdated} outdated host(s) stay until they roll ({how}; see \"Hosts to refresh\")."
    ))
}

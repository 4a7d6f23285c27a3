//! How the loop runs: how often, how it backs off after failures, and when it stops
//! (kube-runtime's `error_policy`).

use crate::error::PassError;
use gpushare_core::util::backoff_delays;
use std::time::Duration;

/// The loop's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Time between passes (a directory source also runs a pass when a file changes).
    pub interval: Duration,
    /// Run a single pass and stop: its failure is returned rather than retried.
    pub once: bool,
    /// Observe and plan, never apply: a difference is reported as drift.
    pub drift_only: bool,
}

impl Policy {
    /// A continuous, applying loop with passes `interval` apart.
    pub fn every(interval: Duration) -> Policy {
        Policy {
            interval,
            once: false,
            drift_only: false,
        }
    }

    /// Whether this controller campaigns to lead the store's reconcilers (a
    /// continuous, applying loop does; `once` and `drift_only` do not).
    pub fn leads(&self) -> bool {
        !self.once && !self.drift_only
    }

    /// Whether a failed pass stops the loop (with its error) instead of being retried.
    pub fn stops_on(&self, _e: &PassError) -> bool {
        self.once
    }

    /// When the next pass runs after `failures` failed passes in a row.
    pub fn after_failure(&self, e: &PassError, failures: u32) -> Duration {
        error_policy(e, failures, self.interval)
    }
}

/// When the next pass runs after a failed one: a transient error (store, cloud,
/// fetch, a lock held) backs off exponentially from one second up to the interval
/// (at least a minute), counted in failures in a row; a permanent one (an invalid
/// configuration, a refused commit, a plan error) waits the full interval for the
/// source to change.
pub fn error_policy(e: &PassError, failures: u32, interval: Duration) -> Duration {
    if e.is_transient() {
        backoff(failures, interval)
    } else {
        interval
    }
}

/// Delay before retrying after `failures` failed passes in a row: 1, 2, 4, ... seconds,
/// capped at the larger of the interval and 60 s (the project's one backoff,
/// [`backoff_delays`], counted in failures).
pub fn backoff(failures: u32, interval: Duration) -> Duration {
    let cap = interval.max(Duration::from_secs(60));
    // Doubling from one second passes any cap within 64 steps; it stays there.
    let nth = failures.saturating_sub(1).min(64) as usize;
    backoff_delays(Duration::from_secs(1), cap)
        .nth(nth)
        .unwrap_or(cap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpushare_config::Diagnostics;
    use gpushare_engine::reconcile::ReconcileError;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let secs: Vec<u64> = (1..=8).map(|f| backoff(f, secs(30)).as_secs()).collect();
        assert_eq!(secs, vec![1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff(200, Duration::from_secs(300)).as_secs(), 300);
    }

    /// One error policy: transient errors back off, permanent ones wait the interval;
    /// the decision comes from the typed error, not from its text.
    #[test]
    fn the_error_policy_backs_off_transient_errors_and_waits_on_permanent_ones() {
        let transient = PassError::pass(ReconcileError::Cancelled);
        assert!(transient.is_transient());
        assert_eq!(error_policy(&transient, 3, secs(300)).as_secs(), 4);
        let plan = gpushare_core::plan::PlanError::Invalid {
            addr: "service.a".parse().expect("addr"),
            message: "bad".into(),
        };
        let permanent = PassError::pass(ReconcileError::Plan(plan));
        assert!(!permanent.is_transient() && !permanent.broken());
        assert_eq!(error_policy(&permanent, 3, secs(300)).as_secs(), 300);
        let refused = PassError::Refused("commit abc is not applied".into());
        assert!(refused.broken() && !refused.is_transient());
        assert_eq!(error_policy(&refused, 1, secs(30)).as_secs(), 30);
        let config = PassError::Config(Diagnostics(vec![]));
        assert_eq!(error_policy(&config, 1, secs(30)).as_secs(), 30);
        assert_eq!(
            error_policy(&PassError::Interrupted, 2, secs(30)).as_secs(),
            2
        );
        let once = Policy {
            once: true,
            ..Policy::every(secs(30))
        };
        assert!(once.stops_on(&PassError::Interrupted) && !once.leads());
        assert!(!Policy::every(secs(30)).stops_on(&config));
    }
}

//! Test hooks: a crash-test [`Failpoint`] and a pause before each step, handed to
//! apply in [`Hooks`] (see the module docs of `apply`).

use std::time::Duration;

/// Environment variable [`Hooks::from_env`] reads for the crash-test failpoint.
pub const FAILPOINT_ENV: &str = "GPUSHARE_FAILPOINT";
/// Environment variable [`Hooks::from_env`] reads for the pause before each step.
pub const STEP_DELAY_ENV: &str = "GPUSHARE_TEST_STEP_DELAY_MS";

/// Test hooks, handed to apply explicitly (never read from the environment by the
/// engine). The default is no hook at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hooks {
    /// Simulate a crash at this point.
    pub failpoint: Option<Failpoint>,
    /// At the failpoint, `abort()` the process (a real crash) instead of returning
    /// [`ApplyError::Failpoint`](super::ApplyError::Failpoint).
    pub abort: bool,
    /// Pause before each step.
    pub step_delay: Option<Duration>,
}

impl Hooks {
    /// The hooks named by `GPUSHARE_FAILPOINT` (aborting) and
    /// `GPUSHARE_TEST_STEP_DELAY_MS`; called once by a binary at start-up. Invalid
    /// values are logged and ignored.
    pub fn from_env() -> Hooks {
        let step_delay = std::env::var(STEP_DELAY_ENV)
            .ok()
            .and_then(|v| match v.parse::<u64>() {
                Ok(ms) => Some(Duration::from_millis(ms)),
                Err(e) => {
                    tracing::warn!("ignoring {STEP_DELAY_ENV}={v:?}: {e}");
                    None
                }
            });
        Hooks {
            failpoint: Failpoint::from_env(),
            abort: true,
            step_delay,
        }
    }
}

/// Where a failpoint fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailpointWhen {
    BeforeCommit,
    AfterCommit,
    AfterStep,
}

/// A crash point: `when` at step `step` (1-based position in `plan.steps()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failpoint {
    pub when: FailpointWhen,
    pub step: usize,
}

impl Failpoint {
    /// Parse `before-commit:N`, `after-commit:N` or `after-step:N`.
    pub fn parse(s: &str) -> Result<Failpoint, String> {
        let (point, n) = s
            .split_once(':')
            .ok_or_else(|| format!("{s:?}: expected <point>:<step>"))?;
        let when = match point {
            "before-commit" => FailpointWhen::BeforeCommit,
            "after-commit" => FailpointWhen::AfterCommit,
            "after-step" => FailpointWhen::AfterStep,
            other => {
                return Err(format!(
                    "{other:?}: expected before-commit, after-commit or after-step"
                ))
            }
        };
        let step = n.parse::<usize>().map_err(|e| format!("{n:?}: {e}"))?;
        Ok(Failpoint { when, step })
    }

    /// The failpoint in `GPUSHARE_FAILPOINT`, if set and valid (an invalid one is logged and ignored).
    fn from_env() -> Option<Failpoint> {
        let v = std::env::var(FAILPOINT_ENV).ok()?;
        match Failpoint::parse(&v) {
            Ok(f) => Some(f),
            Err(e) => {
                tracing::warn!("ignoring {FAILPOINT_ENV}: {e}");
                None
            }
        }
    }
}

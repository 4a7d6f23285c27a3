//! What the controller tells its caller: each pass's configuration, the leadership,
//! drift, each finished pass (for printing and metrics) and how the loop ended. The
//! library prints nothing; the caller's [`Observer`] does.

use crate::error::PassError;
use crate::report::PassReport;
use gpushare_config::Diagnostics;
use gpushare_core::model::{Desired, Settings};
use gpushare_engine::apply::ProgressEvent;
use gpushare_engine::store::StatusRecord;
use std::time::Duration;

/// Told what the controller does. Every method has a default that ignores it.
pub trait Observer: Send + Sync {
    fn event(&self, event: Event<'_>) {
        let _ = event;
    }
    /// Progress of the apply steps of a pass.
    fn progress(&self, event: &ProgressEvent) {
        let _ = event;
    }
}

/// An observer that ignores everything (the logs still go through `tracing`).
pub struct Quiet;

impl Observer for Quiet {}

/// Something the controller did.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<'a> {
    /// The configuration this pass reconciles (and its commit, from git).
    Configuration {
        desired: &'a Desired,
        commit: Option<&'a str>,
    },
    /// Warnings of a configuration that loaded.
    Warnings(&'a Diagnostics),
    /// Another process leads the store's reconcilers; this one waits.
    Standby { leader: &'a str },
    /// This process leads the store's reconcilers now.
    Leading,
    /// This process lost the leadership and campaigns again.
    LeadershipLost,
    /// The fleet differs from the configuration: the plan's steps.
    Drift { steps: &'a [String] },
    /// A pass ended (its status record written, or tried).
    Finished(&'a Finished<'a>),
    /// The loop stops on the cancel flag.
    Interrupted,
}

/// A pass that ended, and what comes next.
#[derive(Debug)]
pub struct Finished<'a> {
    /// The pass's number in this process, from 1.
    pub pass: u64,
    pub result: &'a Result<PassReport, PassError>,
    pub record: &'a StatusRecord,
    /// How long the pass took.
    pub took: Duration,
    pub finished: jiff::Timestamp,
    /// The settings of the reconciler the pass ran with (none opened yet: `None`).
    pub settings: Option<&'a Settings>,
    /// A commit refused, and the reason's short label.
    pub refused: Option<(&'a str, &'static str)>,
    pub next: Next,
}

/// What the loop does after a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The next pass after this long (or when a configuration file changes).
    Wait(Duration),
    /// The policy runs one pass: the loop ends with this one.
    Once,
    /// The cancel flag is set: the loop ends.
    Interrupted,
}

/// How [`crate::Controller::run`] ended without an error.
#[derive(Debug)]
pub enum Stopped {
    /// The cancel flag was set.
    Interrupted,
    /// The one pass of a [`crate::Policy`] with `once`.
    Once(Box<PassReport>),
}

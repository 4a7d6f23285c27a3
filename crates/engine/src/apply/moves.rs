//! Moves, start before stop: [`MoveWait`] and the run of Move steps apply carries
//! out together (successors recorded, agents' reports awaited, old tasks removed).

use super::execute::insert_task;
use super::report::{ApplyError, ProgressEvent};
use super::{describe, store_err, ApplyContext, JournalRun};
use crate::store::Store;
use gpushare_core::model::{HostReport, TaskState};
use gpushare_core::plan::Step;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How apply carries out moves and a deployment's replacements, start before stop:
/// the successors are recorded first (their agents start them), apply waits until
/// each is healthy (its host's agent reports it running, without a restart, for the
/// service's `min_healthy_seconds`), and only then removes the old tasks (their
/// agents stop them). A successor not healthy within `timeout`, or reported failed
/// (stopped, or UNHEALTHY by its health check), does not hold the plan up for ever,
/// and never stops a healthy task: the old task keeps running beside its successor ([`ApplyReport::unconfirmed`]) and the next
/// plan decides from the agents' reports. A refresh's move (`hold`) drops the
/// successor instead, and its host's retirement waits. A move whose old task is not
/// serving (`at_once`: a silent host, an unhealthy task) stops it after the wait
/// whatever its successor does.
///
/// [`ApplyReport::unconfirmed`]: super::ApplyReport::unconfirmed
#[derive(Clone, Copy)]
pub struct MoveWait<'a> {
    /// Longest wait for a batch of successors; zero stops old tasks at once (no
    /// agent to wait for, e.g. against a cloud emulator).
    pub timeout: Duration,
    /// Pause between two reads of the agents' reports.
    pub poll: Duration,
    /// The local fleet's in-process agents, run once before each read of the reports
    /// (they report at once); `None` where agents run on their own.
    pub agents: Option<(&'a dyn crate::agents::HostAgents, &'a Arc<dyn Store>)>,
    /// A host whose last report is older than this cannot answer: its retirement does
    /// not wait for it (the planner's heartbeat timeout).
    pub silent_after: Duration,
}

impl MoveWait<'_> {
    /// No wait: old tasks stop in the same step as their successors are recorded.
    pub const NONE: MoveWait<'static> = MoveWait {
        timeout: Duration::ZERO,
        poll: Duration::from_secs(1),
        agents: None,
        silent_after: Duration::from_secs(gpushare_core::plan::DEFAULT_HEARTBEAT_TIMEOUT_SECONDS),
    };
}

/// One old task that stops once its successor is healthy: a move, or a deployment's
/// stop (whose successor a Start step recorded).
struct Takeover<'p> {
    index: usize,
    description: String,
    old: &'p str,
    /// The successor's id and host, and when it counts healthy.
    new_id: &'p str,
    new_host: &'p str,
    healthy_after: u64,
    /// A move's successor, recorded here (a stop's was recorded by its Start step).
    record: Option<&'p gpushare_core::model::Task>,
    hold: bool,
    at_once: bool,
}

impl<'p> Takeover<'p> {
    fn of(step: &'p Step, index: usize) -> Option<Takeover<'p>> {
        match step {
            Step::Move(m) => Some(Takeover {
                index,
                description: describe(step),
                old: &m.from_task,
                new_id: &m.to.id,
                new_host: &m.to.host,
                healthy_after: m.healthy_after_seconds,
                record: Some(&m.to),
                hold: m.hold,
                at_once: m.at_once,
            }),
            Step::Stop(s) => s.after_healthy.as_ref().map(|n| Takeover {
                index,
                description: describe(step),
                old: &s.task_id,
                new_id: &n.task_id,
                new_host: &n.host,
                healthy_after: n.healthy_after_seconds,
                record: None,
                hold: false,
                at_once: false,
            }),
            _ => None,
        }
    }

    fn what(&self) -> String {
        format!("task {} -> {} on {}", self.old, self.new_id, self.new_host)
    }
}

/// How a successor stands in its agent's report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Standing {
    Healthy,
    Waiting,
    Failed(String),
}

/// Where successor `id` on `host` stands in `by_host` at `now`.
fn standing(
    by_host: &BTreeMap<&str, &HostReport>,
    host: &str,
    id: &str,
    healthy_after: u64,
    now: u64,
) -> Standing {
    let Some(report) = by_host.get(host).filter(|r| r.unreadable.is_none()) else {
        return Standing::Waiting;
    };
    let detail = report.task_details.get(id);
    if let Some(why) = gpushare_core::model::unhealthy_reason(detail) {
        // Failed its health check: it never turns healthy (the next plan replaces it).
        return Standing::Failed(why);
    }
    match (report.tasks.get(id), detail) {
        (Some(TaskState::Failed | TaskState::Stopped), d) => Standing::Failed(
            d.and_then(|d| d.reason.clone())
                .unwrap_or_else(|| "reported stopped by its agent".to_string()),
        ),
        (Some(state), d) if gpushare_core::model::task_healthy(*state, d, now, healthy_after) => {
            Standing::Healthy
        }
        _ => Standing::Waiting,
    }
}

impl JournalRun<'_, '_> {
    /// Carry out `steps` (a run of moves, or of stops that wait for healthy
    /// successors; steps `offset + 1..`) start before stop: record every move's
    /// successor and commit (the journal still points before them, so a crash here
    /// redoes them, idempotently), wait for the agents to report the successors
    /// healthy ([`MoveWait`]), then remove the old tasks whose successors are, and
    /// commit with the journal.
    pub(super) async fn moves(&mut self, steps: &[Step], offset: usize) -> Result<(), ApplyError> {
        let ctx = self.ctx;
        let takeovers: Vec<Takeover<'_>> = steps
            .iter()
            .enumerate()
            .filter_map(|(n, s)| Takeover::of(s, offset + n + 1))
            .collect();
        let lb = super::targets::RunTargets::of(steps, offset);
        if takeovers.is_empty() && lb.is_empty() {
            return Ok(());
        }
        let last = offset + steps.len();
        let last_description = describe(&steps[steps.len() - 1]);
        let mut started = Vec::with_capacity(takeovers.len());
        for t in &takeovers {
            if let Some(d) = ctx.hooks.step_delay {
                tokio::time::sleep(d).await;
            }
            ctx.emit(ProgressEvent::StepStarted {
                index: t.index,
                total: self.total,
                description: t.description.clone(),
            });
            self.touched.tasks.insert(t.new_id.to_string());
            self.touched.tasks.insert(t.old.to_string());
            started.push(
                t.record
                    .is_some_and(|task| insert_task(&mut self.state, task)),
            );
        }
        if started.iter().any(|s| *s) {
            self.commit(last, last_description).await?;
        }
        // Every successor is waited for (at most the timeout); the old tasks that are
        // not serving (`at_once`) stop whatever their successors do.
        let mut waiting: Vec<super::targets::Awaited<'_>> = takeovers
            .iter()
            .filter(|t| self.state.tasks.contains_key(t.old))
            .map(|t| (t.new_id, t.new_host, t.healthy_after))
            .collect();
        // New tasks that only join a target group once healthy are waited for too.
        waiting.extend(
            lb.awaited()
                .filter(|a| !takeovers.iter().any(|t| t.new_id == a.0)),
        );
        let Some(outcome) = wait_for_successors(ctx, &waiting).await? else {
            // The successors are recorded, the old tasks kept: the journal still
            // points before these steps, so the next run carries them out again.
            return Err(ApplyError::Cancelled {
                done: self.journal.done,
                total: self.total,
            });
        };
        // Healthy new tasks join their target groups, and the old tasks they replace
        // leave theirs, before any old task stops.
        let healthy: BTreeSet<&str> = outcome
            .iter()
            .filter(|(_, s)| **s == Standing::Healthy)
            .map(|(id, _)| id.as_str())
            .collect();
        let stopping: Vec<(&str, &str)> = takeovers
            .iter()
            .filter(|t| {
                t.at_once
                    || outcome
                        .get(t.new_id)
                        .is_none_or(|s| *s == Standing::Healthy)
            })
            .map(|t| (t.old, t.new_id))
            .collect();
        let out_of_group = self.balance(&lb, &healthy, &stopping).await?;
        for (t, started) in takeovers.iter().zip(started) {
            let mut stands = outcome.get(t.new_id).cloned();
            if out_of_group.contains(t.new_id) {
                stands = Some(Standing::Waiting);
            }
            let stands = stands.as_ref();
            if t.at_once || stands.is_none_or(|s| *s == Standing::Healthy) {
                self.touched.tasks.insert(t.old.to_string());
                let stopped = self.state.tasks.remove(t.old).is_some();
                self.batch
                    .push((t.index, t.description.clone(), started || stopped));
                continue;
            }
            let what = t.what();
            let why = match stands {
                Some(Standing::Failed(reason)) => {
                    self.report
                        .failed_successors
                        .push(format!("task {} on {}: {reason}", t.new_id, t.new_host));
                    format!("its successor failed ({reason})")
                }
                _ => format!("not healthy within {} s", ctx.moves.timeout.as_secs()),
            };
            // The successors' commit above cleared what was touched: name them again.
            self.touched.tasks.insert(t.new_id.to_string());
            let dropped = t.hold && self.state.tasks.remove(t.new_id).is_some();
            let kept = if t.hold {
                "the old task is kept and the successor dropped (refresh)"
            } else {
                "the old task keeps running; the next plan decides"
            };
            tracing::warn!(old = %t.old, new = %t.new_id, host = %t.new_host, %why, "{kept}");
            ctx.emit(ProgressEvent::Note(format!(
                "Replace {what}: {why}; {kept}."
            )));
            if t.hold {
                self.report.moves_held.push(what.clone());
            }
            self.report.unconfirmed.push(what);
            self.batch
                .push((t.index, t.description.clone(), started || dropped));
        }
        self.flush().await
    }
}

/// Wait until every new task of `awaited` is healthy or failed, at most
/// `ctx.moves.timeout`; returns how each stands (`None`: cancelled).
async fn wait_for_successors(
    ctx: &ApplyContext<'_>,
    awaited: &[super::targets::Awaited<'_>],
) -> Result<Option<BTreeMap<String, Standing>>, ApplyError> {
    if awaited.is_empty() {
        return Ok(Some(BTreeMap::new()));
    }
    let mut last: BTreeMap<String, Standing> = BTreeMap::new();
    let out = wait_on_reports(ctx, |by_host, now| {
        last = awaited
            .iter()
            .map(|(id, host, after)| (id.to_string(), standing(by_host, host, id, *after, now)))
            .collect();
        let pending: BTreeSet<String> = last
            .iter()
            .filter(|(_, s)| **s == Standing::Waiting)
            .map(|(id, _)| id.clone())
            .collect();
        Watch::waiting(pending, |n| {
            format!("Waiting for {n} new task(s) to be reported healthy by their agents before stopping the tasks they replace")
        })
    })
    .await?;
    Ok(out.map(|_| last))
}

/// Stopping is as careful as starting: before a host is retired, wait until its agent
/// reports that nothing it runs is still running (the tasks' Stop steps are committed:
/// the agent stops them on its next pass), at most `ctx.moves.timeout`. A host that
/// cannot answer (no report, an unreadable one, or none for longer than
/// `ctx.moves.silent_after`) is not waited for. Returns the tasks still reported
/// running when the host is retired anyway (`None`: cancelled).
pub(super) async fn wait_for_host_stopped(
    ctx: &ApplyContext<'_>,
    host_id: &str,
) -> Result<Option<BTreeSet<String>>, ApplyError> {
    if ctx.moves.timeout.is_zero() {
        return Ok(Some(BTreeSet::new()));
    }
    let silent_after = ctx.moves.silent_after.as_secs();
    wait_on_reports(ctx, |by_host, now| {
        let Some(report) = by_host.get(host_id).filter(|r| r.unreadable.is_none()) else {
            return Watch::silent();
        };
        if now.saturating_sub(report.at) > silent_after {
            return Watch::silent();
        }
        let pending: BTreeSet<String> = report
            .tasks
            .iter()
            .filter(|(_, s)| {
                matches!(
                    s,
                    TaskState::Running | TaskState::Stopping | TaskState::Pending
                )
            })
            .map(|(id, _)| id.clone())
            .collect();
        Watch::waiting(pending, |n| {
            format!("Waiting for the agent of host {host_id} to report its {n} task(s) stopped before retiring it")
        })
    })
    .await
}

/// What a wait on the agents' reports still waits for.
struct Watch<'a> {
    /// Still waited for (empty: done, or nobody can answer).
    pending: BTreeSet<String>,
    /// The progress note shown once when the wait begins, from the count pending.
    note: Box<dyn Fn(usize) -> String + Send + 'a>,
}

impl<'a> Watch<'a> {
    fn waiting(pending: BTreeSet<String>, note: impl Fn(usize) -> String + Send + 'a) -> Watch<'a> {
        Watch {
            pending,
            note: Box::new(note),
        }
    }

    /// Nobody can answer (a silent host): nothing to wait for.
    fn silent() -> Watch<'a> {
        Watch::waiting(BTreeSet::new(), |_| String::new())
    }
}

/// Read the agents' reports every `ctx.moves.poll` (running the local fleet's
/// in-process agents first) until `watch` has nothing pending or gives up, at most
/// `ctx.moves.timeout`. Returns what was still pending (`None`: cancelled).
async fn wait_on_reports<'w>(
    ctx: &ApplyContext<'_>,
    mut watch: impl FnMut(&BTreeMap<&str, &HostReport>, u64) -> Watch<'w>,
) -> Result<Option<BTreeSet<String>>, ApplyError> {
    let wait = ctx.moves;
    let began = Instant::now();
    let mut noted = false;
    loop {
        let now = ctx.now.unwrap_or_else(gpushare_core::util::unix_now) + began.elapsed().as_secs();
        if let Some((agents, store)) = wait.agents {
            if let Err(e) = agents.round(store, now).await {
                tracing::warn!(error = %e, "the local fleet's agents failed a round while apply waited for them");
            }
        }
        let reports = ctx
            .store
            .reports()
            .await
            .map_err(|source| store_err(ctx, "reading the agents' reports", source))?;
        let by_host: BTreeMap<&str, &HostReport> =
            reports.iter().map(|r| (r.host_id.as_str(), r)).collect();
        let w = watch(&by_host, now);
        if w.pending.is_empty() || began.elapsed() >= wait.timeout {
            return Ok(Some(w.pending));
        }
        if ctx.cancel.is_some_and(|c| c.load(Ordering::SeqCst)) {
            return Ok(None);
        }
        if !noted {
            noted = true;
            let note = format!(
                "{} (at most {} s)...",
                (w.note)(w.pending.len()),
                wait.timeout.as_secs()
            );
            tracing::info!(waiting = w.pending.len(), "{note}");
            ctx.emit(ProgressEvent::Note(note));
        }
        tokio::time::sleep(wait.poll.min(wait.timeout.saturating_sub(began.elapsed()))).await;
    }
}

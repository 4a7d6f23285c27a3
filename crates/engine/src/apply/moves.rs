//! Moves, start before stop: [`MoveWait`] and the run of Move steps apply carries
//! out together (successors recorded, agents' reports awaited, old tasks removed).

use super::execute::insert_task;
use super::report::{ApplyError, ProgressEvent};
use super::{describe, store_err, ApplyContext, Run};
use crate::store::Store;
use gpushare_core::model::{HostReport, TaskState};
use gpushare_core::plan::Step;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How apply carries out moves, start before stop: the moved tasks' successors are
/// recorded first (their agents start them), apply waits until each successor is
/// reported running by its host's agent, and only then removes the old tasks (their
/// agents stop them). A successor not reported running within `timeout` does not hold
/// the plan up for ever: the old task is stopped anyway and the timeout is reported
/// ([`ApplyReport::moves_timed_out`], a progress note and a warning in the log).
///
/// [`ApplyReport::moves_timed_out`]: super::ApplyReport::moves_timed_out
#[derive(Clone, Copy)]
pub struct MoveWait<'a> {
    /// Longest wait for a batch of moves; zero stops old tasks at once (no wait).
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

impl Run<'_, '_> {
    /// Carry out `moves` (steps `offset + 1..`) start before stop: record every
    /// successor and commit (the journal still points before the moves, so a crash
    /// here redoes them, idempotently), wait for the agents to report the successors
    /// running ([`MoveWait`]), then remove the old tasks and commit with the journal.
    pub(super) async fn moves(&mut self, moves: &[Step], offset: usize) -> Result<(), ApplyError> {
        let ctx = self.ctx;
        // (step index, the move, its description): described once.
        let moves: Vec<(usize, &gpushare_core::plan::Move, String)> = moves
            .iter()
            .enumerate()
            .filter_map(|(n, s)| match s {
                Step::Move(m) => Some((offset + n + 1, m, describe(s))),
                _ => None,
            })
            .collect();
        let Some((last, _, last_description)) = moves.last() else {
            return Ok(());
        };
        let mut started = Vec::with_capacity(moves.len());
        for (index, m, description) in &moves {
            if let Some(d) = ctx.hooks.step_delay {
                tokio::time::sleep(d).await;
            }
            ctx.emit(ProgressEvent::StepStarted {
                index: *index,
                total: self.total,
                description: description.clone(),
            });
            self.touched.tasks.insert(m.to.id.clone());
            self.touched.tasks.insert(m.from_task.clone());
            started.push(insert_task(&mut self.state, &m.to));
        }
        if started.iter().any(|s| *s) {
            self.commit(*last, last_description.clone()).await?;
        }
        let waiting: Vec<&gpushare_core::plan::Move> = moves
            .iter()
            .map(|(_, m, _)| *m)
            .filter(|m| self.state.tasks.contains_key(&m.from_task))
            .collect();
        let Some(late) = wait_for_successors(ctx, &waiting).await? else {
            // The successors are recorded, the old tasks kept: the journal still
            // points before the moves, so the next run carries them out again.
            return Err(ApplyError::Cancelled {
                done: self.journal.done,
                total: self.total,
            });
        };
        for ((index, m, description), started) in moves.into_iter().zip(started) {
            if late.contains(&m.to.id) && m.hold {
                // A refresh's move: the old task keeps running where it is, and its
                // host is kept (its retirement waits until it is empty).
                let what = format!("task {} -> {} on {}", m.from_task, m.to.id, m.to.host);
                tracing::warn!(
                    from = %m.from_task,
                    to = %m.to.id,
                    host = %m.to.host,
                    timeout_s = ctx.moves.timeout.as_secs(),
                    "the moved task's successor was not reported running in time; the refresh keeps the old task"
                );
                ctx.emit(ProgressEvent::Note(format!(
                    "Move {what}: not reported running within {} s; the old task is kept and the successor dropped (refresh).",
                    ctx.moves.timeout.as_secs()
                )));
                // The successors' commit above cleared what was touched: name it again.
                self.touched.tasks.insert(m.to.id.clone());
                let dropped = self.state.tasks.remove(&m.to.id).is_some();
                self.report.moves_held.push(what);
                self.batch.push((index, description, started || dropped));
                continue;
            }
            if late.contains(&m.to.id) {
                let what = format!("task {} -> {} on {}", m.from_task, m.to.id, m.to.host);
                tracing::warn!(
                    from = %m.from_task,
                    to = %m.to.id,
                    host = %m.to.host,
                    timeout_s = ctx.moves.timeout.as_secs(),
                    "the moved task's successor was not reported running in time; stopping the old task anyway"
                );
                ctx.emit(ProgressEvent::Note(format!(
                    "Move {what}: not reported running within {} s; the old task is stopped anyway.",
                    ctx.moves.timeout.as_secs()
                )));
                self.report.moves_timed_out.push(what);
            }
            self.touched.tasks.insert(m.from_task.clone());
            let stopped = self.state.tasks.remove(&m.from_task).is_some();
            self.batch.push((index, description, started || stopped));
        }
        self.flush().await
    }
}

/// Wait until every move's successor is reported running by its host's agent, at most
/// `ctx.moves.timeout`; returns the successors' ids that were not (`None`: cancelled).
async fn wait_for_successors(
    ctx: &ApplyContext<'_>,
    moves: &[&gpushare_core::plan::Move],
) -> Result<Option<BTreeSet<String>>, ApplyError> {
    if moves.is_empty() {
        return Ok(Some(BTreeSet::new()));
    }
    wait_on_reports(ctx, |by_host, _now| {
        let running = |m: &&gpushare_core::plan::Move| {
            by_host.get(m.to.host.as_str()).is_some_and(|r| {
                r.tasks.get(&m.to.id) == Some(&gpushare_core::model::TaskState::Running)
            })
        };
        let pending: BTreeSet<String> = moves
            .iter()
            .filter(|m| !running(m))
            .map(|m| m.to.id.clone())
            .collect();
        Watch::waiting(pending, |n| {
            format!("Waiting for {n} moved task(s) to be reported running by their agents before stopping the old ones")
        })
    })
    .await
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

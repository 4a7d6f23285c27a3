//! One run through a journal's plan ([`JournalRun`]): opening it on the store's
//! state, carrying out each step or run of steps, committing batches and advancing
//! the journal, finishing.

use super::execute::execute;
use super::{
    check_cluster, describe, hit, load, moves, store_err, target_run, touch, waiting_run,
    ApplyContext, ApplyError, ApplyReport, FailpointWhen, JournalRun, ProgressEvent,
};
use crate::store::{ChangedKeys, Journal};
use gpushare_core::plan::Step;
use std::sync::atomic::Ordering;

impl JournalRun<'_, '_> {
    /// The state to execute on (the store's, checked against the plan's cluster),
    /// saying when an interrupted apply is resumed.
    pub(super) async fn open<'c, 'a>(
        ctx: &'c ApplyContext<'a>,
        journal: Journal,
        total: usize,
        report: &'c mut ApplyReport,
        resuming: bool,
    ) -> Result<JournalRun<'c, 'a>, ApplyError> {
        let mut state = load(ctx).await?;
        check_cluster(ctx, &journal.plan, &state)?;
        if state.cluster.is_empty() {
            state.cluster = journal.plan.cluster.clone();
        }
        if resuming {
            tracing::info!(done = journal.done, total, holder = %journal.holder, "resuming an interrupted apply");
            ctx.emit(ProgressEvent::Resuming {
                done: journal.done,
                total,
            });
            report.resumed_steps += total.saturating_sub(journal.done);
        }
        Ok(JournalRun {
            ctx,
            journal,
            total,
            committed_serial: state.serial,
            touched: ChangedKeys::default(),
            #[cfg(debug_assertions)]
            committed: state.clone(),
            state,
            batch: Vec::new(),
            report,
        })
    }

    /// Carry out what starts at step `i` (a run done together, a wave of launches,
    /// or one step) and say where the next begins; a cancel flushes and stops.
    pub(super) async fn advance(&mut self, steps: &[Step], i: usize) -> Result<usize, ApplyError> {
        let ctx = self.ctx;
        if ctx.cancel.is_some_and(|c| c.load(Ordering::SeqCst)) {
            self.flush().await?;
            let (done, total) = (self.journal.done, self.total);
            tracing::warn!(
                done,
                total,
                "apply cancelled; the journal is kept for the next run"
            );
            return Err(ApplyError::Cancelled { done, total });
        }
        // Runs carried out together: moves and stops waiting for healthy successors
        // (start before stop), or target steps (one call per group).
        if let Some(end) = self.together(steps, i).await? {
            return Ok(end);
        }
        // A run of launches goes to the cloud as one wave, committed at once.
        if matches!(steps[i], Step::Launch(_)) {
            let most = ctx.max_batch.max(1);
            let end = steps[i..]
                .iter()
                .take(most)
                .position(|s| !matches!(s, Step::Launch(_)))
                .map_or((i + most).min(self.total), |n| i + n);
            self.flush().await?;
            self.launches(&steps[i..end], i).await?;
            return Ok(end);
        }
        self.one_step(&steps[i], i).await?;
        Ok(i + 1)
    }

    /// Step `i` on its own, in the current batch; a retire starts a batch of its own,
    /// committed right after its cloud call (once its host's tasks have stopped).
    pub(super) async fn one_step(&mut self, step: &Step, i: usize) -> Result<(), ApplyError> {
        let ctx = self.ctx;
        let external = matches!(step, Step::Retire(_));
        if external {
            self.flush().await?;
        }
        if let Step::Retire(r) = step {
            self.await_stopped(&r.host_id).await?;
        }
        let (index, total) = (i + 1, self.total);
        let description = describe(step);
        if let Some(d) = ctx.hooks.step_delay {
            tokio::time::sleep(d).await;
        }
        ctx.emit(ProgressEvent::StepStarted {
            index,
            total,
            description: description.clone(),
        });
        touch(&mut self.touched, step, &self.state);
        let cluster = &self.journal.plan.cluster;
        let changed = match execute(ctx, cluster, step, &mut self.state, self.report).await {
            Ok(changed) => changed,
            Err(source) => {
                return Err(ApplyError::Step {
                    index,
                    total,
                    description,
                    source,
                })
            }
        };
        self.batch.push((index, description, changed));
        if external || self.batch.len() >= ctx.max_batch.max(1) {
            self.flush().await?;
        }
        Ok(())
    }

    /// Commit what is left, clear the journal and report the serial written.
    pub(super) async fn finish(mut self) -> Result<(), ApplyError> {
        self.flush().await?;
        self.ctx
            .store
            .clear_journal()
            .await
            .map_err(|source| store_err(self.ctx, "clearing the journal", source))?;
        let serial = self.committed_serial;
        self.report.serial = serial;
        self.ctx.emit(ProgressEvent::Finished {
            total: self.total,
            serial,
        });
        Ok(())
    }
}

impl JournalRun<'_, '_> {
    /// When step `i` starts a run carried out together (a waiting run, apply/moves.rs;
    /// a run of target steps, apply/targets.rs), carry it out and say where it ends.
    pub(super) async fn together(
        &mut self,
        steps: &[Step],
        i: usize,
    ) -> Result<Option<usize>, ApplyError> {
        if let Some(end) = waiting_run(steps, i, self.ctx.moves.timeout.is_zero()) {
            self.flush().await?;
            self.moves(&steps[i..end], i).await?;
            return Ok(Some(end));
        }
        if let Some(end) = target_run(steps, i) {
            self.flush().await?;
            self.targets(&steps[i..end], i).await?;
            return Ok(Some(end));
        }
        Ok(None)
    }

    /// Before retiring `host_id` (its tasks' Stop steps committed), wait for its agent
    /// to report them stopped ([`moves::wait_for_host_stopped`]); a host retired
    /// anyway is noted and reported.
    pub(super) async fn await_stopped(&mut self, host_id: &str) -> Result<(), ApplyError> {
        if !self.state.hosts.contains_key(host_id) {
            return Ok(());
        }
        let ctx = self.ctx;
        let Some(still) = moves::wait_for_host_stopped(ctx, host_id).await? else {
            return Err(ApplyError::Cancelled {
                done: self.journal.done,
                total: self.total,
            });
        };
        if !still.is_empty() {
            tracing::warn!(host = %host_id, tasks = ?still, timeout_s = ctx.moves.timeout.as_secs(), "the host's agent did not report its tasks stopped in time; retiring it anyway");
            ctx.emit(ProgressEvent::Note(format!(
                "Host {host_id}: its agent did not report {} task(s) stopped within {} s; retiring it anyway.",
                still.len(),
                ctx.moves.timeout.as_secs()
            )));
            self.report.retired_unconfirmed.push(format!(
                "{host_id} ({} task(s) still reported running)",
                still.len()
            ));
        }
        Ok(())
    }

    /// Commit the batch (when it changed anything: serial + 1), then advance the journal past it.
    pub(super) async fn flush(&mut self) -> Result<(), ApplyError> {
        let (Some(&(first, _, _)), Some(&(last, _, _))) = (self.batch.first(), self.batch.last())
        else {
            return Ok(());
        };
        let ctx = self.ctx;
        hit(ctx, FailpointWhen::BeforeCommit, first..=last)?;
        // Target steps change the load balancer, not the state: nothing to commit.
        if self.batch.iter().any(|(_, _, changed)| *changed) && !self.touched.is_empty() {
            let description = self.batch[self.batch.len() - 1].1.clone();
            self.commit(last, description).await?;
        }
        hit(ctx, FailpointWhen::AfterCommit, first..=last)?;
        self.journal.done = last;
        ctx.store
            .advance_journal(&self.journal)
            .await
            .map_err(|source| store_err(ctx, "advancing the journal", source))?;
        hit(ctx, FailpointWhen::AfterStep, first..=last)?;
        for (index, description, changed) in self.batch.drain(..) {
            if changed {
                self.report.changed_steps += 1;
            } else {
                self.report.skipped_steps += 1;
            }
            tracing::info!(index, total = self.total, changed, "{description}");
            ctx.emit(ProgressEvent::StepDone {
                index,
                total: self.total,
                description,
                changed,
            });
        }
        Ok(())
    }
}

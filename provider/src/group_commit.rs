//! Group commit of ApplyResourceChange calls.
//!
//! Terraform applies up to ten independent resources at once, and carrying out one
//! resource is a whole engine pass (observe, plan, apply the steps with their
//! journal, run the local fleet's agents, commit the state). The passes of one
//! provider process run one at a time; the changes that arrive while a pass runs
//! wait, and the next pass carries all of them out together, so a `terraform apply`
//! of many resources takes about one pass per wave of Terraform's graph instead of
//! one per resource. A pass that fails with several changes in it is run again one
//! change at a time, so an error is reported on the resource that caused it.

use crate::bridge::{run_engine, Engine, EngineWarning};
use crate::diag::Diag;
use gpushare_core::model::{Desired, StoreState};
use gpushare_core::util::lock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// One resource's change to the desired set (put or remove it).
pub(crate) type Change = Box<dyn Fn(&mut Desired) -> Result<(), Diag> + Send + Sync>;

/// The store state after the pass that carried a change out and the warnings about
/// it, or the errors that stopped it.
pub(crate) type Outcome = Result<(Arc<StoreState>, Vec<Diag>), Vec<Diag>>;

struct Job {
    change: Change,
    /// The service the change is about, to hand it the warnings about its tasks.
    service: Option<String>,
    done: oneshot::Sender<Outcome>,
}

/// The changes waiting for the engine and the engine's turn (one pass at a time).
#[derive(Default)]
pub(crate) struct GroupCommit {
    waiting: Mutex<Vec<Job>>,
    engine: Arc<tokio::sync::Mutex<()>>,
    /// Engine passes run so far.
    passes: Arc<AtomicU64>,
}

impl GroupCommit {
    /// How many engine passes this process has run.
    pub(crate) fn passes(&self) -> u64 {
        self.passes.load(Ordering::Relaxed)
    }

    /// Carries `change` out, together with the changes waiting when the engine's
    /// turn comes. `service` names the service the change is about, if any. Once
    /// queued, a change is carried out even if this call is dropped (Terraform does
    /// not cancel an ApplyResourceChange; it asks the provider to stop, which the
    /// engine sees between steps).
    pub(crate) async fn carry_out(
        &self,
        backend: Arc<Engine>,
        cancel: Arc<AtomicBool>,
        service: Option<String>,
        change: Change,
    ) -> Outcome {
        let (done, mut result) = oneshot::channel();
        lock(&self.waiting).push(Job {
            change,
            service,
            done,
        });
        let turn = self.engine.clone().lock_owned().await;
        // The pass that had the turn before took this change along.
        if let Ok(outcome) = result.try_recv() {
            return outcome;
        }
        let jobs = std::mem::take(&mut *lock(&self.waiting));
        // The pass runs to its end even if this call is dropped: the other changes
        // in it wait for its result.
        let passes = self.passes.clone();
        tokio::spawn(async move {
            let _turn = turn;
            pass(&backend, &cancel, &passes, jobs).await;
        });
        result.await.unwrap_or_else(|_| {
            Err(vec![Diag::error(
                "Apply interrupted",
                "the engine pass carrying this change out ended without a result; run apply again",
            )])
        })
    }
}

/// One engine pass over all `jobs`, or one pass per job when the joint one fails.
async fn pass(backend: &Engine, cancel: &AtomicBool, passes: &AtomicU64, jobs: Vec<Job>) {
    if jobs.len() > 1 {
        tracing::debug!(
            changes = jobs.len(),
            "one engine pass for the changes waiting"
        );
        passes.fetch_add(1, Ordering::Relaxed);
        let all = |d: &mut Desired| jobs.iter().try_for_each(|j| (j.change)(d));
        match run_engine(backend, cancel, all).await {
            Ok((state, warnings)) => return hand_out(jobs, &state, warnings),
            Err(errors) => tracing::debug!(
                changes = jobs.len(),
                ?errors,
                "a joint pass failed; carrying the changes out one at a time"
            ),
        }
    }
    for job in jobs {
        passes.fetch_add(1, Ordering::Relaxed);
        match run_engine(backend, cancel, |d: &mut Desired| (job.change)(d)).await {
            Ok((state, warnings)) => hand_out(vec![job], &state, warnings),
            // The caller may be gone (its future dropped); the change is done either way.
            Err(errors) => {
                let _ = job.done.send(Err(errors));
            }
        }
    }
}

/// Each job gets the warnings about its service; the rest go to the first job.
fn hand_out(jobs: Vec<Job>, state: &Arc<StoreState>, warnings: Vec<EngineWarning>) {
    let mut per_job: Vec<Vec<Diag>> = jobs.iter().map(|_| Vec::new()).collect();
    for w in warnings {
        let owner = jobs
            .iter()
            .position(|j| j.service.is_some() && j.service == w.service)
            .unwrap_or(0);
        per_job[owner].push(w.diag);
    }
    for (job, diags) in jobs.into_iter().zip(per_job) {
        // The caller may be gone (its future dropped); the change is done either way.
        let _ = job.done.send(Ok((state.clone(), diags)));
    }
}

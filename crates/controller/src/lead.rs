//! Leadership of the store's reconcilers: a continuous, applying controller leads
//! before it applies, waits as a standby while another leads, and stops its pass
//! after the current step when it loses the lead.

use crate::error::PassError;
use crate::events::Event;
use crate::Controller;
use gpushare_core::model::Desired;
use gpushare_engine::apply::ProgressEvent;
use gpushare_engine::reconcile::{PassOutcome, ReconcileError, Reconciler, Run};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often a wait checks the cancel flag.
const POLL: Duration = Duration::from_millis(200);

impl Controller {
    /// Returns once this process leads the store's reconcilers (at once when it
    /// already does, or when the store has no leadership); a standby waits here
    /// until the leader resigns or its lease expires. Interrupted by the cancel
    /// flag: [`PassError::Interrupted`].
    pub(crate) async fn lead_or_wait(
        &mut self,
        r: &Reconciler,
        cancel: &AtomicBool,
    ) -> Result<(), PassError> {
        if self.leader.as_ref().is_some_and(|l| l.is_leader()) {
            return Ok(());
        }
        if self.leader.take().is_some() {
            self.observer.event(Event::LeadershipLost);
            tracing::warn!("leadership lost");
        }
        let store = r.store();
        if let Ok(Some(current)) = store.leader().await {
            self.observer.event(Event::Standby { leader: &current });
        }
        let campaign = store.campaign(&self.holder, None);
        tokio::pin!(campaign);
        let won = loop {
            tokio::select! {
                won = &mut campaign => break won,
                _ = tokio::time::sleep(POLL) => {
                    if cancel.load(Ordering::SeqCst) {
                        return Err(PassError::Interrupted);
                    }
                }
            }
        };
        match won {
            Ok(Some(l)) => {
                self.observer.event(Event::Leading);
                self.leader = Some(l);
                Ok(())
            }
            // The store has no leadership: every pass takes the state lock instead.
            Ok(None) => {
                self.lead = false;
                Ok(())
            }
            Err(source) => Err(PassError::Store {
                what: "campaigning to lead the store's reconcilers",
                source,
            }),
        }
    }

    /// The engine's pass, stopped after its current step when this controller loses
    /// the leadership meanwhile (its lease expired: the store was unreachable or
    /// frozen, so another controller may lead now) or the cancel flag is set.
    /// What it leaves is in the journal, finished by the next pass as after a crash.
    pub(crate) async fn pass_while_leading(
        &self,
        r: &Reconciler,
        desired: &Desired,
        cancel: &AtomicBool,
    ) -> Result<PassOutcome, ReconcileError> {
        let observer = &self.observer;
        let progress = |e: &ProgressEvent| observer.progress(e);
        let stop = AtomicBool::new(cancel.load(Ordering::SeqCst));
        let run = Run {
            cancel: Some(&stop),
            progress: Some(&progress),
        };
        let pass = r.pass(desired, run);
        tokio::pin!(pass);
        let lost = async {
            match self.leader.as_deref() {
                Some(l) => l.lost().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(lost);
        let mut lost_seen = false;
        loop {
            tokio::select! {
                outcome = &mut pass => return outcome,
                () = &mut lost, if !lost_seen => {
                    lost_seen = true;
                    tracing::error!("leadership lost during the pass: stopping after the current step; the next leader finishes it from the journal");
                    stop.store(true, Ordering::SeqCst);
                }
                () = tokio::time::sleep(POLL) => {
                    if cancel.load(Ordering::SeqCst) {
                        stop.store(true, Ordering::SeqCst);
                    }
                }
            }
        }
    }

    /// Steps down, so a standby takes over at once (on a clean stop).
    pub(crate) async fn resign(&mut self) {
        if let Some(l) = self.leader.take() {
            if let Err(e) = l.resign().await {
                tracing::warn!(error = %e, "could not resign the leadership; it ends when its lease expires");
            }
        }
    }
}

//! Launches in waves: a run of consecutive `Launch` steps (up to
//! [`max_batch`](super::ApplyContext::max_batch)) goes to the cloud as one
//! [`launch_many`](crate::cloud::Cloud::launch_many) call and is committed as one
//! batch, so launching a fleet of thousands of hosts is not thousands of commits,
//! journal writes and (on the local fleet) fleet-file rewrites.
//!
//! Crash safety is as for one launch: the wave's launches ran before its commit, and
//! a run that resumes the journal launches them again by their launch tokens, which
//! returns the instances already launched.

use super::execute::as_planned;
use super::{describe, touch, ApplyError, JournalRun, ProgressEvent, StepError};
use crate::cloud::{CloudError, LaunchRequest};
use crate::join::JoinGrant;
use gpushare_core::model::CloudHost;
use gpushare_core::plan::{Launch, Step};

/// One step of a wave: its index and description, and the launch when the state
/// does not have its instance yet.
struct Slot<'w> {
    index: usize,
    description: String,
    launch: Option<&'w Launch>,
}

/// The first failed launch of a wave.
struct Failure<'w> {
    index: usize,
    description: String,
    launch: &'w Launch,
    error: StepError,
}

impl JournalRun<'_, '_> {
    /// Carry out `wave` (consecutive `Launch` steps; the first is step `first + 1`),
    /// then commit it. Launches done before a failed one are committed first (their steps
    /// done), then those the cloud finished after it (recorded, their steps not done); a
    /// capacity refusal of a launch the plan fixed is recorded ([`JournalRun::refused`]).
    pub(super) async fn launches(&mut self, wave: &[Step], first: usize) -> Result<(), ApplyError> {
        let cluster = self.journal.plan.cluster.clone();
        let store_id = self.state.store_id.clone();
        let (slots, grants) = self.start_wave(wave, first, &cluster).await?;
        let requests: Vec<LaunchRequest<'_>> = slots
            .iter()
            .filter_map(|slot| slot.launch)
            .zip(&grants)
            .map(|(l, grant)| LaunchRequest::of(&cluster, l, grant.as_ref(), &store_id))
            .collect();
        let results = if requests.is_empty() {
            Vec::new()
        } else {
            self.ctx.cloud.launch_many(&requests).await
        };
        let (failure, late) = self.take_results(slots, results);
        // What launched before the failure is committed first (its steps done).
        self.flush().await?;
        let Some(failure) = failure else {
            return Ok(());
        };
        if late > 0 {
            // Hosts launched after the failure are recorded, their steps not marked
            // done: a run that resumes the journal finds them launched.
            self.commit(failure.index, failure.description.clone())
                .await?;
        }
        Err(self.launch_failed(failure).await)
    }

    /// Announce each step of the wave and issue a join grant for each host still to
    /// launch.
    async fn start_wave<'w>(
        &mut self,
        wave: &'w [Step],
        first: usize,
        cluster: &str,
    ) -> Result<(Vec<Slot<'w>>, Vec<Option<JoinGrant>>), ApplyError> {
        let ctx = self.ctx;
        let mut slots = Vec::with_capacity(wave.len());
        let mut grants = Vec::new();
        for (n, step) in wave.iter().enumerate() {
            let Step::Launch(l) = step else {
                continue;
            };
            let index = first + n + 1;
            let description = describe(step);
            if let Some(d) = ctx.hooks.step_delay {
                tokio::time::sleep(d).await;
            }
            ctx.emit(ProgressEvent::StepStarted {
                index,
                total: self.total,
                description: description.clone(),
            });
            touch(&mut self.touched, step, &self.state);
            self.report.launched.push(l.host.id.clone());
            let launched = self
                .state
                .hosts
                .get(&l.host.id)
                .is_some_and(|h| h.instance_id.is_some());
            if launched {
                slots.push(Slot {
                    index,
                    description,
                    launch: None,
                });
                continue;
            }
            grants.push(self.grant(l, cluster, index, &description).await?);
            slots.push(Slot {
                index,
                description,
                launch: Some(l),
            });
        }
        Ok((slots, grants))
    }

    /// The join grant of a host to launch, when the controller hands them out.
    async fn grant(
        &self,
        l: &Launch,
        cluster: &str,
        index: usize,
        description: &str,
    ) -> Result<Option<JoinGrant>, ApplyError> {
        let ctx = self.ctx;
        let Some(join) = &ctx.join else {
            return Ok(None);
        };
        let now = ctx.now.unwrap_or_else(gpushare_core::util::unix_now);
        join.grant(
            ctx.store,
            cluster,
            &l.host.id,
            &l.host.capacity_provider,
            now,
        )
        .await
        .map(Some)
        .map_err(|source| ApplyError::Step {
            index,
            total: self.total,
            description: description.to_string(),
            source: StepError::Join(source),
        })
    }

    /// Put the wave's launched hosts in the state: those before the first failure
    /// into the batch (their steps done), those after it only into the state (counted
    /// in the second value). Returns the first failure.
    fn take_results<'w>(
        &mut self,
        slots: Vec<Slot<'w>>,
        results: Vec<Result<CloudHost, CloudError>>,
    ) -> (Option<Failure<'w>>, usize) {
        let now = self.ctx.now;
        let mut results = results.into_iter();
        let mut failure: Option<Failure<'w>> = None;
        let mut late = 0usize;
        for Slot {
            index,
            description,
            launch,
        } in slots
        {
            let Some(l) = launch else {
                self.batch.push((index, description, false));
                continue;
            };
            let got = match results.next() {
                Some(got) => got,
                // Not tried: the cloud stopped at an earlier failure.
                None if failure.is_some() => continue,
                None => Err(CloudError::InvalidRequest {
                    host_id: l.host.id.clone(),
                    message: "the cloud returned no result for this launch".into(),
                }),
            };
            let got = got
                .map_err(StepError::Cloud)
                .and_then(|got| as_planned(&l.host, got, now));
            match (got, &failure) {
                (Ok(host), None) => {
                    self.state.hosts.insert(host.id.clone(), host);
                    self.batch.push((index, description, true));
                }
                (Ok(host), Some(_)) => {
                    self.state.hosts.insert(host.id.clone(), host);
                    late += 1;
                }
                (Err(error), None) => {
                    failure = Some(Failure {
                        index,
                        description,
                        launch: l,
                        error,
                    })
                }
                (Err(e), Some(_)) => {
                    tracing::warn!(step = index, error = %e, "a launch after the wave's first failure failed too");
                }
            }
        }
        (failure, late)
    }

    /// The error of a wave's failed launch; a capacity refusal of a launch the plan
    /// fixed is recorded first.
    async fn launch_failed(&mut self, f: Failure<'_>) -> ApplyError {
        match f.error {
            StepError::Cloud(source @ CloudError::InsufficientCapacity { .. })
                if f.launch.host.image_id.is_some() =>
            {
                self.refused(&f.launch.host, f.index, f.description, source)
                    .await
            }
            source => ApplyError::Step {
                index: f.index,
                total: self.total,
                description: f.description,
                source,
            },
        }
    }
}

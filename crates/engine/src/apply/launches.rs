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
use super::{describe, touch, ApplyError, ProgressEvent, Run, StepError};
use crate::cloud::{CloudError, LaunchRequest};
use gpushare_core::plan::{Launch, Step};

impl Run<'_, '_> {
    /// Carry out `wave` (consecutive `Launch` steps; the first is step `first + 1`),
    /// then commit it. Launches done before a failed one are committed first (their steps
    /// done), then those the cloud finished after it (recorded, their steps not done); a
    /// capacity refusal of a launch the plan fixed is recorded ([`Run::refused`]).
    pub(super) async fn launches(&mut self, wave: &[Step], first: usize) -> Result<(), ApplyError> {
        let ctx = self.ctx;
        let cluster = self.journal.plan.cluster.clone();
        let store_id = self.state.store_id.clone();
        // Per step: its index, description, and the launch when the state does not
        // have its instance yet.
        let mut slots: Vec<(usize, String, Option<&Launch>)> = Vec::with_capacity(wave.len());
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
                slots.push((index, description, None));
                continue;
            }
            let grant = match &ctx.join {
                Some(j) => Some(
                    j.grant(
                        ctx.store,
                        &cluster,
                        &l.host.id,
                        &l.host.capacity_provider,
                        ctx.now.unwrap_or_else(gpushare_core::util::unix_now),
                    )
                    .await
                    .map_err(|source| ApplyError::Step {
                        index,
                        total: self.total,
                        description: description.clone(),
                        source: StepError::Join(source),
                    })?,
                ),
                None => None,
            };
            grants.push(grant);
            slots.push((index, description, Some(l)));
        }
        let requests: Vec<LaunchRequest<'_>> = slots
            .iter()
            .filter_map(|(_, _, l)| *l)
            .zip(&grants)
            .map(|(l, grant)| LaunchRequest::of(&cluster, l, grant.as_ref(), &store_id))
            .collect();
        let mut results = if requests.is_empty() {
            Vec::new()
        } else {
            ctx.cloud.launch_many(&requests).await
        }
        .into_iter();
        // The first failure; launches after it that the cloud had already started
        // and that succeeded are kept in the state all the same.
        let mut failure: Option<(usize, String, &Launch, StepError)> = None;
        let mut late = 0usize;
        for (index, description, launch) in slots {
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
                .and_then(|got| as_planned(&l.host, got, ctx.now));
            match (got, &failure) {
                (Ok(host), None) => {
                    self.state.hosts.insert(host.id.clone(), host);
                    self.batch.push((index, description, true));
                }
                (Ok(host), Some(_)) => {
                    self.state.hosts.insert(host.id.clone(), host);
                    late += 1;
                }
                (Err(e), None) => failure = Some((index, description, l, e)),
                (Err(e), Some(_)) => {
                    tracing::warn!(step = index, error = %e, "a launch after the wave's first failure failed too");
                }
            }
        }
        // What launched before the failure is committed first (its steps done).
        self.flush().await?;
        let Some((index, description, l, failed)) = failure else {
            return Ok(());
        };
        if late > 0 {
            // Hosts launched after the failure are recorded, their steps not marked
            // done: a run that resumes the journal finds them launched.
            self.commit(index, description.clone()).await?;
        }
        Err(match failed {
            StepError::Cloud(source @ CloudError::InsufficientCapacity { .. })
                if l.host.image_id.is_some() =>
            {
                self.refused(&l.host, index, description, source).await
            }
            source => ApplyError::Step {
                index,
                total: self.total,
                description,
                source,
            },
        })
    }
}

//! Service auto scaling by target tracking (docs/autoscaling.md): each service with
//! `auto_scaling` gets its count from its scaling record, changed when its metric,
//! averaged over its healthy tasks' fresh usage samples, has stayed above (below) its
//! target for the scale-out (scale-in) cooldown. Pure: the time is `Live::observed_at`.
//!
//! The count decided here replaces the service's `desired_count` for the rest of the
//! plan (the services step starts or stops tasks for it, the pools follow), and the
//! record this plan writes ([`ScalingUpdate`]) says what changed and why.

use super::Planner;
use crate::model::{
    AutoScaling, DeploymentState, Desired, ScalingChange, ScalingMetric, ScalingRecord,
    ScalingUpdate, ScrapeChange, Service,
};
use std::collections::BTreeMap;

/// The metric of a service averaged over its tasks with a sample, and how many.
#[derive(Debug, Clone, Copy)]
struct Sample {
    value: f64,
    tasks: usize,
}

impl<'a> Planner<'a> {
    /// Decide every auto-scaled service's count (writing the records that change in
    /// `out.scaling`) and return the configuration with those counts as the services'
    /// `desired_count`; `None` when every count is as declared.
    pub(super) fn auto_scaling(&mut self) -> Option<Desired> {
        let desired: &'a Desired = self.desired;
        let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
        for (sname, svc) in &desired.services {
            let Some(a) = &svc.auto_scaling else { continue };
            if a.metric().is_none() {
                continue; // refused by validation
            }
            let count = self.scale_service(sname, svc, a);
            if count != svc.desired_count {
                counts.insert(sname, count);
            }
        }
        if counts.is_empty() {
            return None;
        }
        let mut scaled = desired.clone();
        for (sname, count) in counts {
            if let Some(s) = scaled.services.get_mut(sname) {
                s.desired_count = count;
            }
        }
        Some(scaled)
    }

    /// Service `sname`'s count now: its record's (a new one from `desired_count`), held
    /// to the bounds, changed by a sustained breach of its target.
    fn scale_service(&mut self, sname: &str, svc: &Service, a: &AutoScaling) -> u32 {
        let recorded = self.live.state.scaling(sname);
        let mut rec = match recorded.filter(|r| r.desired_count == svc.desired_count) {
            Some(r) => r.clone(),
            None => ScalingRecord::start(svc.desired_count, a),
        };
        let mut change = None;
        let held = rec.count.clamp(a.min_count, a.max_count);
        if held != rec.count {
            change = Some(ScalingChange {
                from: rec.count,
                to: held,
                reason: format!(
                    "held to min_count {} .. max_count {} (auto_scaling)",
                    a.min_count, a.max_count
                ),
            });
            rec.count = held;
        }
        if let Some(sample) = self.scaling_sample(sname, svc, a) {
            let decided = self.track(sname, svc, a, &mut rec, sample);
            if let Some(c) = decided {
                rec.count = c.to;
                change = Some(match change {
                    Some(first) => ScalingChange {
                        from: first.from,
                        ..c
                    },
                    None => c,
                });
            }
        }
        if let Some(c) = &change {
            rec.reason = Some(c.reason.clone());
        }
        let scrapes = self.scrape_changes(sname, a);
        for c in &scrapes {
            if let Some(t) = self.tasks.get_mut(&c.task) {
                t.scrape = c.scrape.clone();
            }
        }
        if recorded != Some(&rec) || !scrapes.is_empty() {
            self.out.scaling.push(ScalingUpdate {
                service: sname.to_string(),
                record: rec.clone(),
                change,
                scrapes,
            });
        }
        rec.count
    }

    /// The live tasks of service `sname` whose scrape is not the one its target asks
    /// for (placed before the target was set or changed): set by the scaling step.
    fn scrape_changes(&self, sname: &str, a: &AutoScaling) -> Vec<ScrapeChange> {
        let scrape = a.scrape();
        self.live
            .state
            .tasks
            .values()
            .filter(|t| t.service == sname && t.job.is_none() && super::is_live_task(t))
            .filter(|t| t.scrape != scrape)
            .map(|t| ScrapeChange {
                task: t.id.clone(),
                scrape: scrape.clone(),
            })
            .collect()
    }

    /// Follow `sample` against the target: the breach timers of `rec` kept or reset,
    /// and the change once a breach has lasted its cooldown (the timers then start
    /// again, so the next change waits a whole cooldown more).
    fn track(
        &mut self,
        sname: &str,
        svc: &Service,
        a: &AutoScaling,
        rec: &mut ScalingRecord,
        sample: Sample,
    ) -> Option<ScalingChange> {
        let now = self.live.observed_at;
        let target = f64::from(a.target.value);
        a.metric()?;
        let ratio_count = |count: u32| {
            // ECS's target tracking: the count that brings the metric to its target.
            let exact = f64::from(count) * sample.value / target;
            let c = (exact - 1e-9).ceil().max(0.0);
            if c >= f64::from(u32::MAX) {
                u32::MAX
            } else {
                c as u32
            }
        };
        if sample.value > target {
            rec.below_since = None;
            let since = *rec.above_since.get_or_insert(now);
            let lasted = now.saturating_sub(since);
            let cooled = rec
                .last_scale_out
                .is_none_or(|t| now.saturating_sub(t) >= a.scale_out_cooldown);
            if lasted < a.scale_out_cooldown || !cooled || rec.count >= a.max_count {
                return None;
            }
            let wanted = ratio_count(rec.count).max(rec.count.saturating_add(1));
            let to = wanted.min(a.max_count);
            let capped = if wanted > to {
                format!(", capped at max_count {}", a.max_count)
            } else {
                String::new()
            };
            rec.above_since = None;
            rec.last_scale_out = Some(now);
            return Some(ScalingChange {
                from: rec.count,
                to,
                reason: breach_text(
                    &a.target.metric,
                    sample,
                    '>',
                    a.target.value,
                    lasted,
                    &capped,
                ),
            });
        }
        if sample.value < target {
            rec.above_since = None;
            let since = *rec.below_since.get_or_insert(now);
            let lasted = now.saturating_sub(since);
            let cooled = rec
                .last_scale_in
                .is_none_or(|t| now.saturating_sub(t) >= a.scale_in_cooldown);
            if lasted < a.scale_in_cooldown || !cooled || rec.count <= a.min_count {
                return None;
            }
            let wanted = ratio_count(rec.count);
            let to = wanted.max(a.min_count);
            if to >= rec.count {
                return None;
            }
            if self.deploying(sname, svc, rec.count) {
                self.out.notes.push(format!(
                    "service.{sname}: scale-in held while its deployment is in progress ({} {} < target {} for {})",
                    a.target.metric,
                    number(sample.value),
                    a.target.value,
                    duration(lasted)
                ));
                return None;
            }
            let floor = if wanted < to {
                format!(", held at min_count {}", a.min_count)
            } else {
                String::new()
            };
            rec.below_since = None;
            rec.last_scale_in = Some(now);
            return Some(ScalingChange {
                from: rec.count,
                to,
                reason: breach_text(
                    &a.target.metric,
                    sample,
                    '<',
                    a.target.value,
                    lasted,
                    &floor,
                ),
            });
        }
        rec.above_since = None;
        rec.below_since = None;
        None
    }

    /// The metric of `a` averaged over service `sname`'s healthy tasks whose agents
    /// reported a usage sample within the heartbeat timeout; `None` when none did.
    fn scaling_sample(&self, sname: &str, svc: &Service, a: &AutoScaling) -> Option<Sample> {
        let now = self.live.observed_at;
        let fresh_for = self.options.heartbeat_timeout_seconds;
        let metric = a.metric()?;
        let mut sum = 0.0;
        let mut tasks = 0usize;
        for t in self.live_tasks_of(sname) {
            let Some(usage) = self
                .live
                .task_status
                .get(&t.id)
                .and_then(|s| s.usage.as_ref())
            else {
                continue;
            };
            if usage.at.saturating_add(fresh_for) < now || !self.is_healthy(t, svc) {
                continue;
            }
            let value = match metric {
                ScalingMetric::GpuSmPercent => match usage.sm_percent {
                    Some(p) => f64::from(p),
                    None => continue,
                },
                ScalingMetric::GpuMemoryPercent => match t.gpu_memory_mib() {
                    0 => continue,
                    declared => usage.gpu_memory_mib as f64 * 100.0 / declared as f64,
                },
                ScalingMetric::Endpoint => match &usage.endpoint {
                    Some(e) if e.metric == a.target.metric && e.value.is_finite() => e.value,
                    _ => continue,
                },
            };
            sum += value;
            tasks += 1;
        }
        (tasks > 0).then(|| Sample {
            value: sum / tasks as f64,
            tasks,
        })
    }

    /// Whether service `sname` is deploying: its last deployment is IN_PROGRESS and not
    /// done at `count` tasks, or some task of it runs another revision than the one it
    /// rolls towards (a deployment this plan starts).
    fn deploying(&self, sname: &str, svc: &Service, count: u32) -> bool {
        let tasks = self.live_tasks_of(sname);
        let target = self.targets.get(&svc.task_definition).map(|(r, _)| *r);
        let outdated = tasks
            .iter()
            .any(|t| t.family != svc.task_definition || Some(t.revision) != target);
        let in_progress = self.live.state.deployment(sname).is_some_and(|d| {
            d.state == DeploymentState::InProgress
                && !d.is_done(tasks.iter().map(|t| (*t, self.is_healthy(t, svc))), count)
        });
        outdated || in_progress
    }
}

/// `gpu_sm_percent 91 > target 70 for 3 min, averaged over 6 tasks (auto_scaling)`.
fn breach_text(
    metric: &str,
    sample: Sample,
    op: char,
    target: u32,
    lasted: u64,
    bound: &str,
) -> String {
    format!(
        "{metric} {} {op} target {target} for {}, averaged over {} task(s){bound} (auto_scaling)",
        number(sample.value),
        duration(lasted),
        sample.tasks
    )
}

/// A metric value: whole when it nearly is, else with one decimal.
fn number(v: f64) -> String {
    if (v - v.round()).abs() < 0.05 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// `45 s` under two minutes, else whole minutes.
fn duration(seconds: u64) -> String {
    if seconds < 120 {
        format!("{seconds} s")
    } else {
        format!("{} min", seconds / 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_durations_read_as_the_plan_shows_them() {
        assert_eq!(number(91.0), "91");
        assert_eq!(number(90.96), "91");
        assert_eq!(number(20.5), "20.5");
        assert_eq!(duration(45), "45 s");
        assert_eq!(duration(180), "3 min");
        assert_eq!(duration(239), "3 min");
    }
}

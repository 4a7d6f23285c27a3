//! The jobs' metrics of the controller's `/metrics` (issue 51): per job, its runs
//! (indexes) by state and its failed attempts, from the progress records the store
//! keeps. Labels are bounded: the job's name (declared or one-off) and one of four
//! states.

use gpushare_core::model::{job_status, StoreState};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    job: String,
    /// succeeded, failed, running, pending.
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    job: String,
}

/// `gpushare_reconcile_job_runs` and `gpushare_reconcile_job_failed_attempts`.
pub(crate) struct JobMetrics {
    runs: Family<RunLabels, Gauge>,
    failed_attempts: Family<JobLabels, Gauge>,
}

impl JobMetrics {
    pub(crate) fn register(registry: &mut Registry) -> JobMetrics {
        let m = JobMetrics {
            runs: Family::default(),
            failed_attempts: Family::default(),
        };
        registry.register(
            "job_runs",
            "Each job's runs (indexes) by state: succeeded, failed (used up its retries), running, pending (docs/jobs.md)",
            m.runs.clone(),
        );
        registry.register(
            "job_failed_attempts",
            "Each job's failed attempts, all indexes (retried ones included)",
            m.failed_attempts.clone(),
        );
        m
    }

    /// The jobs' progress records of `state`.
    pub(crate) fn set(&self, state: &StoreState) {
        self.runs.clear();
        self.failed_attempts.clear();
        for s in job_status(state) {
            let c = s.counts;
            for (st, n) in [
                ("succeeded", c.succeeded),
                ("failed", c.failed),
                ("running", c.running),
                ("pending", c.pending),
            ] {
                self.runs
                    .get_or_create(&RunLabels {
                        job: s.name.clone(),
                        state: st.to_string(),
                    })
                    .set(i64::from(n));
            }
            self.failed_attempts
                .get_or_create(&JobLabels { job: s.name })
                .set(i64::from(c.failed_attempts));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::JobMetrics;
    use gpushare_core::model::{
        AppliedResource, AttemptOutcome, JobAttempt, JobIndex, JobRecord, ResourceAddr,
        ResourceKind, StoreState,
    };

    fn attempt(n: u32, outcome: AttemptOutcome) -> JobAttempt {
        JobAttempt {
            attempt: n,
            task_id: format!("t{n}"),
            host: "h".into(),
            outcome,
            exit_code: None,
            reason: None,
            started_at: 1,
            ended_at: Some(2),
        }
    }

    #[test]
    fn each_job_has_its_runs_by_state_and_its_failed_attempts() {
        let index = |attempts| JobIndex {
            attempts,
            ..JobIndex::default()
        };
        let rec = JobRecord {
            family: "sim".into(),
            revision: 1,
            indexes: vec![
                index(vec![
                    attempt(1, AttemptOutcome::Failed),
                    attempt(2, AttemptOutcome::Succeeded),
                ]),
                index(vec![attempt(1, AttemptOutcome::Running)]),
                index(vec![]),
            ],
            ..JobRecord::default()
        };
        let mut r = AppliedResource::new(serde_json::json!({
            "task_definition": "sim", "capacity_provider": "l4", "completions": 3,
            "max_retries": 2,
        }));
        r.job = Some(rec);
        let mut state = StoreState::default();
        state
            .resources
            .insert(ResourceAddr::new(ResourceKind::Job, "sweep"), r);
        let mut registry = prometheus_client::registry::Registry::with_prefix("gpushare_reconcile");
        let m = JobMetrics::register(&mut registry);
        m.set(&state);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        for want in [
            r#"gpushare_reconcile_job_runs{job="sweep",state="succeeded"} 1"#,
            r#"gpushare_reconcile_job_runs{job="sweep",state="running"} 1"#,
            r#"gpushare_reconcile_job_runs{job="sweep",state="pending"} 1"#,
            r#"gpushare_reconcile_job_runs{job="sweep",state="failed"} 0"#,
            r#"gpushare_reconcile_job_failed_attempts{job="sweep"} 1"#,
        ] {
            assert!(text.contains(want), "{want} not in:\n{text}");
        }
        // A job removed from the state leaves no series behind.
        m.set(&StoreState::default());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(!text.contains("sweep"), "{text}");
    }
}

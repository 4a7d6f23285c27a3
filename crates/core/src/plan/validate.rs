//! The checks a configuration passes before it is planned (instance types known,
//! launch options and pool sizes consistent, references declared, task shapes
//! valid): the steps rely on them rather than check again.

use super::{PlanError, Planner};
use crate::catalog;
use crate::model::{ResourceAddr, ResourceKind};

impl<'a> Planner<'a> {
    /// The first problem of the configuration, if any.
    pub(super) fn validate(&self) -> Result<(), PlanError> {
        let d = self.desired;
        for (name, cp) in &d.capacity_providers {
            let addr = ResourceAddr::new(ResourceKind::CapacityProvider, name);
            if cp.is_registered() {
                continue; // no launch: its checks are the loader's
            }
            check_instance_type(&addr, &cp.instance_type)?;
            for t in &cp.instance_types {
                check_instance_type(&addr, t)?;
            }
            if let Some(i) = crate::pool::launch_option_issues(
                &addr.to_string(),
                &cp.instance_type,
                &cp.instance_types,
                cp.market,
                cp.max_price.as_deref(),
            )
            .into_iter()
            .next()
            {
                return Err(PlanError::Invalid {
                    addr,
                    message: format!("{}: {}", i.attribute, i.summary),
                });
            }
            if let Some(message) = crate::pool::size_issue(cp.min_size.into(), cp.max_size.into()) {
                return Err(PlanError::Invalid { addr, message });
            }
        }
        for (name, gi) in &d.gpu_instances {
            let addr = ResourceAddr::new(ResourceKind::GpuInstance, name);
            if !d.capacity_providers.contains_key(&gi.capacity_provider) {
                return Err(PlanError::MissingReference {
                    addr,
                    attr: "capacity_provider",
                    target: ResourceAddr::new(
                        ResourceKind::CapacityProvider,
                        &gi.capacity_provider,
                    ),
                });
            }
            if let Some(t) = &gi.instance_type {
                check_instance_type(&addr, t)?;
            }
        }
        for (name, td) in &d.task_definitions {
            let addr = ResourceAddr::new(ResourceKind::TaskDefinition, name);
            if td.containers.is_empty() {
                return Err(PlanError::Invalid {
                    addr,
                    message: "a task definition needs at least one container".into(),
                });
            }
            td.shape()
                .map_err(|source| PlanError::Shape { addr, source })?;
        }
        for (name, s) in &d.services {
            let addr = ResourceAddr::new(ResourceKind::Service, name);
            if !d.task_definitions.contains_key(&s.task_definition) {
                return Err(PlanError::MissingReference {
                    addr,
                    attr: "task_definition",
                    target: ResourceAddr::new(ResourceKind::TaskDefinition, &s.task_definition),
                });
            }
            if !d.capacity_providers.contains_key(&s.capacity_provider) {
                return Err(PlanError::MissingReference {
                    addr,
                    attr: "capacity_provider",
                    target: ResourceAddr::new(ResourceKind::CapacityProvider, &s.capacity_provider),
                });
            }
            for t in &s.instance_types {
                check_instance_type(&addr, t)?;
            }
            if let Some((attr, why)) = s
                .auto_scaling
                .as_ref()
                .and_then(|a| a.problem(s.desired_count))
            {
                return Err(PlanError::Invalid {
                    addr,
                    message: format!("auto_scaling.{attr}: {why}"),
                });
            }
        }
        Ok(())
    }
}

fn check_instance_type(addr: &ResourceAddr, t: &str) -> Result<(), PlanError> {
    catalog::require(t)
        .map(|_| ())
        .map_err(|e| PlanError::UnknownInstanceType {
            addr: addr.clone(),
            instance_type: e.name,
            suggestions: e.close.into_iter().map(String::from).collect(),
        })
}

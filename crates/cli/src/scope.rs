//! Terraform's plan-scoping flags, done around the pure planner (which is not
//! changed): `-target` narrows what the planner is given, `-replace` marks hosts
//! for replacement in what it observes, `-refresh-only` compares the recorded
//! state with the observed one instead of planning.
//!
//! - `-target=ADDR`: the targeted resources and what they depend on (a service's
//!   task definition and pool, a gpu_instance's pool) are planned from the
//!   configuration; every other resource as it was last applied (from the state),
//!   or not at all when it was never applied. So the other resources' configuration
//!   changes wait, while the fleet work the planner finds necessary anyway (a sick
//!   host, a task that failed) still shows. The plan carries a note saying it is partial.
//! - `-replace=ADDR`: `host.ID`, or every host of `capacity_provider.NAME` /
//!   `gpu_instance.NAME`, is planned as if its MPS daemon were impaired: replaced
//!   start-before-stop, at most the pool's `max_draining_percent` at once.
//! - `-refresh-only`: what observing found that the state does not record yet.

use anyhow::{bail, Context};
use gpushare_core::model::{Desired, Live, MpsHealth, ResourceAddr, StoreState};
use gpushare_engine::pass::{Scope, ScopeError, Scoped};
use std::collections::BTreeSet;

/// The scoping flags as the engine's pass [`Scope`]: `-target` narrows the
/// configuration, `-replace` marks hosts in the observed world.
pub struct Flags<'a> {
    pub targets: &'a [String],
    pub replace: &'a [String],
}

impl Scope for Flags<'_> {
    fn scope(&self, desired: &Desired, live: &mut Live) -> Result<Scoped, ScopeError> {
        let (desired, note) = targeted(desired, &live.state, self.targets)?;
        let mut notes: Vec<String> = note.into_iter().collect();
        notes.extend(mark_replaced(live, self.replace)?);
        Ok(Scoped { desired, notes })
    }
}

/// The desired configuration narrowed to `targets` (see the module docs), and the
/// note the plan carries. No targets: `desired` unchanged and no note.
pub fn targeted(
    desired: &Desired,
    state: &StoreState,
    targets: &[String],
) -> anyhow::Result<(Desired, Option<String>)> {
    if targets.is_empty() {
        return Ok((desired.clone(), None));
    }
    let configured = desired.resources();
    let mut keep: BTreeSet<ResourceAddr> = BTreeSet::new();
    for t in targets {
        let addr: ResourceAddr = t
            .parse()
            .map_err(|e| anyhow::anyhow!("-target={t}: {e} (e.g. service.embedder)"))?;
        if !configured.contains_key(&addr) {
            bail!(
                "-target={t}: the configuration declares no {addr} (declared: {})",
                configured
                    .keys()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        keep.insert(addr);
    }
    // What the targets depend on.
    for addr in keep.clone() {
        keep.extend(desired.dependencies(&addr));
    }
    // The kept resources from the configuration, every other one as last applied.
    let mut out = desired.empty_like();
    for addr in configured.keys().chain(state.resources.keys()) {
        let attrs = if keep.contains(addr) {
            configured.get(addr)
        } else {
            state.resources.get(addr).map(|r| &r.attrs)
        };
        if let Some(attrs) = attrs {
            out.put(addr, attrs)
                .with_context(|| format!("reading {addr} as recorded in the state"))?;
        }
    }
    let note = format!(
        "partial plan (-target): planned from the configuration: {}; every other resource as last applied. \
         Run a plan without -target to see the rest.",
        keep.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    );
    Ok((out, Some(note)))
}

/// Mark the hosts `-replace` names as impaired in `live`; returns the plan notes.
pub fn mark_replaced(live: &mut Live, replace: &[String]) -> anyhow::Result<Vec<String>> {
    let mut notes = vec![];
    for r in replace {
        let (kind, name) = r.split_once('.').with_context(|| {
            format!("-replace={r}: expected host.ID, capacity_provider.NAME or gpu_instance.NAME")
        })?;
        let active = |h: &&gpushare_core::model::Host| h.state.is_active();
        let ids: Vec<String> = match kind {
            "host" => match live.state.hosts.get(name) {
                Some(h) if h.state.is_active() => vec![h.id.clone()],
                Some(h) => bail!("-replace={r}: host {name} is {:?}, not running", h.state),
                None => bail!(
                    "-replace={r}: the state has no host {name} (hosts: {})",
                    live.state.hosts.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            },
            "capacity_provider" => live
                .state
                .hosts
                .values()
                .filter(active)
                .filter(|h| h.capacity_provider == name)
                .map(|h| h.id.clone())
                .collect(),
            "gpu_instance" => live
                .state
                .hosts
                .values()
                .filter(active)
                .filter(|h| h.gpu_instance.as_deref() == Some(name))
                .map(|h| h.id.clone())
                .collect(),
            _ => bail!(
                "-replace={r}: gpushare replaces hosts: give host.ID, capacity_provider.NAME or gpu_instance.NAME \
                 (a service's tasks are replaced by changing its task definition)"
            ),
        };
        if ids.is_empty() {
            bail!("-replace={r}: no running host to replace");
        }
        for id in ids {
            if let Some(h) = live.state.hosts.get_mut(&id) {
                h.mps_health = MpsHealth::Impaired;
                // Replaced even in a pool with auto_repair = false (see plan/health.rs).
                h.health
                    .checks
                    .retain(|c| c.check != gpushare_core::model::CheckKind::MpsDaemon);
            }
            notes.push(format!(
                "host {id} is replaced as asked (-replace={r}): planned as if its MPS daemon were impaired"
            ));
        }
    }
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpushare_core::model::{AppliedResource, ResourceKind};

    fn desired() -> Desired {
        let text = r#"
gpushare {
  cluster = "t"
}
capacity_provider "l4" {
  instance_type = "g6.xlarge"
  max_size      = 4
}
capacity_provider "other" {
  instance_type = "g6.xlarge"
  max_size      = 2
}
task_definition "emb" {
  container "c" {
    image  = "x"
    memory = 1024
    gpu {
      mps {
        memory = 2048
      }
    }
  }
}
service "emb" {
  task_definition   = task_definition.emb
  capacity_provider = capacity_provider.l4
  desired_count     = 2
}
job "sweep" {
  task_definition   = task_definition.emb
  capacity_provider = capacity_provider.other
  completions       = 4
}
"#;
        gpushare_config::load_sources(
            &[gpushare_config::Source {
                name: "main.hcl".into(),
                text: text.into(),
            }],
            &gpushare_config::LoadOptions::default(),
        )
        .expect("loads")
    }

    #[test]
    fn target_keeps_dependencies_and_takes_the_rest_from_the_state() {
        let d = desired();
        let mut state = StoreState::default();
        let mut old_other = d.capacity_providers["other"].clone();
        old_other.max_size = 1;
        state.resources.insert(
            ResourceAddr::new(ResourceKind::CapacityProvider, "other"),
            AppliedResource::new(serde_json::to_value(&old_other).expect("json")),
        );
        let (t, note) = targeted(&d, &state, &["service.emb".into()]).expect("targets");
        assert!(note.is_some_and(|n| n.contains("partial plan")));
        assert_eq!(t.services.len(), 1);
        assert!(t.task_definitions.contains_key("emb"));
        assert_eq!(t.capacity_providers["l4"], d.capacity_providers["l4"]);
        assert_eq!(t.capacity_providers["other"].max_size, 1, "as applied");
        // Targeting only the other pool: the never-applied service and job are left out.
        let (t, _) = targeted(&d, &state, &["capacity_provider.other".into()]).expect("targets");
        assert!(t.services.is_empty() && t.task_definitions.is_empty() && t.jobs.is_empty());
        assert_eq!(t.capacity_providers["other"].max_size, 2);
        // A job not targeted is planned as applied (it was once dropped: a -target
        // plan stopped every job); targeted, it brings its task definition and pool.
        let mut old_job = d.jobs["sweep"].clone();
        old_job.completions = 2;
        state.resources.insert(
            ResourceAddr::new(ResourceKind::Job, "sweep"),
            AppliedResource::new(serde_json::to_value(&old_job).expect("json")),
        );
        let (t, _) = targeted(&d, &state, &["service.emb".into()]).expect("targets");
        assert_eq!(t.jobs["sweep"].completions, 2, "as applied");
        let (t, _) = targeted(&d, &state, &["job.sweep".into()]).expect("targets");
        assert_eq!(t.jobs["sweep"].completions, 4);
        assert!(t.task_definitions.contains_key("emb"));
        assert_eq!(t.capacity_providers["other"].max_size, 2);
        let e = targeted(&d, &state, &["service.nope".into()]).expect_err("unknown");
        assert!(e.to_string().contains("declares no service.nope"), "{e}");
        assert!(targeted(&d, &state, &["nope".into()]).is_err());
    }

    #[test]
    fn replace_refuses_what_is_not_a_host() {
        let mut live = Live::default();
        let e = mark_replaced(&mut live, &["service.emb".into()]).expect_err("a service");
        assert!(e.to_string().contains("gpushare replaces hosts"), "{e}");
        let e = mark_replaced(&mut live, &["host.h-1".into()]).expect_err("unknown host");
        assert!(e.to_string().contains("no host h-1"), "{e}");
    }
}

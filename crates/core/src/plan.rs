//! The planner: `plan(&Desired, &Live, &Options) -> Plan`, pure.
//!
//! A [`Plan`] fixes every choice (ids of new hosts and tasks, launch tokens, the
//! GPU each task goes to) so that applying it decides nothing. Its steps are
//! listed in the order `apply` carries them out; each step is idempotent so a
//! crashed apply can be resumed by running the same plan again.

use crate::model::*;
use crate::placement::Unplaced;
use serde::{Deserialize, Serialize};

/// Planner options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Options {
    /// Plan the removal of everything (`destroy`).
    pub destroy: bool,
    /// Allow moving running tasks to reduce the number of hosts (bounded by `max_moves`).
    pub consolidate: bool,
    pub max_moves: u32,
    /// Seconds after which a host with no agent report counts as silent (0 = never).
    pub heartbeat_timeout_seconds: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Create,
    Update,
    /// Delete then create (`-/+`), because an attribute forces replacement.
    Replace,
    Delete,
}

/// One resource attribute that changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttrChange {
    pub name: String,
    pub before: Option<serde_json::Value>,
    pub after: Option<serde_json::Value>,
    pub forces_replacement: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceChange {
    pub addr: ResourceAddr,
    pub action: Action,
    pub before: Option<serde_json::Value>,
    pub after: Option<serde_json::Value>,
    /// Changed attributes (all of them for create and delete).
    pub changes: Vec<AttrChange>,
}

/// A new task-definition revision to register.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Registration {
    pub family: String,
    pub revision: u32,
    pub spec: TaskDefinition,
}

/// A host to launch: the full record as it will be stored (state `Pending`, no instance id yet).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    pub host: Host,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Retire {
    pub host_id: String,
    pub reason: String,
}

/// A task to start: the full record as it will be stored (state `Pending`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Start {
    pub task: Task,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stop {
    pub task_id: String,
    pub reason: String,
}

/// A running task moved elsewhere: the new task is started before the old one stops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Move {
    pub from_task: String,
    pub to: Task,
    pub reason: String,
}

/// Cost per hour in USD.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Cost {
    pub now_per_hour: f64,
    pub after_per_hour: f64,
    /// What the same tasks would cost with one dedicated GPU each (smallest instance of each pool's GPU model).
    pub one_gpu_per_task_per_hour: f64,
    /// Hosts whose price is unknown (left out of the sums).
    pub unpriced_hosts: u32,
}

/// One step of an apply, in order. Each is idempotent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "step")]
pub enum Step {
    Register(Registration),
    PutResource { addr: ResourceAddr, attrs: serde_json::Value },
    Launch(Launch),
    Start(Start),
    /// Start `to` then stop `from_task`.
    Move(Move),
    Stop(Stop),
    Retire(Retire),
    DeleteResource { addr: ResourceAddr },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub format_version: String,
    pub cluster: String,
    /// The store serial this plan was made from; applying it against another serial is refused (stale).
    pub base_serial: u64,
    pub destroy: bool,
    pub resource_changes: Vec<ResourceChange>,
    pub registrations: Vec<Registration>,
    pub launches: Vec<Launch>,
    pub retirements: Vec<Retire>,
    pub starts: Vec<Start>,
    pub stops: Vec<Stop>,
    pub moves: Vec<Move>,
    pub unplaced: Vec<Unplaced>,
    /// Instances tagged with this cluster that the store does not know (reported, never deleted).
    pub strays: Vec<CloudHost>,
    /// The fleet as it will be after the plan (hosts and tasks), for the picture and `show`.
    pub after: StoreState,
    pub cost: Cost,
}

impl Plan {
    /// True when applying would change nothing.
    pub fn is_empty(&self) -> bool {
        self.resource_changes.is_empty()
            && self.registrations.is_empty()
            && self.launches.is_empty()
            && self.retirements.is_empty()
            && self.starts.is_empty()
            && self.stops.is_empty()
            && self.moves.is_empty()
    }

    /// The steps `apply` carries out, in order.
    pub fn steps(&self) -> Vec<Step> {
        let mut steps = Vec::new();
        steps.extend(self.registrations.iter().cloned().map(Step::Register));
        for rc in &self.resource_changes {
            if let (Action::Create | Action::Update | Action::Replace, Some(after)) = (rc.action, &rc.after) {
                steps.push(Step::PutResource { addr: rc.addr.clone(), attrs: after.clone() });
            }
        }
        steps.extend(self.launches.iter().cloned().map(Step::Launch));
        steps.extend(self.starts.iter().cloned().map(Step::Start));
        steps.extend(self.moves.iter().cloned().map(Step::Move));
        steps.extend(self.stops.iter().cloned().map(Step::Stop));
        steps.extend(self.retirements.iter().cloned().map(Step::Retire));
        for rc in &self.resource_changes {
            if rc.action == Action::Delete {
                steps.push(Step::DeleteResource { addr: rc.addr.clone() });
            }
        }
        steps
    }
}

/// Compute the plan. Pure: no I/O, no clock, deterministic for `desired.settings.seed`.
pub fn plan(desired: &Desired, live: &Live, options: &Options) -> Result<Plan, PlanError> {
    let _ = (desired, live, options);
    Err(PlanError::NotBuilt)
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("the planner is not built yet")]
    NotBuilt,
    #[error("{addr}: unknown instance type {instance_type:?}")]
    UnknownInstanceType { addr: ResourceAddr, instance_type: String },
    #[error("{addr}: {message}")]
    Invalid { addr: ResourceAddr, message: String },
}

//! gpushare's host agent: it runs the tasks the planner placed on its host and
//! reports the host (heartbeat, GPUs, MPS health, task states) to the store.
//!
//! - [`inventory`]: the GPUs (NVML, or a JSON file standing in for it);
//! - [`mps`]: the MPS daemon's health, probed as the ECS agent does;
//! - [`imds`]: EC2's notices (Spot interruption, scheduled events) from the
//!   instance metadata;
//! - [`health`]: the host's health checks (MPS daemon, GPUs, container runtime,
//!   first-boot deep diagnostic) and their verdicts;
//! - [`scrape`]: one Prometheus metric read from a task's own endpoint;
//! - [`runtime`]: docker, process and simulated runtimes behind one trait;
//! - [`agent`]: the level-triggered loop;
//! - [`link`]: where it reads its assignment and writes its report (the store, or
//!   the controller's agent API in gpushare-agent-api);
//! - [`launch`]: a placed task as a runtime starts it (revision, environment, GPUs);
//! - [`sim_fleet`]: the same loop as the local simulated fleet's in-process agents;
//! - [`args`]: `gpushare agent`'s flags and [`run_agent`].

pub mod agent;
pub mod args;
pub mod health;
pub mod imds;
pub mod inventory;
pub mod launch;
pub mod link;
pub mod mps;
pub mod runtime;
pub mod scrape;
pub mod sim_fleet;

pub use agent::{
    error_chain, launch_spec, Agent, AgentConfig, AgentError, AssignmentError, PassSummary,
    AGENT_VERSION,
};
pub use args::{run_agent, Args, RuntimeKind};
pub use health::{DeepCheck, GpuFacts, GpuScan, HealthBook};
pub use inventory::{
    FileInventory, Inventory, InventoryError, NvmlInventory, StaticInventory, StaticScan,
};
pub use link::{Link, StoreLink};
pub use mps::{ClientProbeBook, MpsGate, MpsHealthTracker, MpsProbe, ProbeError, SimMps};
pub use runtime::{
    ContainerSpec, ContainerState, DockerOptions, DockerRuntime, LaunchSpec, ObservedTask,
    ProcessRuntime, Runtime, RuntimeError, SimRuntime, TaskVerdict,
};
pub use sim_fleet::{SimFleet, SimFleetError};

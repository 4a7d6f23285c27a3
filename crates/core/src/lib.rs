//! gpushare-core: the pure heart of gpushare.
//!
//! Everything here is synchronous and free of I/O, clocks and async runtimes:
//! the resource model ([`model`]), the schemas ([`schema`]), the built-in GPU
//! catalogue ([`catalog`]), the placement engine ([`placement`]), the planner
//! ([`plan`]) and the renderers ([`render`]). Backends (stores, clouds), the
//! HCL loader, the CLI and the Terraform provider all build on these types.
//!
//! The one exception is [`util`]: the clock, the host name, a poison-ignoring lock and
//! backoff delays, shared by every crate above this one and never called by the pure
//! modules.

pub mod catalog;
pub mod envname;
pub mod facts;
pub mod host_units;
pub mod ids;
pub mod model;
pub mod placement;
pub mod plan;
pub mod pool;
pub mod render;
pub mod schema;
pub mod tfplan;
pub mod util;

// The resource model at the crate root, by name (`gpushare_core::Host` is `gpushare_core::model::Host`).
pub use model::{
    applied_pool, redact, redact_pair, reserves_compute, AgentSource, AppliedResource,
    CapacityProvider, CheckKind, CheckStatus, CloudHost, CloudKind, Container, Deployment, Desired,
    GpuHealth, GpuInfo, GpuInstance, GpuMode, GpuSpec, HealthCheck, Hold, Host, HostHealth,
    HostRegistration, HostReport, HostSource, HostState, LaunchRecord, Live, LocalAgents, Market,
    MetadataOptions, MpsHealth, MpsSettings, MpsShare, PlacementStrategy, RefreshSettings,
    ResourceAddr, ResourceKind, Revision, RootVolume, Secret, Service, SettingChange, Settings,
    ShapeError, SourceLoc, StoreState, Task, TaskDefinition, TaskGpu, TaskShape, TaskState,
    TaskStatus, DEFAULT_CAPACITY_REFUSAL_SECONDS, FORMAT_VERSION, REGISTERED_TYPE, SENSITIVE,
    SENSITIVE_CHANGED,
};

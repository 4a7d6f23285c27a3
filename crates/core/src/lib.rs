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

pub use model::*;

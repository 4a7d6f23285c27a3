//! gpushare-core: the pure heart of gpushare.
//!
//! Everything here is synchronous and free of I/O, clocks and async runtimes:
//! the resource model ([`model`]), the schemas ([`schema`]), the built-in GPU
//! catalogue ([`catalog`]), the placement engine ([`placement`]), the planner
//! ([`plan`]) and the renderers ([`render`]). Backends (stores, clouds), the
//! HCL loader, the CLI and the Terraform provider all build on these types.

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

pub use model::*;

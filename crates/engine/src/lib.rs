//! gpushare's I/O side. The pure core plans; this crate observes and applies.
//!
//! - [`store::Store`]: the system of record (file store here; etcd elsewhere).
//! - [`cloud::Cloud`]: where hosts come from (the local simulated fleet here; EC2 elsewhere).

pub mod cloud;
pub mod store;

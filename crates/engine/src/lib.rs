//! gpushare's I/O side. The pure core plans; this crate observes and applies.
//!
//! - [`store::Store`]: the system of record ([`store::FileStore`] here; etcd elsewhere).
//! - [`cloud::Cloud`]: where hosts come from ([`cloud::LocalCloud`], the simulated
//!   fleet, here; EC2 elsewhere).
//! - [`observe::observe`]: store + cloud + agent reports -> [`gpushare_core::model::Live`].
//! - [`apply::apply`]: carries out a plan step by step, journalled and resumable.

pub mod apply;
pub mod cloud;
mod fsutil;
pub mod observe;
pub mod store;

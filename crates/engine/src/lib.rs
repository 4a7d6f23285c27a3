//! gpushare's I/O side. The pure core plans; this crate observes and applies.
//!
//! - [`store::Store`]: the system of record ([`store::FileStore`] here; etcd elsewhere).
//! - [`cloud::Cloud`]: where hosts come from ([`cloud::LocalCloud`], the simulated
//!   fleet, here; EC2 elsewhere).
//! - [`observe::observe`]: store + cloud + agent reports -> [`gpushare_core::model::Live`].
//! - [`apply::apply`]: carries out a plan step by step, journalled and resumable.
//!
//! - [`reconcile::Reconciler`] and [`pass`]: one reconcile pass, `prepare` (resume,
//!   observe, gather, scope, plan) then `execute` (apply, retries, the agents' round),
//!   the way `gpushare apply`, `gpushare reconcile` and the Terraform provider all run it.
//!
//! ```no_run
//! use gpushare_core::model::Desired;
//! use gpushare_engine::cloud::LocalCloud;
//! use gpushare_engine::reconcile::{Backends, Reconciler, Run};
//! use gpushare_engine::store::{FileStore, Store};
//! use std::sync::Arc;
//!
//! # async fn run(desired: Desired) -> Result<(), Box<dyn std::error::Error>> {
//! let store = Arc::new(FileStore::open("fleet/.gpushare")?);
//! let local = Arc::new(LocalCloud::open("fleet/.gpushare")?);
//! let backends = Backends {
//!     store,
//!     cloud: local.clone(),
//!     local: Some(local),
//!     state_dir: None,
//!     // The simulated hosts' agents (the backends factory wires the host agent's
//!     // loop in here); without them tasks stay pending until real agents report.
//!     agents: None,
//!     // A host launched this recently that the cloud does not list yet is pending.
//!     consistency_window_seconds: 300,
//!     // No join tokens: launched hosts of a real cloud could not join the controller.
//!     joins: None,
//!     // No load balancers (ELBv2 target groups).
//!     balancer: None,
//! };
//! let reconciler = Reconciler::new(backends, "example");
//! // Finishes an interrupted apply, observes, plans and applies.
//! let pass = reconciler.pass(&desired, Run::default()).await?;
//! println!("{}", gpushare_core::render::summary_line(&pass.plan));
//! # Ok(())
//! # }
//! ```

pub mod agents;
pub mod apply;
pub mod balancer;
pub mod cloud;
pub mod fsutil;
pub mod heard;
pub mod join;
pub mod observe;
pub mod pass;
pub mod reconcile;
pub mod refresh_only;
pub mod state_ops;
pub mod store;

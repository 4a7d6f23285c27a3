//! gpushare's I/O side. The pure core plans; this crate observes and applies.
//!
//! - [`store::Store`]: the system of record ([`store::FileStore`] here; etcd elsewhere).
//! - [`cloud::Cloud`]: where hosts come from ([`cloud::LocalCloud`], the simulated
//!   fleet, here; EC2 elsewhere).
//! - [`observe::observe`]: store + cloud + agent reports -> [`gpushare_core::model::Live`].
//! - [`apply::apply`]: carries out a plan step by step, journalled and resumable.
//!
//! One reconcile, the way `gpushare apply` runs it: finish any interrupted apply
//! first, then observe, plan and apply.
//!
//! ```no_run
//! use gpushare_core::model::Desired;
//! use gpushare_core::plan::{plan, Options};
//! use gpushare_engine::apply::{apply, resume, ApplyContext};
//! use gpushare_engine::cloud::LocalCloud;
//! use gpushare_engine::observe::observe;
//! use gpushare_engine::store::FileStore;
//!
//! # async fn run(desired: Desired, now: u64) -> Result<(), Box<dyn std::error::Error>> {
//! let store = FileStore::open("fleet/.gpushare")?;
//! let cloud = LocalCloud::open("fleet/.gpushare")?;
//! let ctx = ApplyContext::new(&store, &cloud, &desired.capacity_providers);
//! resume(&ctx).await?; // a crashed apply is finished before anything is planned
//! cloud.run_agents(&store, now).await?; // the simulated hosts report
//! let live = observe(&store, &cloud, &desired.settings.cluster, now).await?;
//! let p = plan(&desired, &live, &Options::default())?;
//! let report = apply(&p, &ctx).await?;
//! println!("{} steps, state serial {}", report.changed_steps, report.serial);
//! # Ok(())
//! # }
//! ```

pub mod apply;
pub mod cloud;
mod fsutil;
pub mod observe;
pub mod store;

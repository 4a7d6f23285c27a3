//! The web console (issue 28): a read-only view of the fleet, its services, its
//! hosts and the next plan, served by `gpushare console` and by the controller's
//! operations listener (`gpushare reconcile --listen`). Server-rendered pages
//! (minijinja, auto-escaping on for every template), the fleet as SVG, and a little
//! plain JavaScript that follows server-sent events to refresh a page when the
//! fleet changes. Everything is embedded in the binary. docs/console.md.
//!
//! The rendering is pure and apart from serving: the [`snapshot`] the pages are made
//! from, the [`pages`], the fleet picture ([`svg`]) and the [`history`] kept between
//! observations; [`server`] keeps the snapshot fresh and serves the pages, and
//! [`listen`] serves a router under the connection limits the operations listener
//! shares. The CLI (`gpushare console`, `show --svg`, the controller's listener)
//! loads the configuration and hands the console its observations.

pub mod history;
pub mod listen;
pub mod pages;
#[cfg(test)]
mod pages_tests;
mod render;
pub mod server;
pub mod snapshot;
pub mod svg;

pub use server::{router, Auth, Console};
pub use snapshot::Snapshot;

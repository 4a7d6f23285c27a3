//! The web console (issue 28): a read-only view of the fleet, its services, its
//! hosts and the next plan, served by `gpushare console` and by the controller's
//! operations listener (`gpushare reconcile --listen`). Server-rendered pages
//! (minijinja, auto-escaping on for every template), the fleet as SVG, and a little
//! plain JavaScript that follows server-sent events to refresh a page when the
//! fleet changes. Everything is embedded in the binary. docs/console.md.

mod command;
#[cfg(test)]
mod pages_tests;
mod render;
mod server;

pub use render::svg;
use render::{history, pages};

pub(crate) use command::write_svg;
pub use command::{command, Options};
pub(crate) use command::{for_controller, ControllerSource, FeedSender};
pub use server::{router, Auth, Console};

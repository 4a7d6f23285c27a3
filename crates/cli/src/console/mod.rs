//! `gpushare console`, `show --svg` and the console of the controller's operations
//! listener: the CLI's wiring of the web console (the gpushare-console crate: pages,
//! fleet picture, server). The configuration is loaded and observed here; the
//! console renders and serves what it is handed. docs/console.md.

mod command;

pub(crate) use command::write_svg;
pub use command::{command, Options};
pub(crate) use command::{for_controller, ControllerSource, FeedSender};

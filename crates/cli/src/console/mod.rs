//! The web console (issue 28): a read-only view of the fleet, its services, its
//! hosts and the next plan, served by `gpushare console` and by the controller's
//! operations listener (`gpushare reconcile --listen`). Server-rendered pages
//! (minijinja, auto-escaping on for every template), the fleet as SVG, and a little
//! plain JavaScript that follows server-sent events to refresh a page when the
//! fleet changes. Everything is embedded in the binary. docs/console.md.

mod command;
mod pages;
mod server;
pub mod svg;

pub(crate) use command::for_controller;
pub(crate) use command::write_svg;
pub use command::{command, Options};
pub use server::{router, Auth, Console};

use std::sync::OnceLock;

/// The console's templates, loaded once. Auto-escaping is on for `.html` and
/// `.svg` templates: every value from the configuration or a report is text.
pub(crate) fn templates() -> &'static minijinja::Environment<'static> {
    static ENV: OnceLock<minijinja::Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = minijinja::Environment::new();
        env.set_auto_escape_callback(|name| {
            if name.ends_with(".html") || name.ends_with(".svg") {
                minijinja::AutoEscape::Html
            } else {
                minijinja::AutoEscape::None
            }
        });
        for (name, text) in [
            ("base.html", include_str!("templates/base.html")),
            ("fleet.html", include_str!("templates/fleet.html")),
            ("services.html", include_str!("templates/services.html")),
            ("host.html", include_str!("templates/host.html")),
            ("plan.html", include_str!("templates/plan.html")),
            ("login.html", include_str!("templates/login.html")),
            ("fleet.svg", include_str!("templates/fleet.svg")),
        ] {
            // The templates are part of the binary: a syntax error is a bug the
            // console tests catch at once.
            if let Err(e) = env.add_template(name, text) {
                tracing::error!(template = name, error = %e, "a console template does not parse");
            }
        }
        env
    })
}

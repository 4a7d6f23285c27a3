//! The console's templates, embedded in the binary.

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
            ("jobs.html", include_str!("templates/jobs.html")),
            ("job.html", include_str!("templates/job.html")),
            ("host.html", include_str!("templates/host.html")),
            ("plan.html", include_str!("templates/plan.html")),
            ("login.html", include_str!("templates/login.html")),
            ("waiting.html", include_str!("templates/waiting.html")),
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

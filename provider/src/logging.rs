//! Logging as Terraform's providers do it: the level comes from `TF_LOG_PROVIDER`,
//! else `TF_LOG` (TRACE, DEBUG, INFO, WARN, ERROR, OFF; JSON means TRACE; any other
//! value means TRACE, as in Terraform), unless `GPUSHARE_PROVIDER_LOG` gives a
//! tracing filter of its own (e.g. `gpushare_engine=debug`). Without any of them:
//! warnings. Lines go to stderr as `[LEVEL] target: message fields`, the prefix
//! go-plugin reads to give each line its level in Terraform's log.

use std::fmt;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;

/// The tracing filter for these variables' values (see the module docs).
pub fn filter_directive(
    gpushare_provider_log: Option<&str>,
    tf_log_provider: Option<&str>,
    tf_log: Option<&str>,
) -> String {
    if let Some(f) = gpushare_provider_log.filter(|f| !f.trim().is_empty()) {
        return f.to_string();
    }
    let Some(level) = tf_log_provider
        .filter(|l| !l.trim().is_empty())
        .or(tf_log.filter(|l| !l.trim().is_empty()))
    else {
        return "warn".to_string();
    };
    match level.trim().to_ascii_uppercase().as_str() {
        "DEBUG" => "debug",
        "INFO" => "info",
        "WARN" => "warn",
        "ERROR" => "error",
        "OFF" => "off",
        // TRACE, JSON, and anything Terraform does not know.
        _ => "trace",
    }
    .to_string()
}

/// `[LEVEL] target: message key=value...`, one event per line.
pub struct HclogLines;

impl<S, N> FormatEvent<S, N> for HclogLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = match *event.metadata().level() {
            Level::TRACE => "TRACE",
            Level::DEBUG => "DEBUG",
            Level::INFO => "INFO",
            Level::WARN => "WARN",
            Level::ERROR => "ERROR",
        };
        write!(writer, "[{level}] {}: ", event.metadata().target())?;
        // The spans the event is in, e.g. the RPC a served-request line belongs to.
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let ext = span.extensions();
                match ext.get::<tracing_subscriber::fmt::FormattedFields<N>>() {
                    Some(f) if !f.is_empty() => write!(writer, "{}{{{f}}}: ", span.name())?,
                    _ => write!(writer, "{}: ", span.name())?,
                }
            }
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// Install the subscriber for this process (stderr; stdout carries the handshake).
pub fn init() {
    let var = |k: &str| std::env::var(k).ok();
    let directive = filter_directive(
        var("GPUSHARE_PROVIDER_LOG").as_deref(),
        var("TF_LOG_PROVIDER").as_deref(),
        var("TF_LOG").as_deref(),
    );
    let filter = tracing_subscriber::EnvFilter::try_new(&directive)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(filter)
        .event_format(HclogLines)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn levels_follow_terraforms_variables() {
        assert_eq!(filter_directive(None, None, None), "warn");
        assert_eq!(filter_directive(None, None, Some("DEBUG")), "debug");
        assert_eq!(
            filter_directive(None, Some("info"), Some("DEBUG")),
            "info",
            "TF_LOG_PROVIDER wins"
        );
        assert_eq!(filter_directive(None, Some(""), Some("ERROR")), "error");
        assert_eq!(filter_directive(None, Some("JSON"), None), "trace");
        assert_eq!(filter_directive(None, Some("OFF"), None), "off");
        assert_eq!(filter_directive(None, Some("loud"), None), "trace");
        assert_eq!(
            filter_directive(Some("gpushare_engine=debug"), Some("OFF"), None),
            "gpushare_engine=debug"
        );
    }

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::Error::other("poisoned"))?
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_carry_the_level_prefix_go_plugin_reads() {
        let buf = Buf::default();
        let w = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_writer(move || w.clone())
            .with_ansi(false)
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter_directive(
                None,
                Some("INFO"),
                None,
            )))
            .event_format(HclogLines)
            .finish();
        tracing::subscriber::with_default(sub, || {
            tracing::info!(resource = "service.a", "planned");
            tracing::debug!("hidden at INFO");
            tracing::warn!("careful");
            let rpc = tracing::info_span!("rpc", method = "/tfplugin6.Provider/ReadResource");
            rpc.in_scope(|| tracing::info!("served"));
        });
        let text = String::from_utf8(buf.0.lock().expect("lock").clone()).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with("[INFO] ")
                && lines[0].contains("planned")
                && lines[0].contains("resource=\"service.a\""),
            "{text}"
        );
        assert!(lines[1].starts_with("[WARN] "), "{text}");
        // An event in a span names the span and its fields (which RPC a line is about).
        assert!(
            lines[2].starts_with("[INFO] ")
                && lines[2].contains("rpc{method=\"/tfplugin6.Provider/ReadResource\"}: served"),
            "{text}"
        );
    }
}

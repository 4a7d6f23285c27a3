//! Reading one Prometheus metric from a task's own endpoint (a service that auto
//! scales on it; docs/autoscaling.md): an HTTP/1.0 GET of the task's host port on
//! this host, bounded in time and size, and the metric's samples summed from the
//! Prometheus text exposition format.
//!
//! Why not a crate: the agent needs one metric's samples from one plain-HTTP
//! loopback page. `prometheus-parse` (already a test dependency of the CLI) matches
//! metric names with `\w+`, so it drops names with a colon such as vLLM's
//! `vllm:num_requests_waiting`, and its label pattern stops at the first `}` even
//! inside a quoted value; an HTTP client crate would bring TLS and pooling the agent
//! does not use here. The parser below follows the format's grammar for a sample
//! line (name, optional `{...}` with quoted, escaped label values, value, optional
//! timestamp) and is tested on vLLM-shaped pages.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The most bytes of a metrics page the agent reads (a vLLM page is a few tens of KiB).
pub const MAX_SCRAPE_BYTES: usize = 4 * 1024 * 1024;

/// How long one scrape may take, connecting included.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    #[error("no answer from {address}:{port} within {timeout:?}")]
    Timeout {
        address: String,
        port: u16,
        timeout: Duration,
    },
    #[error("cannot read http://{address}:{port}{path}")]
    Io {
        address: String,
        port: u16,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("http://{address}:{port}{path} answered {status:?}")]
    Status {
        address: String,
        port: u16,
        path: String,
        status: String,
    },
    #[error("the page at {address}:{port}{path} has no sample of {metric}")]
    NoSample {
        address: String,
        port: u16,
        path: String,
        metric: String,
    },
}

/// `metric`'s value at `http://address:port{path}`: the sum of its samples.
pub async fn scrape_metric(
    address: &str,
    port: u16,
    path: &str,
    metric: &str,
    timeout: Duration,
) -> Result<f64, ScrapeError> {
    let page = tokio::time::timeout(timeout, get(address, port, path))
        .await
        .map_err(|_| ScrapeError::Timeout {
            address: address.to_string(),
            port,
            timeout,
        })??;
    metric_value(&page, metric).ok_or_else(|| ScrapeError::NoSample {
        address: address.to_string(),
        port,
        path: path.to_string(),
        metric: metric.to_string(),
    })
}

/// The body of an HTTP/1.0 GET (the server closes the connection after it, and
/// sends no chunked encoding), at most [`MAX_SCRAPE_BYTES`].
async fn get(address: &str, port: u16, path: &str) -> Result<String, ScrapeError> {
    let io = |source| ScrapeError::Io {
        address: address.to_string(),
        port,
        path: path.to_string(),
        source,
    };
    let mut stream = tokio::net::TcpStream::connect((address, port))
        .await
        .map_err(io)?;
    let request = format!(
        "GET {path} HTTP/1.0\r\nHost: {address}:{port}\r\nAccept: text/plain\r\nUser-Agent: gpushare-agent\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.map_err(io)?;
    let mut raw = Vec::new();
    stream
        .take(MAX_SCRAPE_BYTES as u64)
        .read_to_end(&mut raw)
        .await
        .map_err(io)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(ScrapeError::Status {
            address: address.to_string(),
            port,
            path: path.to_string(),
            status: status.to_string(),
        });
    }
    Ok(body.to_string())
}

/// The sum of the samples of `name` (every label set) in a page of the Prometheus
/// text format; `None` when it has none with a finite value.
pub fn metric_value(page: &str, name: &str) -> Option<f64> {
    let mut sum = None;
    for line in page.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(v) = sample_of(line, name) {
            *sum.get_or_insert(0.0) += v;
        }
    }
    sum
}

/// The value of sample line `line` when it is a sample of `name`.
fn sample_of(line: &str, name: &str) -> Option<f64> {
    let rest = line.strip_prefix(name)?;
    let rest = match rest.chars().next()? {
        '{' => after_labels(rest)?,
        c if c.is_whitespace() => rest,
        _ => return None, // a longer name
    };
    let value = rest.split_whitespace().next()?;
    let v = match value {
        "+Inf" | "-Inf" | "NaN" => return None,
        v => v.parse::<f64>().ok()?,
    };
    v.is_finite().then_some(v)
}

/// What follows the label set `{...}` that `s` starts with (quoted values may hold
/// `}`, `,` and escaped quotes).
fn after_labels(s: &str) -> Option<&str> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in s.char_indices().skip(1) {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return Some(&s[i + 1..]),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of a vLLM server's page (v0.6), two models on one server.
    const VLLM: &str = r#"# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="bge-small"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="bge-small"} 7.0
vllm:num_requests_waiting{model_name="odd \"}, name"} 2.5 1712345678000
vllm:num_requests_waiting_total 100
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
vllm:gpu_cache_usage_perc{model_name="bge-small"} 0.42
"#;

    #[test]
    fn a_metric_with_a_colon_sums_its_label_sets_and_not_a_longer_name() {
        assert_eq!(metric_value(VLLM, "vllm:num_requests_waiting"), Some(9.5));
        assert_eq!(metric_value(VLLM, "vllm:num_requests_running"), Some(3.0));
        assert_eq!(metric_value(VLLM, "vllm:gpu_cache_usage_perc"), Some(0.42));
    }

    #[test]
    fn no_sample_comments_and_non_finite_values_give_none() {
        assert_eq!(metric_value(VLLM, "vllm:num_requests"), None);
        assert_eq!(metric_value("# TYPE waiting gauge\n", "waiting"), None);
        assert_eq!(metric_value("waiting NaN\nwaiting +Inf\n", "waiting"), None);
        assert_eq!(metric_value("waiting{a=\"unclosed 1\n", "waiting"), None);
        assert_eq!(
            metric_value("waiting 4\nwaiting{} 1e1\n", "waiting"),
            Some(14.0)
        );
    }

    /// A loopback server the test starts (no GPU needed): the page is read through
    /// HTTP; a 404 and a closed port are errors (no sample), never a panic.
    #[tokio::test]
    async fn scrapes_a_loopback_endpoint_and_reports_failures_as_errors() {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let server = tokio::spawn(async move {
            for status in ["200 OK", "404 Not Found"] {
                let (mut s, _) = listener.accept().await.expect("accept");
                let mut buf = [0u8; 1024];
                let n = s.read(&mut buf).await.expect("read");
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                assert!(req.starts_with("GET /metrics HTTP/1.0\r\n"), "{req}");
                let reply = format!("HTTP/1.0 {status}\r\nContent-Type: text/plain\r\n\r\n{VLLM}");
                s.write_all(reply.as_bytes()).await.expect("write");
            }
        });
        let waiting = "vllm:num_requests_waiting";
        let ask = |metric| scrape_metric("127.0.0.1", port, "/metrics", metric, SCRAPE_TIMEOUT);
        assert_eq!(ask(waiting).await.expect("scraped"), 9.5);
        let got = ask(waiting).await;
        assert!(matches!(got, Err(ScrapeError::Status { .. })), "{got:?}");
        server.await.expect("server");
        let got = ask("x").await;
        assert!(matches!(got, Err(ScrapeError::Io { .. })), "{got:?}");
    }
}

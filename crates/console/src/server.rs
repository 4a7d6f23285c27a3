//! Serving the console: the snapshot kept fresh by a poller, the pages, the event
//! stream, the embedded static files and the bearer token.

use crate::history::History;
use crate::pages::{self, Snapshot};
use axum::extract::{Path as UrlPath, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// The newest snapshot and its version (bumped when the pages would change).
pub struct Current {
    pub version: u64,
    pub snapshot: Option<Arc<Snapshot>>,
    /// Why the last observation failed (the pages keep the last good snapshot).
    pub error: Option<String>,
}

/// Who may read the console.
#[derive(Clone)]
pub enum Auth {
    /// Loopback: anyone who can connect.
    Open,
    /// Off loopback: a bearer token (`Authorization: Bearer TOKEN`, or the cookie
    /// the login form sets), compared by its SHA-256 digest.
    Token([u8; 32]),
}

impl Auth {
    pub fn token(token: &str) -> Auth {
        Auth::Token(Sha256::digest(token.as_bytes()).into())
    }

    fn allows(&self, presented: Option<&str>) -> bool {
        match self {
            Auth::Open => true,
            Auth::Token(want) => presented.is_some_and(|p| {
                let got: [u8; 32] = Sha256::digest(p.as_bytes()).into();
                // Digests of equal length: the comparison time says nothing of the token.
                got.iter().zip(want).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
            }),
        }
    }
}

/// The console: the snapshot the pages are rendered from, and who may read them.
pub struct Console {
    current: watch::Receiver<Arc<Current>>,
    /// Reports and passes seen, kept in memory (bounded).
    history: Arc<Mutex<History>>,
    auth: Auth,
    /// Event streams open at once (each holds a connection of the operations
    /// listener for up to its connection timeout).
    streams: Arc<tokio::sync::Semaphore>,
}

/// Event streams served at once: half the operations listener's connections, so
/// `/healthz`, `/readyz` and `/metrics` always have room (issue 46 item 9: 32 open
/// streams made the probes time out, and a liveness probe would restart the
/// controller). A browser beyond it is told to retry.
pub const MAX_EVENT_STREAMS: usize = crate::listen::MAX_CONNECTIONS / 2;

/// The cookie the login form sets (HttpOnly, SameSite=Strict).
const COOKIE: &str = "gpushare_console";

impl Console {
    /// A console whose snapshots come from `observe`, called every `every`; the
    /// version moves when a snapshot's fingerprint differs from the last one.
    /// A failed observation is shown with its error (`{:#}`: anyhow's chain).
    pub fn start<F, Fut, E>(auth: Auth, every: Duration, mut observe: F) -> Arc<Console>
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<Snapshot, E>> + Send,
        E: std::fmt::Display + Send + 'static,
    {
        let (tx, rx) = watch::channel(Arc::new(Current {
            version: 0,
            snapshot: None,
            error: None,
        }));
        let history = Arc::new(Mutex::new(History::default()));
        let kept = history.clone();
        tokio::spawn(async move {
            let mut last = String::new();
            let mut version = 0u64;
            loop {
                let next = match observe().await {
                    Ok(snap) => {
                        if let Ok(mut h) = kept.lock() {
                            h.record(&snap);
                        }
                        let key = snap.fingerprint();
                        if key != last || tx.borrow().error.is_some() || version == 0 {
                            last = key;
                            version += 1;
                            Some(Current {
                                version,
                                snapshot: Some(Arc::new(snap)),
                                error: None,
                            })
                        } else {
                            // Same pages (report ages aside): keep the newest
                            // observation without waking the browsers.
                            tx.send_modify(|c| {
                                *c = Arc::new(Current {
                                    version: c.version,
                                    snapshot: Some(Arc::new(snap)),
                                    error: None,
                                })
                            });
                            None
                        }
                    }
                    Err(e) => {
                        let why = format!("{e:#}");
                        tracing::warn!(error = %why, "the console could not observe the fleet");
                        let prev = tx.borrow().clone();
                        if prev.error.as_deref() != Some(why.as_str()) {
                            version += 1;
                            Some(Current {
                                version,
                                snapshot: prev.snapshot.clone(),
                                error: Some(why),
                            })
                        } else {
                            None
                        }
                    }
                };
                if let Some(c) = next {
                    if tx.send(Arc::new(c)).is_err() {
                        return;
                    }
                }
                tokio::time::sleep(every).await;
            }
        });
        Arc::new(Console {
            current: rx,
            history,
            auth,
            streams: Arc::new(tokio::sync::Semaphore::new(MAX_EVENT_STREAMS)),
        })
    }

    fn current(&self) -> Arc<Current> {
        self.current.borrow().clone()
    }
}

/// The console's routes: `/` (fleet), `/services`, `/jobs`, `/jobs/{name}`, `/hosts/{id}`, `/plan`,
/// `/fleet.svg`, `/v1/endpoints`, `/v1/services`, `/events` (server-sent events), `/static/*`, `/login`.
pub fn router(console: Arc<Console>) -> axum::Router {
    axum::Router::new()
        .route("/", get(fleet_page))
        .route("/services", get(services_page))
        .route("/jobs", get(jobs_page))
        .route("/jobs/{name}", get(job_page))
        .route("/hosts/{id}", get(host_page))
        .route("/plan", get(plan_page))
        .route("/fleet.svg", get(fleet_svg))
        .route("/v1/endpoints", get(endpoints_json))
        .route("/v1/endpoints/prometheus", get(endpoints_prometheus))
        .route("/v1/services", get(services_json))
        .route("/events", get(events))
        .route("/static/console.js", get(script))
        .route("/static/console.css", get(style))
        .route_layer(axum::middleware::from_fn_with_state(
            console.clone(),
            require_token,
        ))
        .route("/login", get(login_form).post(login))
        .layer(axum::middleware::from_fn(security_headers))
        .with_state(console)
}

/// The token a request presents: the bearer header, else the login cookie.
fn presented(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        return v.strip_prefix("Bearer ").map(str::trim);
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v)
}

async fn require_token(State(c): State<Arc<Console>>, req: Request, next: Next) -> Response {
    if c.auth.allows(presented(req.headers())) {
        return next.run(req).await;
    }
    let mut resp = match pages::login(false) {
        Ok(html) => Html(html).into_response(),
        Err(_) => "a bearer token is required\n".into_response(),
    };
    *resp.status_mut() = StatusCode::UNAUTHORIZED;
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"gpushare console\""),
    );
    resp
}

/// No script but the console's own, nothing from elsewhere, no framing, no sniffing.
async fn security_headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// A page rendered from the newest snapshot, or the reason there is none yet.
fn page(
    c: &Console,
    render: impl FnOnce(&Snapshot, &History, u64) -> Option<Result<String, minijinja::Error>>,
) -> Response {
    let cur = c.current();
    let Some(snap) = &cur.snapshot else {
        let why = cur
            .error
            .clone()
            .unwrap_or_else(|| "the fleet has not been observed yet".to_string());
        // A browser ignores Retry-After: the page reloads itself (meta refresh).
        return match pages::waiting(&why) {
            Ok(html) => (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "1")],
                Html(html),
            )
                .into_response(),
            Err(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "1")],
                format!("{why}\n"),
            )
                .into_response(),
        };
    };
    let rendered = match c.history.lock() {
        Ok(h) => render(snap, &h, cur.version),
        Err(_) => render(snap, &History::default(), cur.version),
    };
    match rendered {
        None => (StatusCode::NOT_FOUND, "no such host\n").into_response(),
        Some(Ok(html)) => Html(html).into_response(),
        Some(Err(e)) => {
            tracing::error!(error = %e, "rendering a console page failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "rendering the page failed (see the log)\n",
            )
                .into_response()
        }
    }
}

async fn fleet_page(State(c): State<Arc<Console>>) -> Response {
    page(&c, |s, _, v| Some(pages::fleet(s, v)))
}

async fn services_page(State(c): State<Arc<Console>>) -> Response {
    page(&c, |s, h, v| Some(pages::services(s, h, v)))
}

async fn jobs_page(State(c): State<Arc<Console>>) -> Response {
    page(&c, |s, _, v| Some(pages::jobs(s, v)))
}

async fn job_page(State(c): State<Arc<Console>>, UrlPath(name): UrlPath<String>) -> Response {
    page(&c, |s, _, v| pages::job(s, &name, v))
}

async fn host_page(State(c): State<Arc<Console>>, UrlPath(id): UrlPath<String>) -> Response {
    page(&c, |s, h, v| pages::host(s, h, &id, v))
}

async fn plan_page(State(c): State<Arc<Console>>) -> Response {
    page(&c, |s, h, v| Some(pages::plan(s, h, v)))
}

async fn fleet_svg(State(c): State<Arc<Console>>) -> Response {
    let cur = c.current();
    let Some(snap) = &cur.snapshot else {
        return (StatusCode::SERVICE_UNAVAILABLE, "not observed yet\n").into_response();
    };
    match crate::svg::fleet_svg(&snap.state, &snap.reports, snap.observed_at) {
        Ok(svg) => ([(header::CONTENT_TYPE, "image/svg+xml")], svg).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "rendering the fleet picture failed");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// `/v1/endpoints`: every task port with its address, health and readiness, as
/// `gpushare endpoints --json` prints it.
async fn endpoints_json(State(c): State<Arc<Console>>) -> Response {
    endpoints_answer(&c, |e| {
        serde_json::json!({
            "format_version": gpushare_core::model::FORMAT_VERSION,
            "endpoints": e,
        })
    })
}

/// `/v1/services`: each service's counts and its deployment (id, revision,
/// previous, state, healthy, pending and failed tasks, reason, times), as
/// `gpushare show --json` prints them under `services`.
async fn services_json(State(c): State<Arc<Console>>) -> Response {
    let cur = c.current();
    let Some(snap) = &cur.snapshot else {
        return (StatusCode::SERVICE_UNAVAILABLE, "not observed yet\n").into_response();
    };
    let v = serde_json::json!({
        "format_version": gpushare_core::model::FORMAT_VERSION,
        "observed_at": snap.observed_at,
        "services": snap.services(),
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_string_pretty(&v).unwrap_or_default(),
    )
        .into_response()
}

/// `/v1/endpoints/prometheus`: the ready endpoints in Prometheus' HTTP service
/// discovery format (`http_sd_configs`).
async fn endpoints_prometheus(State(c): State<Arc<Console>>) -> Response {
    endpoints_answer(&c, |e| gpushare_core::model::prometheus_sd(&e))
}

/// The last observation's endpoints as `shape` makes them JSON (503 before the first).
fn endpoints_answer(
    c: &Console,
    shape: impl FnOnce(Vec<gpushare_core::model::Endpoint>) -> serde_json::Value,
) -> Response {
    let cur = c.current();
    let Some(snap) = &cur.snapshot else {
        return (StatusCode::SERVICE_UNAVAILABLE, "not observed yet\n").into_response();
    };
    let v = shape(snap.endpoints());
    (
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_string_pretty(&v).unwrap_or_default(),
    )
        .into_response()
}

/// `event: fleet` with the snapshot's version, at once and on every change; the
/// browser refetches its page when the version moves.
async fn events(State(c): State<Arc<Console>>) -> axum::response::Response {
    let Ok(permit) = Arc::clone(&c.streams).try_acquire_owned() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            // Closed after the answer: a refused stream keeps no connection.
            [(header::RETRY_AFTER, "5"), (header::CONNECTION, "close")],
            "too many event streams are open; reload the page later for live updates\n",
        )
            .into_response();
    };
    let rx = c.current.clone();
    // The permit lives as long as the stream (dropped with its state).
    let stream =
        futures_util::stream::unfold((rx, true, permit), |(mut rx, first, permit)| async move {
            if !first && rx.changed().await.is_err() {
                return None;
            }
            let version = rx.borrow_and_update().version;
            let event = Event::default()
                .event("fleet")
                .retry(Duration::from_secs(1))
                .data(version.to_string());
            Some((Ok::<_, Infallible>(event), (rx, false, permit)))
        });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("static/console.js"),
    )
}

async fn style() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("static/console.css"),
    )
}

async fn login_form(State(c): State<Arc<Console>>) -> Response {
    if matches!(c.auth, Auth::Open) {
        return Redirect::to("/").into_response();
    }
    match pages::login(false) {
        Ok(html) => Html(html).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

#[derive(serde::Deserialize)]
struct LoginForm {
    token: String,
}

/// The login form: a right token sets the cookie and goes to the fleet page.
async fn login(State(c): State<Arc<Console>>, axum::Form(form): axum::Form<LoginForm>) -> Response {
    let token = form.token.trim();
    if !c.auth.allows(Some(token)) || token.contains(';') {
        let mut resp = match pages::login(true) {
            Ok(html) => Html(html).into_response(),
            Err(_) => "wrong token\n".into_response(),
        };
        *resp.status_mut() = StatusCode::UNAUTHORIZED;
        return resp;
    }
    let cookie = format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict");
    let mut resp = Redirect::to("/").into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::{router, Console};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// GET `path` from `console` served on a loopback port; the whole response.
    async fn get(console: std::sync::Arc<Console>, path: &str) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        tokio::spawn(async move { axum::serve(listener, router(console)).await });
        let mut s = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connecting");
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .expect("writing the request");
        let mut out = String::new();
        s.read_to_string(&mut out)
            .await
            .expect("reading the answer");
        out
    }

    /// Before the first observation a page is a 503 that a browser loads again by
    /// itself (a browser ignores Retry-After), so a console opened early ends on
    /// the page asked for.
    #[tokio::test]
    async fn a_page_before_the_first_observation_reloads_itself() {
        let console = Console::start(
            super::Auth::Open,
            std::time::Duration::from_secs(60),
            std::future::pending::<anyhow::Result<_>>,
        );
        let answer = get(console, "/plan").await;
        assert!(answer.starts_with("HTTP/1.0 503"), "{answer}");
        assert!(
            answer.to_ascii_lowercase().contains("retry-after: 1"),
            "{answer}"
        );
        assert!(
            answer.contains(r#"<meta http-equiv="refresh" content="1">"#),
            "{answer}"
        );
        assert!(
            answer.contains("the fleet has not been observed yet"),
            "{answer}"
        );
    }

    /// An observation that fails is on the page, escaped, and the page reloads.
    #[tokio::test]
    async fn a_failed_observation_is_shown_escaped_and_retried() {
        let console = Console::start(
            super::Auth::Open,
            std::time::Duration::from_secs(60),
            || async { Err(anyhow::anyhow!("store <unreachable> at 127.0.0.1:1")) },
        );
        let mut answer = String::new();
        for _ in 0..100 {
            answer = get(console.clone(), "/").await;
            if answer.contains("unreachable") {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(
            answer.contains("store &lt;unreachable&gt; at 127.0.0.1:1"),
            "{answer}"
        );
        assert!(answer.contains(r#"http-equiv="refresh""#), "{answer}");
    }

    /// Issue 44: the fleet page says when the disruption budget holds a pool's silent
    /// hosts back (from the plan the next pass would carry out).
    #[tokio::test]
    async fn the_fleet_page_says_when_replacements_are_held() {
        let console = Console::start(
            super::Auth::Open,
            std::time::Duration::from_secs(60),
            || async {
                let plan = gpushare_core::plan::Plan {
                    held_pools: vec![gpushare_core::plan::HeldPool {
                        pool: "l4".into(),
                        silent: 3,
                        impaired: 0,
                        size: 4,
                        threshold_percent: 50,
                    }],
                    ..Default::default()
                };
                Ok::<_, anyhow::Error>(super::Snapshot {
                    state: Default::default(),
                    observed_at: 0,
                    reports: vec![],
                    desired: None,
                    plan: Ok(plan),
                    commit: None,
                    status: None,
                    target_groups: Default::default(),
                    by_host: Default::default(),
                })
            },
        );
        let mut answer = String::new();
        for _ in 0..100 {
            answer = get(console.clone(), "/").await;
            if answer.starts_with("HTTP/1.0 200") {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(
            answer.contains("Replacements held: capacity_provider.l4: 3 of its 4 hosts"),
            "{answer}"
        );
    }
}

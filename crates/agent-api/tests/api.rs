//! The agent API in one process, over real TLS on loopback against a real file
//! store: hosts join with tokens and read only their own assignment; a host's
//! certificate cannot read another host's assignment nor write its report; expired,
//! used-up, foreign and wrongly scoped tokens are refused; an agent pinning another
//! CA refuses the server; an unchanged view is not sent again on reconnect; a
//! removed host is told so; a revoked certificate is told its host is removed and
//! refused, and the host joins again.

use gpushare_testkit_engine::agent as support;

use gpushare_agent_api::client::{self, HostIdentity, ServerAddr};
use gpushare_agent_api::pb;
use gpushare_agent_api::tokens::{self, TokenScope};
use gpushare_agent_api::{Running, ServerOptions};
use gpushare_core::model::{HostReport, MpsHealth, StoreState};
use gpushare_engine::store::{FileStore, Store};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::*;

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn fleet() -> StoreState {
    let mut rev = revision("worker", 1, vec![container("main", &["sleep", "600"])]);
    rev.spec.containers[0].secret_env.insert(
        "API_KEY".into(),
        gpushare_core::model::Secret::new("secret-of-a"),
    );
    let other = revision("other", 1, vec![container("main", &["sleep", "600"])]);
    let mut st = state(
        "c1",
        &["h-a", "h-b"],
        vec![rev.clone(), other.clone()],
        vec![
            task("t-a", &rev, "h-a", vec![]),
            task("t-b", &other, "h-b", vec![]),
        ],
    );
    st.serial = 0;
    st
}

struct Api {
    _dir: tempfile::TempDir,
    store: Arc<FileStore>,
    running: Option<Running>,
    server: ServerAddr,
    ca_hash: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Api {
    async fn start() -> Api {
        Api::start_with(gpushare_agent_api::pki::HOST_CERT_LIFETIME).await
    }

    /// A server whose host certificates live `lifetime`.
    async fn start_with(lifetime: Duration) -> Api {
        Api::start_opts(|o| o.host_cert_lifetime = lifetime).await
    }

    /// A server whose options `edit` changes.
    async fn start_opts(edit: impl FnOnce(&mut ServerOptions)) -> Api {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(FileStore::open(dir.path().join("store")).expect("store"));
        let mut st = fleet();
        st.serial = 1;
        store.commit(0, &st).await.expect("commit");
        let mut opts = ServerOptions::new("127.0.0.1:0".parse().expect("addr"));
        opts.poll = Duration::from_millis(50);
        edit(&mut opts);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let running = gpushare_agent_api::start(store.clone(), "c1", opts, async move {
            let _ = rx.await;
        })
        .await
        .expect("serve");
        let server =
            ServerAddr::parse(&format!("https://localhost:{}", running.addr.port())).expect("url");
        Api {
            ca_hash: running.ca_hash.clone(),
            _dir: dir,
            store,
            running: Some(running),
            server,
            stop: Some(tx),
        }
    }

    async fn token(&self, pool: Option<&str>, host: Option<&str>, ttl: u64, uses: u32) -> String {
        let scope = TokenScope {
            pool: pool.map(str::to_string),
            host_id: host.map(str::to_string),
            ttl: Duration::from_secs(ttl),
            uses,
        };
        tokens::create(self.store.as_ref(), &scope, now())
            .await
            .expect("token")
            .0
    }

    async fn join(
        &self,
        token: &str,
        host: Option<&str>,
    ) -> Result<HostIdentity, client::ClientError> {
        tokio::time::timeout(
            Duration::from_secs(20),
            client::join(&self.server, &self.ca_hash, token, host, None),
        )
        .await
        .expect("join answered")
    }

    /// Record capacity provider `pool` in the state as a registered pool.
    async fn registered_pool(&self, pool: &str) {
        use gpushare_core::model::AppliedResource;
        use gpushare_core::{ResourceAddr, ResourceKind};
        let mut st = self.store.load().await.expect("load");
        st.resources.insert(
            ResourceAddr::new(ResourceKind::CapacityProvider, pool),
            AppliedResource::new(serde_json::json!({ "hosts": "registered" })),
        );
        let serial = st.serial;
        st.serial += 1;
        self.store.commit(serial, &st).await.expect("commit");
    }

    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(r) = self.running.take() {
            r.wait().await.expect("server stopped cleanly");
        }
    }
}

type Client = pb::agent_api_client::AgentApiClient<tonic::transport::Channel>;

/// `host`'s assignment stream, resuming at `resume`.
async fn watch(
    c: &mut Client,
    host: &str,
    resume: u64,
) -> Result<tonic::Streaming<pb::Assignment>, tonic::Status> {
    Ok(c.watch_assignment(pb::WatchRequest {
        host_id: host.into(),
        resume_version: resume,
    })
    .await?
    .into_inner())
}

async fn first_view(
    c: &mut Client,
    host: &str,
    resume: u64,
) -> Result<Option<pb::Assignment>, tonic::Status> {
    let mut s = watch(c, host, resume).await?;
    match tokio::time::timeout(Duration::from_millis(700), s.message()).await {
        Ok(m) => m,
        Err(_) => Ok(None),
    }
}

fn report(host: &str) -> pb::ReportRequest {
    let r = HostReport {
        logs: None,
        address: None,
        host_id: host.into(),
        at: now(),
        mps_health: MpsHealth::Disabled,
        health: Default::default(),
        gpus: vec![],
        tasks: Default::default(),
        agent_version: "test".into(),
        mps_error: None,
        mps_failures: 0,
        task_details: Default::default(),
        agent_at: None,
        unreadable: None,
    };
    pb::ReportRequest {
        report_json: serde_json::to_vec(&r).expect("json"),
    }
}

#[tokio::test]
async fn hosts_join_and_see_only_their_own_assignment_and_report_only_as_themselves() {
    let api = Api::start().await;
    let pool_token = api.token(Some("pool"), None, 3600, 2).await;
    let a = api.join(&pool_token, Some("h-a")).await.expect("a joins");
    let bound = api.token(None, Some("h-b"), 3600, 1).await;
    let b = api
        .join(&bound, None)
        .await
        .expect("b joins by its token's host id");
    assert_eq!((a.host_id.as_str(), b.host_id.as_str()), ("h-a", "h-b"));
    assert_eq!(a.cluster, "c1");
    assert!(a.not_after > now() + 3600 && a.not_after <= now() + 24 * 3600 + 60);

    let mut ca = a.client(&api.server).expect("client");
    let view = first_view(&mut ca, "h-a", 0)
        .await
        .expect("watch")
        .expect("a view");
    assert!(!view.host_removed);
    let st: StoreState = serde_json::from_slice(&view.view_json).expect("view json");
    assert_eq!(st.tasks.keys().collect::<Vec<_>>(), vec!["t-a"]);
    assert_eq!(st.hosts.keys().collect::<Vec<_>>(), vec!["h-a"]);
    assert_eq!(st.revisions.keys().collect::<Vec<_>>(), vec!["worker"]);
    // Its own secret travels; nothing of h-b's.
    let text = String::from_utf8_lossy(&view.view_json);
    assert!(text.contains("secret-of-a") && !text.contains("\"t-b\"") && !text.contains("h-b"));

    // Resuming at the version it has: nothing is sent until the view changes.
    assert!(first_view(&mut ca, "h-a", view.version)
        .await
        .expect("watch")
        .is_none());

    // h-a's certificate cannot read h-b's assignment nor write h-b's report.
    let e = first_view(&mut ca, "h-b", 0).await.expect_err("refused");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    let e = ca.report(report("h-b")).await.expect_err("refused");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(api.store.reports().await.expect("reports").is_empty());
    ca.report(report("h-a")).await.expect("own report");
    let reports = api.store.reports().await.expect("reports");
    assert_eq!(
        reports
            .iter()
            .map(|r| r.host_id.as_str())
            .collect::<Vec<_>>(),
        vec!["h-a"]
    );

    // A change of h-a's tasks reaches h-a's stream, and nothing reaches h-b's.
    let mut cb = b.client(&api.server).expect("client");
    let b_view = first_view(&mut cb, "h-b", 0)
        .await
        .expect("watch")
        .expect("b view");
    let mut b_stream = watch(&mut cb, "h-b", b_view.version).await.expect("watch");
    let mut a_stream = watch(&mut ca, "h-a", view.version).await.expect("watch");
    let mut st = api.store.load().await.expect("load");
    let mut moved = st.tasks["t-a"].clone();
    moved.id = "t-a2".into();
    st.tasks.insert(moved.id.clone(), moved);
    st.serial += 1;
    api.store.commit(st.serial - 1, &st).await.expect("commit");
    let a_next = tokio::time::timeout(Duration::from_secs(5), a_stream.message())
        .await
        .expect("h-a told in time")
        .expect("stream")
        .expect("a message");
    let a_state: StoreState = serde_json::from_slice(&a_next.view_json).expect("view json");
    assert_eq!(a_state.tasks.len(), 2);
    assert!(
        tokio::time::timeout(Duration::from_millis(700), b_stream.message())
            .await
            .is_err(),
        "h-b was sent a view that did not change"
    );
    let view = a_next;

    // The host leaves the fleet: its stream says so.
    let mut s = watch(&mut ca, "h-a", view.version).await.expect("watch");
    let mut st = api.store.load().await.expect("load");
    st.hosts.remove("h-a");
    st.tasks.retain(|_, t| t.host != "h-a");
    st.serial += 1;
    api.store.commit(st.serial - 1, &st).await.expect("commit");
    let m = tokio::time::timeout(Duration::from_secs(5), s.message())
        .await
        .expect("told in time")
        .expect("stream")
        .expect("a message");
    assert!(m.host_removed);
    // And it may not renew its certificate any more.
    let (_, csr_der) = gpushare_agent_api::pki::new_key_and_csr().expect("csr");
    let e = ca
        .renew(pb::RenewRequest { csr_der })
        .await
        .expect_err("refused");
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    api.stop().await;
}

#[tokio::test]
async fn bad_tokens_and_a_wrong_ca_are_refused() {
    let api = Api::start().await;
    let denied = |r: Result<HostIdentity, client::ClientError>| match r {
        Err(client::ClientError::JoinRefused { source, .. }) => {
            assert_eq!(source.code(), tonic::Code::PermissionDenied);
            source.message().to_string()
        }
        Err(e) => panic!("expected a refusal, got {e}"),
        Ok(_) => panic!("expected a refusal, got an identity"),
    };
    // Expired.
    let expired = api.token(Some("pool"), None, 0, 1).await;
    assert!(denied(api.join(&expired, Some("h-a")).await).contains("expired"));
    // Used up.
    let once = api.token(Some("pool"), None, 3600, 1).await;
    api.join(&once, Some("h-b")).await.expect("first use");
    let msg = denied(api.join(&once, Some("h-a")).await);
    assert!(msg.contains("used up") && !msg.contains(once.split('.').nth(1).expect("secret")));
    // Another cluster's token (made in another store) is unknown here.
    let other = Api::start().await;
    let foreign = other.token(Some("pool"), None, 3600, 1).await;
    assert!(denied(api.join(&foreign, Some("h-a")).await).contains("unknown"));
    // A right id with a wrong secret is unknown too.
    let good = api.token(Some("pool"), None, 3600, 1).await;
    let forged = format!("{}.{}", good.split('.').next().expect("id"), "0".repeat(32));
    assert!(denied(api.join(&forged, Some("h-a")).await).contains("unknown"));
    // Scope: a host of another pool, a host not in the fleet, another host's token.
    let wrong_pool = api.token(Some("gpu-big"), None, 3600, 1).await;
    assert!(denied(api.join(&wrong_pool, Some("h-a")).await).contains("pool"));
    assert!(denied(api.join(&good, Some("h-zz")).await).contains("not in the fleet"));
    let bound = api.token(None, Some("h-b"), 3600, 1).await;
    assert!(denied(api.join(&bound, Some("h-a")).await).contains("h-b"));
    // The refusals spent nothing: the good token still works.
    api.join(&good, Some("h-a")).await.expect("good token");
    // Revoked.
    let revoked = api.token(Some("pool"), None, 3600, 1).await;
    let id = revoked.split('.').next().expect("id").to_string();
    tokens::revoke(api.store.as_ref(), &id)
        .await
        .expect("revoke");
    assert!(denied(api.join(&revoked, Some("h-a")).await).contains("unknown"));
    // The token record keeps hashes only.
    let record = api
        .store
        .get_record(tokens::TOKENS_RECORD)
        .await
        .expect("get")
        .expect("record");
    assert!(!record
        .value
        .contains(good.split('.').nth(1).expect("secret")));

    // An agent pinning another CA does not talk to this server.
    // (A token for the id: h-a is bound to the key it joined with above.)
    let fresh = api.token(None, Some("h-a"), 3600, 1).await;
    let r = tokio::time::timeout(
        Duration::from_secs(3),
        client::join(&api.server, &other.ca_hash, &fresh, Some("h-a"), None),
    )
    .await;
    assert!(
        matches!(r, Err(_) | Ok(Err(_))),
        "joined through an unpinned CA"
    );
    // ... and the token was not spent on it.
    api.join(&fresh, Some("h-a"))
        .await
        .expect("fresh token unspent");
    other.stop().await;
    api.stop().await;
}

#[tokio::test]
async fn an_agent_link_follows_its_view_and_renews_its_certificate_before_expiry() {
    use gpushare_agent::Link;
    let api = Api::start_with(Duration::from_secs(6)).await;
    let token = api.token(None, Some("h-a"), 3600, 1).await;
    let id = api.join(&token, None).await.expect("join");
    let first_expiry = id.not_after;
    let dir = tempfile::tempdir().expect("tempdir");
    id.save(dir.path()).expect("save");
    let link =
        client::ApiLink::start(api.server.clone(), id, dir.path().to_path_buf()).expect("link");
    let mut latest = link.latest();
    tokio::time::timeout(
        Duration::from_secs(10),
        latest.wait_for(|l| l.view.is_some()),
    )
    .await
    .expect("a view in time")
    .expect("view");
    let view = link.assignment().await.expect("assignment");
    assert_eq!(view.tasks.keys().collect::<Vec<_>>(), vec!["t-a"]);
    // Two thirds of 6 s later the link has a new certificate, kept in its directory,
    // and goes on reporting with it after the first one expired.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let renewed = loop {
        let kept = HostIdentity::load(dir.path()).expect("load").expect("kept");
        if kept.not_after > first_expiry {
            break kept;
        }
        assert!(tokio::time::Instant::now() < deadline, "not renewed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(renewed.host_id, "h-a");
    tokio::time::sleep(Duration::from_secs(first_expiry.saturating_sub(now()) + 1)).await;
    link.put_report(&serde_json::from_slice(&report("h-a").report_json).expect("report"))
        .await
        .expect("report with the renewed certificate");
    drop(link);
    api.stop().await;
}

#[tokio::test]
async fn a_revoked_certificate_is_told_its_host_is_removed_and_refused_and_a_new_join_works() {
    use gpushare_agent_api::revoke;
    let api = Api::start().await;
    let a = api
        .join(&api.token(None, Some("h-a"), 3600, 1).await, None)
        .await
        .expect("a joins");
    let b = api
        .join(&api.token(None, Some("h-b"), 3600, 1).await, None)
        .await
        .expect("b joins");
    let mut ca = a.client(&api.server).expect("client");
    let mut cb = b.client(&api.server).expect("client");
    let a_view = first_view(&mut ca, "h-a", 0)
        .await
        .expect("watch")
        .expect("a view");
    let b_view = first_view(&mut cb, "h-b", 0)
        .await
        .expect("watch")
        .expect("b view");
    let mut a_stream = watch(&mut ca, "h-a", a_view.version).await.expect("watch");
    let mut b_stream = watch(&mut cb, "h-b", b_view.version).await.expect("watch");
    let dir = tempfile::tempdir().expect("tempdir");
    let link = client::ApiLink::start(api.server.clone(), a.clone(), dir.path().to_path_buf())
        .expect("link");

    revoke::revoke(api.store.as_ref(), "h-a")
        .await
        .expect("revoke");
    // The open stream is told the host is removed (its agent stops every task), then
    // refused; so is a new one, and the agent's link says removed.
    let m = tokio::time::timeout(Duration::from_secs(5), a_stream.message())
        .await
        .expect("told in time")
        .expect("a message")
        .expect("an assignment");
    assert!(m.host_removed);
    let e = tokio::time::timeout(Duration::from_secs(5), a_stream.message())
        .await
        .expect("refused in time")
        .expect_err("refused");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("revoked"), "{e:?}");
    let mut again = watch(&mut ca, "h-a", 0).await.expect("a stream");
    assert!(
        again
            .message()
            .await
            .expect("message")
            .expect("removed")
            .host_removed
    );
    let mut latest = link.latest();
    tokio::time::timeout(Duration::from_secs(10), latest.wait_for(|l| l.removed))
        .await
        .expect("the link is told in time")
        .expect("link open");
    // Its reports and renewals are refused.
    let e = ca.report(report("h-a")).await.expect_err("refused");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    let (_, csr_der) = gpushare_agent_api::pki::new_key_and_csr().expect("csr");
    let e = ca
        .renew(pb::RenewRequest { csr_der })
        .await
        .expect_err("refused");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    // Another host is not touched: nothing on its stream, its report taken.
    assert!(
        tokio::time::timeout(Duration::from_millis(700), b_stream.message())
            .await
            .is_err(),
        "h-b was sent something"
    );
    cb.report(report("h-b")).await.expect("h-b reports");

    // The host joins again with a new token: the fresh certificate works.
    let a2 = api
        .join(&api.token(None, Some("h-a"), 3600, 1).await, None)
        .await
        .expect("a joins again");
    let mut ca2 = a2.client(&api.server).expect("client");
    let view = first_view(&mut ca2, "h-a", 0)
        .await
        .expect("watch")
        .expect("a view");
    assert!(!view.host_removed);
    let st: StoreState = serde_json::from_slice(&view.view_json).expect("view json");
    assert_eq!(st.tasks.keys().collect::<Vec<_>>(), vec!["t-a"]);
    ca2.report(report("h-a"))
        .await
        .expect("report with the new certificate");
    drop(link);
    api.stop().await;
}

/// A report as `host` would send it, changed by `edit`.
fn report_with(host: &str, edit: impl FnOnce(&mut HostReport)) -> pb::ReportRequest {
    let mut r: HostReport =
        serde_json::from_slice(&report(host).report_json).expect("the test report parses");
    edit(&mut r);
    pb::ReportRequest {
        report_json: serde_json::to_vec(&r).expect("json"),
    }
}

/// Issue 46 items 4, 5 and 11, regression: a report's time was trusted (a host
/// reporting ten years ahead stayed "heard from" for ever), its GPU list was
/// unbounded, and its texts were stored raw (escape sequences and forged lines in
/// `show` and `plan`). Reports are stamped with the controller's time, bounded, and
/// their texts cleaned.
#[tokio::test]
async fn reports_are_stamped_by_the_controller_bounded_and_cleaned() {
    let api = Api::start().await;
    let token = api.token(Some("pool"), None, 3600, 1).await;
    let a = api.join(&token, Some("h-a")).await.expect("a joins");
    let mut ca = a.client(&api.server).expect("client");
    let ahead = now() + 10 * 365 * 24 * 3600;
    ca.report(report_with("h-a", |r| {
        r.at = ahead;
        r.mps_error = Some("down\u{1b}[31m\nhost h-b joined".into());
    }))
    .await
    .expect("report");
    let stored = api.store.reports().await.expect("reports");
    let r = &stored[0];
    assert!(
        r.at <= now() + 5,
        "stamped with the controller's time: {}",
        r.at
    );
    assert_eq!(
        r.agent_at,
        Some(ahead),
        "the agent's own time kept as information"
    );
    let e = r.mps_error.as_deref().expect("error kept");
    assert!(!e.chars().any(char::is_control), "{e:?}");
    assert!(e.starts_with("down"), "{e:?}");

    let many = (0..65)
        .map(|i| gpushare_core::model::GpuInfo {
            index: i,
            model: "l4".into(),
            memory_mib: 22888,
            uuid: None,
            compute_mode: None,
        })
        .collect();
    let e = ca
        .report(report_with("h-a", |r| r.gpus = many))
        .await
        .expect_err("65 GPUs refused");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    api.stop().await;
}

/// Issue 46 item 3, regression: the Join request's host id was used as given (ids
/// like `../../../tmp/x` or with a newline joined, were recorded and signed into a
/// certificate). It is checked by the identifier rule before a token's use is spent.
#[tokio::test]
async fn a_join_under_a_bad_host_id_is_refused_before_the_token_is_spent() {
    let api = Api::start().await;
    let token = api.token(Some("pool"), None, 3600, 1).await;
    for bad in ["../../../tmp/x", "a/b", "h\nx\u{1b}[2J"] {
        let Err(e) = api.join(&token, Some(bad)).await else {
            panic!("{bad:?} joined");
        };
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            text.push_str(&format!(": {s}"));
            source = s.source();
        }
        assert!(text.contains("not a valid identifier"), "{bad:?}: {text}");
    }
    // The single-use token was not spent by the refusals.
    api.join(&token, Some("h-a")).await.expect("joins");
    api.stop().await;
}

/// Issue 46 item 1, regression: the listener accepted without a cap, so idle
/// connections (no certificate needed to connect) exhausted the controller's file
/// descriptors. Connections without a host certificate hold a bounded number of
/// slots (per address too); beyond them a connection is closed at once, and a join
/// works again as soon as slots are free.
#[tokio::test]
async fn idle_connections_without_a_certificate_cannot_exhaust_the_server() {
    use std::io::Read;
    let api = Api::start_opts(|o| {
        o.limits.anonymous = 8;
        o.limits.anonymous_per_address = 4;
    })
    .await;
    let port = api.running.as_ref().expect("running").addr.port();
    let held = tokio::task::spawn_blocking(move || {
        let conns: Vec<std::net::TcpStream> = (0..40)
            .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect"))
            .collect();
        let mut closed = 0;
        for mut c in conns.iter() {
            c.set_read_timeout(Some(Duration::from_millis(500)))
                .expect("timeout");
            let mut b = [0u8; 1];
            if matches!(c.read(&mut b), Ok(0)) {
                closed += 1;
            }
        }
        (closed, conns)
    })
    .await
    .expect("connections");
    assert_eq!(
        held.0, 36,
        "4 held from one address, the rest closed at once"
    );
    drop(held.1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let token = api.token(Some("pool"), None, 3600, 1).await;
    api.join(&token, Some("h-a"))
        .await
        .expect("a join works once the idle connections are gone");
    api.stop().await;
}

/// Issue 46 item 7, regression: the revocation's cut-off was the clock of the machine
/// running `host revoke`, certificates' issue times the controller's; with the CLI's
/// clock 120 s behind, a stolen certificate renewed in those 120 s survived the
/// revocation, and renewed itself for ever. No clock decides now: a revocation
/// advances the host's generation, every certificate carries the generation it was
/// issued under, and one of an older generation is refused (renewal included).
#[tokio::test]
async fn a_revocation_holds_whatever_the_clocks_say() {
    use gpushare_agent_api::revoke;
    let api = Api::start().await;
    let a = api
        .join(&api.token(None, Some("h-a"), 3600, 1).await, None)
        .await
        .expect("a joins");
    assert_eq!(a.generation(), Some(0));
    // The thief renews the stolen certificate right before the revocation (within
    // the same second, as within any clock skew).
    let stolen = a.renewed(&api.server).await.expect("renewed");
    assert_eq!(stolen.generation(), Some(0));
    assert_eq!(
        revoke::revoke(api.store.as_ref(), "h-a")
            .await
            .expect("revoke"),
        1
    );
    // Reports check the revocations the server follows (read every 500 ms).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for id in [&a, &stolen] {
        let e = id
            .renewed(&api.server)
            .await
            .err()
            .expect("renewal refused");
        assert!(format!("{e:?}").contains("revoked"), "{e:?}");
        let mut c = id.client(&api.server).expect("client");
        let e = c.report(report("h-a")).await.expect_err("report refused");
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
        assert!(e.message().contains("revoked"), "{e:?}");
    }
    // A new join gets the new generation, and it works.
    let back = api
        .join(&api.token(None, Some("h-a"), 3600, 1).await, None)
        .await
        .expect("joins again");
    assert_eq!(back.generation(), Some(1));
    let mut c = back.client(&api.server).expect("client");
    c.report(report("h-a")).await.expect("report taken");
    let renewed = back.renewed(&api.server).await.expect("renewal works");
    assert_eq!(renewed.generation(), Some(1));
    api.stop().await;
}

/// Issue 46 item 13, regression: after `host revoke`, a registered host joining again
/// with a fresh key and a token minted for its id (as `host revoke` says to) was
/// refused "already registered by another machine". Such a token re-binds the host
/// to the new key, and the old key's certificates are refused from then on; a pool
/// token still cannot take the id over.
#[tokio::test]
async fn a_revoked_registered_host_joins_again_with_a_token_for_its_id() {
    use gpushare_agent_api::revoke;
    let api = Api::start().await;
    api.registered_pool("lab").await;
    let pool_token = api.token(Some("lab"), None, 3600, 5).await;
    let first = api
        .join(&pool_token, Some("gpu-1"))
        .await
        .expect("gpu-1 registers");
    let registered_key = |st: &StoreState| {
        st.hosts["gpu-1"]
            .registration
            .as_ref()
            .expect("registered")
            .key_sha256
            .clone()
    };
    let key1 = registered_key(&api.store.load().await.expect("load"));
    revoke::revoke(api.store.as_ref(), "gpu-1")
        .await
        .expect("revoke");
    // Another machine with a pool token cannot take the id.
    let e = api
        .join(&pool_token, Some("gpu-1"))
        .await
        .err()
        .expect("a pool token does not re-key");
    assert!(format!("{e:?}").contains("already registered"), "{e:?}");
    // The operator's token for the id does.
    let back = api
        .join(&api.token(None, Some("gpu-1"), 3600, 1).await, None)
        .await
        .expect("joins again with a token for its id");
    let key2 = registered_key(&api.store.load().await.expect("load"));
    assert_ne!(key1, key2, "bound to the new key");
    // The server's view of the fleet follows the store (polled every 50 ms).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut c = back.client(&api.server).expect("client");
    c.report(report("gpu-1")).await.expect("report taken");
    // The first machine's certificate stays refused.
    let mut old = first.client(&api.server).expect("client");
    let e = old.report(report("gpu-1")).await.expect_err("refused");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    api.stop().await;
}

/// Issue 46 item 2 (launched hosts), regression: a launched host's certificate was
/// not bound to any key, so a second machine with a pool token (or any token naming
/// the id) took an existing launched host over. Its first join binds its key: a
/// join with another key is refused before the token is spent, and only a token
/// minted for the host id re-binds it (the first machine's certificate is then
/// refused).
#[tokio::test]
async fn a_launched_host_is_bound_to_the_key_of_its_first_join() {
    let api = Api::start().await;
    let first = api
        .join(&api.token(None, Some("h-a"), 3600, 1).await, None)
        .await
        .expect("h-a joins");
    let pool_token = api.token(Some("pool"), None, 3600, 1).await;
    let e = api
        .join(&pool_token, Some("h-a"))
        .await
        .err()
        .expect("another machine cannot take h-a over with a pool token");
    assert!(format!("{e:?}").contains("another key"), "{e:?}");
    // The refusal did not spend the single-use token.
    api.join(&pool_token, Some("h-b"))
        .await
        .expect("the pool token still joins h-b");
    // The operator's token for the id re-binds h-a to a new machine.
    let second = api
        .join(&api.token(None, Some("h-a"), 3600, 1).await, None)
        .await
        .expect("re-bound with a token for its id");
    let mut c = second.client(&api.server).expect("client");
    c.report(report("h-a"))
        .await
        .expect("the new machine reports");
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mut old = first.client(&api.server).expect("client");
    let e = old.report(report("h-a")).await.expect_err("refused");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("joined with"), "{e:?}");
    api.stop().await;
}

/// What the server logs, kept for a test (a `tracing` writer into a buffer).
#[derive(Clone, Default)]
struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn text(&self) -> String {
        self.0
            .lock()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }
}

/// Issue 46 item 10, regression: Join's `cluster` and `host_id` were logged with
/// Display before they were validated, so a caller could forge a "host joined" log
/// line and write raw escape sequences into the controller's log. They are logged
/// escaped: no new line, no escape byte of theirs reaches the log.
#[tokio::test]
async fn join_fields_are_logged_escaped() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let api = Api::start().await;
    let forged = "2026-12-07T00:00:00.000000Z  INFO gpushare_agent_api::server: agent API: host joined host=h-evil";
    let token = api.token(Some("pool"), None, 3600, 1).await;
    let evil_cluster = format!("c9\n{forged}\u{1b}[2J");
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        client::join(
            &api.server,
            &api.ca_hash,
            &token,
            Some("h-a"),
            Some(&evil_cluster),
        ),
    )
    .await
    .expect("answered");
    assert!(r.is_err(), "another cluster is refused");
    let evil_host = format!("h-a\n{forged}\u{1b}[2J");
    let r = api.join(&token, Some(&evil_host)).await;
    assert!(r.is_err(), "a bad host id is refused");
    api.stop().await;
    let text = logs.text();
    assert!(text.contains("join refused"), "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "a raw escape byte in the log:\n{text}"
    );
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("2026-12-07T00:00:00.000000Z")),
        "a forged log line:\n{text}"
    );
}

/// Issue 46 item 8, regression: a join's token use was spent before the host was
/// registered, so a single-use token used while an apply held the state lock was
/// "used up" and no host joined. The use is given back when the registration fails
/// for a reason that passes; the agent's retry then joins.
#[tokio::test]
async fn a_join_while_the_state_is_locked_keeps_its_token_and_joins_later() {
    let api = Api::start().await;
    api.registered_pool("lab").await;
    let token = api.token(Some("lab"), None, 3600, 1).await;
    // An apply holds the state lock for longer than a join waits for it (20 s).
    let lock = api
        .store
        .lock("gpushare apply (test)", Duration::from_secs(5))
        .await
        .expect("lock");
    let (server, ca_hash, t) = (api.server.clone(), api.ca_hash.clone(), token.clone());
    let join =
        tokio::spawn(async move { client::join(&server, &ca_hash, &t, Some("gpu-1"), None).await });
    tokio::time::sleep(Duration::from_secs(24)).await;
    assert!(
        !join.is_finished(),
        "the join waits while the state is locked"
    );
    lock.release().await.expect("release");
    let id = tokio::time::timeout(Duration::from_secs(60), join)
        .await
        .expect("joined in time")
        .expect("task")
        .expect("joined once the lock was released: the token's use was given back");
    assert_eq!(id.host_id, "gpu-1");
    api.stop().await;
}

/// Issue 46 item 5, regression (join facts): a host joining a registered pool could
/// claim any number of GPUs (10 joins with one pool token claiming 45,000 GPUs each
/// made a 38 MB state). A join naming more GPUs than a host has is refused before
/// the token's use is spent, and nothing is recorded.
#[tokio::test]
async fn a_join_claiming_more_gpus_than_a_host_has_is_refused() {
    let api = Api::start().await;
    api.registered_pool("lab").await;
    let token = api.token(Some("lab"), None, 3600, 1).await;
    let gpu = |i: u32| gpushare_core::model::GpuInfo::new(i, "l4", 23034);
    let facts = gpushare_agent_api::registration::JoinFacts {
        host_id: "greedy".into(),
        gpus: (0..45_000).map(gpu).collect(),
        ..Default::default()
    };
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        client::join_with(&api.server, &api.ca_hash, &token, None, None, &facts),
    )
    .await
    .expect("answered");
    let e = r.err().expect("refused");
    assert!(format!("{e:?}").contains("GPUs"), "{e:?}");
    let st = api.store.load().await.expect("load");
    assert!(!st.hosts.contains_key("greedy"), "nothing recorded");
    // The token was not spent: a host with one GPU joins with it.
    let facts = gpushare_agent_api::registration::JoinFacts {
        host_id: "modest".into(),
        gpus: vec![gpu(0)],
        ..Default::default()
    };
    client::join_with(&api.server, &api.ca_hash, &token, None, None, &facts)
        .await
        .expect("the token still joins a real host");
    api.stop().await;
}

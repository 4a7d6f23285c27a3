//! The role layout of docs/etcd.md on a real etcd with authentication on: an agent's
//! credentials read the state and write their own host's report, nothing else.

use common::Anonymous as _;
use gpushare_testkit_engine::etcd as common;

use common::Etcd;
use gpushare_core::model::{HostReport, MpsHealth, StoreState};
use gpushare_engine::store::{Store, StoreError};
use gpushare_store_etcd::{EtcdOptions, EtcdStore, OpenError, Secret};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Captures what the process logs.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

impl Logs {
    /// Everything this thread logs at debug level (gpushare's store and its etcd
    /// client) from now until the guard is dropped.
    fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(logs.clone())
            .finish();
        let guard = tracing::subscriber::set_default(subscriber);
        (logs, guard)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(
            &self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
        .into_owned()
    }
}

const PREFIX: &str = "gpushare/prod";

fn report(id: &str) -> HostReport {
    HostReport {
        host_id: id.into(),
        at: 1,
        mps_health: MpsHealth::Healthy,
        health: Default::default(),
        gpus: vec![],
        tasks: Default::default(),
        ..HostReport::default()
    }
}

fn creds(user: &str, password: &str) -> EtcdOptions {
    EtcdOptions {
        username: Some(user.into()),
        password: Some(Secret::new(password)),
        ..EtcdOptions::default()
    }
}

fn is_denied(e: &StoreError) -> bool {
    matches!(e, StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied)
}

/// The roles and users docs/etcd.md creates with etcdctl, made with the store's client.
async fn set_up_roles(etcd: &Etcd) {
    use gpushare_store_etcd::client::{Permission, PermissionType};
    let admin = etcd.client().await.admin();
    let grant = |role: &'static str, kind, key: String, prefix| {
        let admin = admin.clone();
        async move {
            admin
                .role_grant_permission(role, Permission::new(kind, key, prefix))
                .await
                .expect("grant")
        }
    };
    admin.user_add("root", "root-pw").await.expect("root");
    admin
        .user_grant_role("root", "root")
        .await
        .expect("root role");
    for role in [
        "gpushare-reconciler",
        "gpushare-agent",
        "gpushare-agent-h-1",
    ] {
        admin.role_add(role).await.expect("role");
    }
    grant(
        "gpushare-reconciler",
        PermissionType::Readwrite,
        format!("{PREFIX}/"),
        true,
    )
    .await;
    grant(
        "gpushare-agent",
        PermissionType::Read,
        format!("{PREFIX}/state/"),
        true,
    )
    .await;
    grant(
        "gpushare-agent-h-1",
        PermissionType::Readwrite,
        format!("{PREFIX}/report/h-1"),
        false,
    )
    .await;
    for (user, password, roles) in [
        ("reconciler", "rec-secret-pw", &["gpushare-reconciler"][..]),
        (
            "agent-h-1",
            "agent-secret-pw",
            &["gpushare-agent", "gpushare-agent-h-1"][..],
        ),
    ] {
        admin.user_add(user, password).await.expect("user");
        for role in roles {
            admin.user_grant_role(user, role).await.expect("grant");
        }
    }
    admin.auth_enable().await.expect("auth on");
}

#[tokio::test]
async fn an_agent_reads_the_state_and_writes_only_its_own_report() {
    let (logs, _logging) = Logs::capture();
    let etcd = Etcd::start().await;
    set_up_roles(&etcd).await;
    let url = etcd.url(PREFIX);

    let rec = EtcdStore::open(&url, creds("reconciler", "rec-secret-pw"))
        .await
        .expect("reconciler");
    let st = StoreState {
        serial: 1,
        cluster: "prod".into(),
        ..StoreState::default()
    };
    rec.commit(0, &st)
        .await
        .expect("the reconciler writes the state");
    rec.lock("gpushare apply", Duration::from_secs(1))
        .await
        .expect("and takes the lock")
        .release()
        .await
        .expect("release");
    rec.put_report(&report("h-2")).await.expect("any report");

    let agent = EtcdStore::open(&url, creds("agent-h-1", "agent-secret-pw"))
        .await
        .expect("agent");
    assert_eq!(
        agent
            .load()
            .await
            .expect("the agent reads the state")
            .anon(),
        st
    );
    agent
        .put_report(&report("h-1"))
        .await
        .expect("its own report");
    let mut w = agent.watch_assignments("h-1").await.expect("watch");
    assert_eq!(w.next().await.expect("item").expect("ok"), vec![]);
    // The reconciler assigns a task to h-1: the agent's watch sees it.
    let mut assigned = st.clone();
    assigned.serial = 2;
    let mut t = common::task(0, 1);
    t.host = "h-1".into();
    assigned.tasks.insert(t.id.clone(), t.clone());
    rec.commit(1, &assigned).await.expect("assign");
    assert_eq!(w.next().await.expect("item").expect("ok"), vec![t]);
    let st = assigned;

    let mut changed = st.clone();
    changed.serial = 3;
    let e = agent.commit(2, &changed).await.expect_err("no state write");
    assert!(is_denied(&e), "{e:?}");
    let e = agent
        .put_report(&report("h-2"))
        .await
        .expect_err("no other host's report");
    assert!(is_denied(&e), "{e:?}");
    let e = agent.delete_report("h-2").await.expect_err("no delete");
    assert!(is_denied(&e), "{e:?}");
    let e = agent
        .lock("agent", Duration::from_millis(200))
        .await
        .err()
        .expect("no lock");
    assert!(is_denied(&e), "{e:?}");
    for e in [&e, &agent.reports().await.expect_err("no reading reports")] {
        let text = format!("{e} {e:?}");
        assert!(!text.contains("agent-secret-pw"), "{text}");
    }
    // Nothing the agent tried changed anything.
    assert_eq!(rec.load().await.expect("load").anon(), st);
    let reports = rec.reports().await.expect("reports");
    assert_eq!(reports.len(), 2);

    // A wrong password is refused as a permission problem, without echoing it.
    match EtcdStore::open(&url, creds("agent-h-1", "wrong-pw-123")).await {
        Err(OpenError::Store(e)) => {
            assert!(is_denied(&e), "{e:?}");
            assert!(!format!("{e} {e:?}").contains("wrong-pw-123"));
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let logged = logs.text();
    assert!(
        logged.contains("took the state lock"),
        "debug logs were captured"
    );
    for secret in [
        "rec-secret-pw",
        "agent-secret-pw",
        "wrong-pw-123",
        "root-pw",
    ] {
        assert!(!logged.contains(secret), "{secret} was logged");
    }
}

/// etcd's simple tokens expire when unused (5 minutes by default; 1 s here): a handle
/// idle for longer authenticates again and goes on, for reads, commits and reports.
#[tokio::test]
async fn an_expired_token_is_renewed_and_the_call_goes_through() {
    let (logs, _logging) = Logs::capture();
    let etcd = Etcd::start_with(&["--auth-token-ttl", "1"]).await;
    set_up_roles(&etcd).await;
    let url = etcd.url(PREFIX);
    let rec = EtcdStore::open(&url, creds("reconciler", "rec-secret-pw"))
        .await
        .expect("reconciler");
    let agent = EtcdStore::open(&url, creds("agent-h-1", "agent-secret-pw"))
        .await
        .expect("agent");
    let st = StoreState {
        serial: 1,
        cluster: "prod".into(),
        ..StoreState::default()
    };
    rec.commit(0, &st).await.expect("commit");
    let renewed = || logs.text().matches("authenticating again").count();
    assert_eq!(renewed(), 0, "no token expired yet");

    // Idle for longer than the tokens live.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(rec.load().await.expect("a read after expiry").anon(), st);
    assert_eq!(renewed(), 1, "{}", logs.text());
    let mut next = st.clone();
    next.serial = 2;
    tokio::time::sleep(Duration::from_secs(3)).await;
    rec.commit(1, &next).await.expect("a commit after expiry");
    agent
        .put_report(&report("h-1"))
        .await
        .expect("a report after expiry");
    assert!(renewed() >= 3, "{}", logs.text());
    assert_eq!(agent.load().await.expect("load").anon(), next);
    // Renewing never logs a password.
    for secret in ["rec-secret-pw", "agent-secret-pw"] {
        assert!(!logs.text().contains(secret), "{secret} was logged");
    }
}

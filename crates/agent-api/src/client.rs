//! The agent's side: join once with a token (the key is made here and never leaves
//! the host; the server signs a certificate for it), keep the identity in the state
//! directory (0600), follow the host's assignment stream and send reports, renew
//! the certificate before it expires, and drive the agent loop from the views.
//!
//! While the controller is unreachable the agent keeps its tasks and the last view,
//! and reconnects with exponential backoff; told that its host left the fleet, it
//! stops every task it runs (and keeps listening: a host that comes back is served).

use crate::pb;
use crate::pb::agent_api_client::AgentApiClient;
use crate::pki::{self, PkiError};
use crate::tls::{self, TlsError};
use backon::{BackoffBuilder, ExponentialBuilder, Retryable};
use gpushare_agent::{error_chain, Agent, AgentError, Args, Link};
use gpushare_core::model::{HostReport, StoreState};
use gpushare_core::util::{self, lock, unix_now};
use gpushare_engine::store::StoreError;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tonic::transport::{Channel, Endpoint};

/// Where the identity is kept, under the agent's state directory.
const IDENTITY_DIR: &str = "agent-api";
const IDENTITY: &str = "identity.json";
const KEY: &str = "host.key";
const CERT: &str = "host.crt";
/// How long one report may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// How often the certificate's age is checked, at most.
const RENEW_CHECK: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{url:?} is not an agent API address: {reason} (expected https://HOST:PORT)")]
    BadUrl { url: String, reason: String },
    #[error("no host identity in {dir}: start the agent once with --join TOKEN")]
    NoIdentity { dir: String },
    #[error("{server} refused to let this host join")]
    JoinRefused {
        server: String,
        #[source]
        source: tonic::Status,
    },
    #[error("cannot join through {server}")]
    Join {
        server: String,
        #[source]
        source: tonic::Status,
    },
    #[error("the identity in {dir} is for {what} {kept:?}, not {asked:?}: remove the directory to join again")]
    IdentityMismatch {
        dir: String,
        what: &'static str,
        kept: String,
        asked: String,
    },
    #[error("the controller sent a CA whose hash is {found}, not the pinned {expected}")]
    CaMismatch { expected: String, found: String },
    #[error("cannot read or write {path}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is corrupt")]
    Corrupt {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(transparent)]
    Pki(#[from] PkiError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error("no assignment from {server} within {seconds} s")]
    NoAssignment { server: String, seconds: u64 },
}

/// Where the server is.
#[derive(Debug, Clone)]
pub struct ServerAddr {
    pub url: String,
    host: String,
    port: u16,
}

impl ServerAddr {
    pub fn parse(url: &str) -> Result<ServerAddr, ClientError> {
        let bad = |reason: &str| ClientError::BadUrl {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let uri: tonic::codegen::http::Uri = url.parse().map_err(|_| bad("not a URL"))?;
        if uri.scheme_str() != Some("https") {
            return Err(bad("the scheme must be https"));
        }
        if uri.path() != "/" && !uri.path().is_empty() {
            return Err(bad("no path is allowed"));
        }
        let host = uri.host().ok_or_else(|| bad("no host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().ok_or_else(|| bad("no port"))?;
        Ok(ServerAddr {
            url: url.trim_end_matches('/').to_string(),
            host,
            port,
        })
    }

    /// A lazily connecting channel whose TLS is `cfg`.
    fn channel(&self, cfg: Arc<rustls::ClientConfig>) -> Result<Channel, ClientError> {
        let endpoint =
            Endpoint::from_shared(format!("http://{}:{}", bracket(&self.host), self.port))
                .map_err(|e| ClientError::BadUrl {
                    url: self.url.clone(),
                    reason: e.to_string(),
                })?
                .connect_timeout(Duration::from_secs(5))
                .http2_keep_alive_interval(Duration::from_secs(20))
                .keep_alive_timeout(Duration::from_secs(10))
                .keep_alive_while_idle(true);
        let (host, port) = (self.host.clone(), self.port);
        let connector = tower::service_fn(move |_: tonic::codegen::http::Uri| {
            let (host, cfg) = (host.clone(), Arc::clone(&cfg));
            async move {
                let name = rustls::pki_types::ServerName::try_from(host.clone())
                    .map_err(std::io::Error::other)?;
                let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
                let _ = tcp.set_nodelay(true);
                let tls = tokio_rustls::TlsConnector::from(cfg)
                    .connect(name, tcp)
                    .await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
            }
        });
        Ok(endpoint.connect_with_connector_lazy(connector))
    }
}

fn bracket(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

/// What `identity.json` holds (the key and certificate are files beside it).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct IdentityFile {
    host_id: String,
    cluster: String,
    ca_hash: String,
    issued_at: u64,
    not_after: u64,
}

/// The host's identity: who it is and its key and certificate.
#[derive(Clone)]
pub struct HostIdentity {
    pub host_id: String,
    pub cluster: String,
    pub ca_hash: String,
    issued_at: u64,
    pub not_after: u64,
    cert_der: Vec<u8>,
    key_der: Vec<u8>,
}

fn io_err(path: &Path, source: std::io::Error) -> ClientError {
    ClientError::Io {
        path: path.display().to_string(),
        source,
    }
}

impl HostIdentity {
    /// The identity kept in `dir`, if any.
    pub fn load(dir: &Path) -> Result<Option<HostIdentity>, ClientError> {
        let path = dir.join(IDENTITY);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&path, e)),
        };
        let f: IdentityFile =
            serde_json::from_slice(&bytes).map_err(|source| ClientError::Corrupt {
                path: path.display().to_string(),
                source,
            })?;
        let read = |name: &str| {
            let p = dir.join(name);
            std::fs::read(&p).map_err(|e| io_err(&p, e))
        };
        Ok(Some(HostIdentity {
            host_id: f.host_id,
            cluster: f.cluster,
            ca_hash: f.ca_hash,
            issued_at: f.issued_at,
            not_after: f.not_after,
            cert_der: read(CERT)?,
            key_der: read(KEY)?,
        }))
    }

    /// Keep it in `dir` (created 0700; every file 0600; the description last, so a
    /// half-kept identity is never read as whole).
    pub fn save(&self, dir: &Path) -> Result<(), ClientError> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| io_err(dir, e))?;
        let write = |name: &str, bytes: &[u8]| {
            let p = dir.join(name);
            gpushare_engine::fsutil::write_atomic(&p, bytes).map_err(|e| io_err(&p, e))
        };
        write(KEY, &self.key_der)?;
        write(CERT, &self.cert_der)?;
        let f = IdentityFile {
            host_id: self.host_id.clone(),
            cluster: self.cluster.clone(),
            ca_hash: self.ca_hash.clone(),
            issued_at: self.issued_at,
            not_after: self.not_after,
        };
        let json = serde_json::to_vec_pretty(&f).map_err(|source| ClientError::Corrupt {
            path: dir.join(IDENTITY).display().to_string(),
            source,
        })?;
        write(IDENTITY, &json)
    }

    /// The TLS configuration of this host's calls (its certificate, the pinned CA).
    pub fn tls(&self) -> Result<Arc<rustls::ClientConfig>, ClientError> {
        Ok(tls::client_config(
            &self.ca_hash,
            Some((self.cert_der.clone().into(), self.key_der.clone())),
        )?)
    }

    /// A client of `server` authenticated as this host.
    pub fn client(&self, server: &ServerAddr) -> Result<AgentApiClient<Channel>, ClientError> {
        Ok(AgentApiClient::new(server.channel(self.tls()?)?))
    }

    fn from_response(
        id: pb::Identity,
        key_der: Vec<u8>,
        ca_hash: &str,
    ) -> Result<HostIdentity, ClientError> {
        let found = pki::ca_hash(&id.ca_der);
        if found != ca_hash {
            return Err(ClientError::CaMismatch {
                expected: ca_hash.to_string(),
                found,
            });
        }
        Ok(HostIdentity {
            host_id: id.host_id,
            cluster: id.cluster,
            ca_hash: ca_hash.to_string(),
            issued_at: unix_now(),
            not_after: id.not_after,
            cert_der: id.cert_der,
            key_der,
        })
    }

    /// A new key and certificate for this host, issued by `server` (renewal; nothing
    /// is saved).
    pub async fn renewed(&self, server: &ServerAddr) -> Result<HostIdentity, ClientError> {
        self.renewed_with(self.client(server)?, server).await
    }

    async fn renewed_with(
        &self,
        mut client: AgentApiClient<Channel>,
        server: &ServerAddr,
    ) -> Result<HostIdentity, ClientError> {
        let (key, csr_der) = pki::new_key_and_csr()?;
        let id = client
            .renew(pb::RenewRequest { csr_der })
            .await
            .map_err(|source| ClientError::Join {
                server: server.url.clone(),
                source,
            })?
            .into_inner();
        HostIdentity::from_response(id, key.serialize_der(), &self.ca_hash)
    }

    /// The revocation generation its certificate carries ([`crate::revoke`]).
    pub fn generation(&self) -> Option<u64> {
        pki::generation_of_cert(&self.cert_der)
    }

    /// Whether two thirds of its lifetime are gone.
    fn due_for_renewal(&self, now: u64) -> bool {
        let life = self.not_after.saturating_sub(self.issued_at);
        now >= self.not_after.saturating_sub(life / 3)
    }
}

/// Whether a failed call is worth trying again (the controller is away), rather
/// than refused.
fn transient(s: &tonic::Status) -> bool {
    matches!(
        s.code(),
        tonic::Code::Unavailable
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Unknown
            | tonic::Code::Internal
            | tonic::Code::ResourceExhausted
            | tonic::Code::Aborted
    )
}

fn reconnect_backoff() -> ExponentialBuilder {
    util::backoff(Duration::from_millis(250), Duration::from_secs(30)).with_jitter()
}

/// Exchange `token` for this host's identity (retrying while the controller is
/// unreachable; a refusal is final).
pub async fn join(
    server: &ServerAddr,
    ca_hash: &str,
    token: &str,
    host_id: Option<&str>,
    cluster: Option<&str>,
) -> Result<HostIdentity, ClientError> {
    let facts = crate::registration::JoinFacts::default();
    join_with(server, ca_hash, token, host_id, cluster, &facts).await
}

/// [`join`], giving the host's facts (for a registered pool: the id it derived, its
/// CPUs, memory and GPUs).
pub async fn join_with(
    server: &ServerAddr,
    ca_hash: &str,
    token: &str,
    host_id: Option<&str>,
    cluster: Option<&str>,
    facts: &crate::registration::JoinFacts,
) -> Result<HostIdentity, ClientError> {
    let ca_hash = tls::parse_ca_hash(ca_hash)?;
    let (key, csr_der) = pki::new_key_and_csr()?;
    // Facts that do not serialise (they always do) are sent as none.
    let facts_json = serde_json::to_vec(facts).unwrap_or_default();
    let client = AgentApiClient::new(server.channel(tls::client_config(&ca_hash, None)?)?);
    let req = pb::JoinRequest {
        token: token.to_string(),
        host_id: host_id.unwrap_or_default().to_string(),
        csr_der,
        cluster: cluster.unwrap_or_default().to_string(),
        facts_json,
    };
    let id = (|| {
        let (mut c, r) = (client.clone(), req.clone());
        async move { c.join(r).await }
    })
    .retry(reconnect_backoff().with_max_delay(Duration::from_secs(10)))
    .when(transient)
    .notify(|e, wait| tracing::warn!(server = %server.url, error = %e.message(), ?wait, "cannot join yet; retrying"))
    .await
    .map_err(|source| {
        if transient(&source) {
            ClientError::Join {
                server: server.url.clone(),
                source,
            }
        } else {
            ClientError::JoinRefused {
                server: server.url.clone(),
                source,
            }
        }
    })?
    .into_inner();
    HostIdentity::from_response(id, key.serialize_der(), &ca_hash)
}

/// The latest view received.
#[derive(Debug, Clone, Default)]
pub struct Latest {
    pub version: u64,
    pub removed: bool,
    pub view: Option<Arc<StoreState>>,
}

/// The agent API as the agent loop's [`Link`]: the latest view of the stream, and
/// reports sent as calls.
pub struct ApiLink {
    server: ServerAddr,
    client: Mutex<AgentApiClient<Channel>>,
    latest: watch::Receiver<Latest>,
}

fn unreachable(
    server: &ServerAddr,
    e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> StoreError {
    StoreError::Unreachable {
        location: server.url.clone(),
        source: e.into(),
    }
}

impl ApiLink {
    fn client(&self) -> AgentApiClient<Channel> {
        lock(&self.client).clone()
    }

    /// The stream's latest view, and a receiver that wakes on every new one.
    pub fn latest(&self) -> watch::Receiver<Latest> {
        self.latest.clone()
    }

    /// Follow `identity`'s assignment from `server` (a background task reconnecting
    /// with backoff), and keep its certificate renewed (saved in `dir`).
    pub fn start(
        server: ServerAddr,
        identity: HostIdentity,
        dir: PathBuf,
    ) -> Result<Arc<ApiLink>, ClientError> {
        let (tx, latest) = watch::channel(Latest::default());
        let link = Arc::new(ApiLink {
            client: Mutex::new(identity.client(&server)?),
            server,
            latest,
        });
        tokio::spawn(follow(Arc::downgrade(&link), identity.host_id.clone(), tx));
        tokio::spawn(renew(Arc::downgrade(&link), identity, dir));
        Ok(link)
    }
}

/// Follow the host's assignment stream until the link is dropped.
async fn follow(link: std::sync::Weak<ApiLink>, host: String, tx: watch::Sender<Latest>) {
    let mut backoff = reconnect_backoff().build();
    loop {
        let Some(l) = link.upgrade() else { return };
        let (mut client, server) = (l.client(), l.server.url.clone());
        drop(l);
        let resume = tx.borrow().version;
        let req = pb::WatchRequest {
            host_id: host.clone(),
            resume_version: resume,
        };
        match client.watch_assignment(req).await {
            Ok(stream) => {
                let mut stream = stream.into_inner();
                loop {
                    match stream.message().await {
                        Ok(Some(a)) => {
                            backoff = reconnect_backoff().build();
                            let view = if a.host_removed {
                                None
                            } else {
                                match serde_json::from_slice::<StoreState>(&a.view_json) {
                                    Ok(v) => Some(Arc::new(v)),
                                    Err(e) => {
                                        tracing::warn!(%server, error = %e, "the controller sent an assignment this agent cannot read; keeping the last one");
                                        continue;
                                    }
                                }
                            };
                            tracing::debug!(%server, version = a.version, removed = a.host_removed, "new assignment");
                            tx.send_replace(Latest {
                                version: a.version,
                                removed: a.host_removed,
                                view,
                            });
                        }
                        Ok(None) => {
                            tracing::warn!(%server, "the assignment stream ended; reconnecting (tasks keep running)");
                            break;
                        }
                        Err(e) => {
                            tracing::warn!(%server, error = %e.message(), "the assignment stream broke; reconnecting (tasks keep running)");
                            break;
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(%server, code = ?e.code(), error = %e.message(), "cannot reach the agent API; retrying (tasks keep running)")
            }
        }
        let wait = backoff.next().unwrap_or(Duration::from_secs(30));
        tokio::time::sleep(wait).await;
    }
}

/// Renew the certificate when two thirds of its life are gone (retrying each check
/// until it succeeds), until the link is dropped.
async fn renew(link: std::sync::Weak<ApiLink>, mut identity: HostIdentity, dir: PathBuf) {
    loop {
        // A tenth of the certificate's life (a check every 30 s for a 24 h one).
        let life = identity.not_after.saturating_sub(identity.issued_at);
        let check = Duration::from_secs(life / 10).clamp(Duration::from_secs(1), RENEW_CHECK);
        tokio::time::sleep(check).await;
        let Some(l) = link.upgrade() else { return };
        if !identity.due_for_renewal(unix_now()) {
            continue;
        }
        match renew_once(&l, &identity, &dir).await {
            Ok(next) => {
                tracing::info!(server = %l.server.url, host = %next.host_id, not_after = next.not_after, "host certificate renewed");
                identity = next;
            }
            Err(e) => {
                tracing::warn!(server = %l.server.url, error = %error_chain(&e), "cannot renew the host certificate yet")
            }
        }
    }
}

async fn renew_once(
    link: &ApiLink,
    identity: &HostIdentity,
    dir: &Path,
) -> Result<HostIdentity, ClientError> {
    let next = identity.renewed_with(link.client(), &link.server).await?;
    next.save(dir)?;
    *lock(&link.client) = next.client(&link.server)?;
    Ok(next)
}

#[async_trait::async_trait]
impl Link for ApiLink {
    fn location(&self) -> String {
        self.server.url.clone()
    }

    async fn assignment(&self) -> Result<Arc<StoreState>, StoreError> {
        let l = self.latest.borrow();
        match (&l.view, l.removed) {
            (Some(v), _) => Ok(Arc::clone(v)),
            (None, true) => Ok(Arc::new(StoreState::default())),
            (None, false) => Err(unreachable(&self.server, "no assignment received yet")),
        }
    }

    async fn put_report(&self, report: &HostReport) -> Result<(), StoreError> {
        let report_json = serde_json::to_vec(report).map_err(|e| unreachable(&self.server, e))?;
        let mut c = self.client();
        match tokio::time::timeout(CALL_TIMEOUT, c.report(pb::ReportRequest { report_json })).await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(status)) => Err(unreachable(&self.server, status)),
            Err(e) => Err(unreachable(&self.server, e)),
        }
    }
}

/// The identity to use: the one kept in `dir`, else one joined with `--join`.
async fn identity(
    args: &Args,
    server: &ServerAddr,
    dir: &Path,
) -> Result<HostIdentity, ClientError> {
    let ca_hash = tls::parse_ca_hash(args.ca_hash.as_deref().unwrap_or_default())?;
    let id = match HostIdentity::load(dir)? {
        Some(id) => id,
        None => {
            let token = args
                .join
                .as_deref()
                .ok_or_else(|| ClientError::NoIdentity {
                    dir: dir.display().to_string(),
                })?;
            // For a registered pool: the id this machine derives, its CPUs, memory and GPUs.
            let gpus = args.inventory().gpus().unwrap_or_else(|e| {
                tracing::warn!(error = %error_chain(&e), "cannot read the GPUs to join with; the first report gives them");
                vec![]
            });
            let facts = crate::registration::JoinFacts::of_this_machine(
                args.instance_type.as_deref(),
                gpus,
            );
            let id = join_with(
                server,
                &ca_hash,
                token,
                args.host_id.as_deref(),
                args.cluster.as_deref(),
                &facts,
            )
            .await?;
            id.save(dir)?;
            tracing::info!(server = %server.url, host = %id.host_id, cluster = %id.cluster, "joined the cluster");
            id
        }
    };
    let checks = [
        ("CA hash", Some(ca_hash.as_str()), &id.ca_hash),
        ("host id", args.host_id.as_deref(), &id.host_id),
        ("cluster", args.cluster.as_deref(), &id.cluster),
    ];
    for (what, asked, kept) in checks {
        if let Some(asked) = asked.filter(|a| a != kept) {
            return Err(ClientError::IdentityMismatch {
                dir: dir.display().to_string(),
                what,
                kept: kept.clone(),
                asked: asked.to_string(),
            });
        }
    }
    Ok(id)
}

/// `gpushare agent --server URL`: join if needed, then converge on the stream's
/// views until `shutdown` (or one pass with `--once`).
pub async fn run(args: &Args, shutdown: impl Future<Output = ()>) -> Result<(), ClientError> {
    let server = ServerAddr::parse(args.server.as_deref().unwrap_or_default())?;
    let dir = args.state_dir.join(IDENTITY_DIR);
    let id = identity(args, &server, &dir).await?;
    let (cluster, host) = (id.cluster.clone(), id.host_id.clone());
    let link = ApiLink::start(server.clone(), id, dir)?;
    let runtime = args.runtime_for(&cluster, &host).await?;
    tracing::info!(%cluster, %host, runtime = runtime.name(), server = %server.url, "agent starting");
    let mut agent = Agent::with_link(
        args.config_for(&cluster, &host),
        Arc::clone(&link) as Arc<dyn Link>,
        runtime,
        args.inventory(),
    );
    let mut latest = link.latest();
    if args.once {
        let wait = Duration::from_secs(30);
        let first = match tokio::time::timeout(wait, latest.wait_for(|l| l.version != 0)).await {
            Ok(Ok(l)) => l.clone(),
            _ => {
                return Err(ClientError::NoAssignment {
                    server: server.url,
                    seconds: wait.as_secs(),
                })
            }
        };
        return step(&mut agent, &first).await;
    }
    let interval = Duration::from_secs(args.interval.max(1));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            r = latest.changed() => if r.is_err() { tokio::time::sleep(interval).await },
            _ = tokio::time::sleep(interval) => {}
        }
        let now = latest.borrow_and_update().clone();
        if now.version == 0 {
            continue;
        }
        if let Err(e) = step(&mut agent, &now).await {
            tracing::warn!(error = %error_chain(&e), "pass failed; retrying next interval");
        }
    }
    tracing::info!("agent stopped (its tasks keep running)");
    Ok(())
}

/// One pass on `latest`: converge, or, if the host left the fleet, stop everything.
async fn step(agent: &mut Agent, latest: &Latest) -> Result<(), ClientError> {
    if latest.removed {
        let stopped = agent.stop_all().await?;
        if !stopped.is_empty() {
            tracing::warn!(stopped = ?stopped, "this host is no longer in the fleet: stopped every task");
        }
        return Ok(());
    }
    let s = agent.pass().await?;
    tracing::debug!(
        started = s.started.len(),
        stopped = s.stopped.len(),
        running = s.running,
        waiting = s.waiting.len(),
        "pass"
    );
    Ok(())
}

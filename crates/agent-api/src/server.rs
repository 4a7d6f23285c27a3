//! The agent API server: TLS on one listener (client certificates checked against
//! the cluster CA by rustls; `Join` is the one call that needs none), authorisation
//! by the certificate's host id, the views from the [`Hub`], reports to the store.

use crate::hub::Hub;
use crate::pb;
use crate::pb::agent_api_server::{AgentApi, AgentApiServer};
use crate::pki::{self, ClusterCa, PkiError};
use crate::registration;
use crate::revoke;
use crate::tls::{self, TlsError};
use crate::tokens;
use crate::view::HostView;
use gpushare_core::model::{Host, HostReport};
use gpushare_core::util::unix_now;
use gpushare_engine::store::Store;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a call waits for the first read of the state after start.
const STATE_WAIT: Duration = Duration::from_secs(10);
/// How long calls in progress may finish after shutdown; agents' streams never
/// finish, so they are cut then (the agents reconnect to another replica, or later).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Pki(#[from] PkiError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("the agent API server failed")]
    Serve(#[source] tonic::transport::Error),
}

/// How the server runs.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    pub listen: SocketAddr,
    /// Names and addresses the agents dial (the server certificate's); `localhost`,
    /// the loopback addresses and the listen address are always in it.
    pub names: Vec<String>,
    /// How often the state is polled for changes.
    pub poll: Duration,
    /// How long the host certificates it issues are valid.
    pub host_cert_lifetime: Duration,
    /// The connection budget (see [`crate::limits`]).
    pub limits: crate::limits::ConnLimits,
    /// Where each report's arrival is noted before it is written to the store (a
    /// reconciler in the same process judges silence by it too; issue 44).
    pub heard: Option<Arc<gpushare_engine::heard::HeardFrom>>,
}

impl ServerOptions {
    pub fn new(listen: SocketAddr) -> ServerOptions {
        ServerOptions {
            listen,
            names: Vec::new(),
            poll: Duration::from_millis(500),
            host_cert_lifetime: pki::HOST_CERT_LIFETIME,
            limits: crate::limits::ConnLimits::default(),
            heard: None,
        }
    }

    fn cert_names(&self) -> Vec<String> {
        let mut names = vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ];
        if !self.listen.ip().is_unspecified() {
            names.push(self.listen.ip().to_string());
        }
        names.extend(self.names.iter().cloned());
        names.sort();
        names.dedup();
        names
    }
}

/// A running server.
pub struct Running {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The CA hash agents pin.
    pub ca_hash: String,
    task: tokio::task::JoinHandle<Result<(), ServeError>>,
}

impl Running {
    /// Wait until the server stops (it stops when `shutdown` given to [`start`] resolves).
    pub async fn wait(self) -> Result<(), ServeError> {
        match self.task.await {
            Ok(r) => r,
            Err(e) => Err(ServeError::Bind {
                addr: self.addr,
                source: std::io::Error::other(e),
            }),
        }
    }
}

/// Load (or create) the cluster CA, bind, follow the state and serve until
/// `shutdown` resolves.
pub async fn start(
    store: Arc<dyn Store>,
    cluster: &str,
    opts: ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Running, ServeError> {
    let ca = Arc::new(ClusterCa::load_or_create(store.as_ref(), cluster).await?);
    let (cert_der, key) = ca.issue_server_cert(&opts.cert_names())?;
    let cfg = tls::server_config(
        ca.cert_der(),
        vec![cert_der.into(), ca.cert_der().clone()],
        key.serialize_der(),
    )?;
    let listener = TcpListener::bind(opts.listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: opts.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServeError::Bind {
        addr: opts.listen,
        source,
    })?;
    let hub = Hub::default();
    let follower = tokio::spawn(hub.clone().follow(Arc::clone(&store), opts.poll));
    let svc = Service {
        store,
        cluster: cluster.to_string(),
        ca: Arc::clone(&ca),
        hub,
        lifetime: opts.host_cert_lifetime,
        heard: opts.heard.clone(),
    };
    let (tx, rx) = mpsc::channel::<Result<TlsConn, std::io::Error>>(64);
    let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
    let gate = crate::limits::Gate::new(opts.limits);
    let accepting = tokio::spawn(accept_loop(listener, acceptor, tx, gate));
    tracing::info!(%addr, ca_hash = %ca.hash(), "agent API listening");
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let mut stopped = stop_rx.clone();
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let task = tokio::spawn(async move {
        let serve = tonic::transport::Server::builder()
            // Dead peers are found and their connections closed (issue 46).
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(Duration::from_secs(20)))
            .max_concurrent_streams(Some(opts.limits.streams_per_connection))
            .add_service(AgentApiServer::new(svc))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::ReceiverStream::new(rx),
                async move {
                    let _ = stop_rx.wait_for(|s| *s).await;
                },
            );
        let r = tokio::select! {
            r = serve => r.map_err(ServeError::Serve),
            _ = async {
                let _ = stopped.wait_for(|s| *s).await;
                tokio::time::sleep(SHUTDOWN_GRACE).await;
            } => Ok(()),
        };
        follower.abort();
        accepting.abort();
        r
    });
    Ok(Running {
        addr,
        ca_hash: ca.hash(),
        task,
    })
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    tx: mpsc::Sender<Result<TlsConn, std::io::Error>>,
    gate: crate::limits::Gate,
) {
    let mut refused_logged: Option<std::time::Instant> = None;
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "agent API: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Every connection holds an anonymous slot until it shows a host certificate;
        // none left: closed at once (logged at most every 10 s).
        let slot = match gate.anonymous(peer.ip()) {
            Ok(s) => s,
            Err(why) => {
                if refused_logged.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    refused_logged = Some(std::time::Instant::now());
                    tracing::warn!(%peer, why, "agent API: connection refused");
                }
                drop(tcp);
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, tx, gate) = (acceptor.clone(), tx.clone(), gate.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => {
                    // rustls verified the chain; the leaf's CN is the host.
                    let leaf = tls.get_ref().1.peer_certificates().and_then(|c| c.first());
                    let host = leaf.and_then(|c| pki::host_of_cert(c));
                    let standing = match leaf.and_then(|c| pki::generation_of_cert(c)) {
                        Some(g) => revoke::CertStanding::Generation(g),
                        None => revoke::CertStanding::Issued(leaf.and_then(|c| pki::issued_at(c))),
                    };
                    let key = leaf.and_then(|c| pki::key_of_cert(c));
                    let (slot, deadline) = if host.is_some() {
                        match gate.host() {
                            Ok(s) => (s, None),
                            Err(why) => {
                                tracing::warn!(%peer, why, "agent API: connection refused");
                                return;
                            }
                        }
                    } else {
                        let d = gate.limits().anonymous_lifetime;
                        (slot, Some(Box::pin(tokio::time::sleep(d))))
                    };
                    let _ = tx
                        .send(Ok(TlsConn {
                            tls,
                            peer: Peer {
                                addr: peer,
                                host,
                                standing,
                                key,
                            },
                            _slot: slot,
                            deadline,
                        }))
                        .await;
                }
                Ok(Err(e)) => tracing::warn!(%peer, error = %e, "agent API: TLS handshake refused"),
                Err(_) => tracing::warn!(%peer, "agent API: TLS handshake timed out"),
            }
        });
    }
}

/// Who is calling: the address, and the host its verified certificate names.
#[derive(Debug, Clone)]
pub struct Peer {
    pub addr: SocketAddr,
    pub host: Option<String>,
    /// Its certificate's revocation generation (or issue time, for one issued
    /// before generations).
    pub standing: revoke::CertStanding,
    /// SHA-256 (hex) of its certificate's public key ([`pki::key_of_cert`]).
    pub key: Option<String>,
}

impl Peer {
    /// Whether `r` revokes this peer's certificate.
    fn revoked(&self, host: &str, r: &revoke::Revocations) -> bool {
        r.revoked(host, self.standing)
    }
}

/// A TLS connection tonic serves, with its [`Peer`] in every request's extensions.
struct TlsConn {
    tls: tokio_rustls::server::TlsStream<TcpStream>,
    peer: Peer,
    /// Its slot of the connection budget, given back when it closes.
    _slot: crate::limits::Slot,
    /// When a connection without a host certificate is closed.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl TlsConn {
    /// An error once a connection without a host certificate outlived its time.
    fn expired(&mut self, cx: &mut Context<'_>) -> Option<std::io::Error> {
        let d = self.deadline.as_mut()?;
        d.as_mut().poll(cx).is_ready().then(|| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "a connection without a host certificate outlived its time",
            )
        })
    }
}

impl tonic::transport::server::Connected for TlsConn {
    type ConnectInfo = Peer;
    fn connect_info(&self) -> Peer {
        self.peer.clone()
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Some(e) = self.expired(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.tls).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tls).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tls).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tls).poll_shutdown(cx)
    }
}

/// How long a report's write to the store may take before the agent is told to
/// report again (issue 44: a frozen store held every report call for its whole
/// request timeout, so the agents were heard only once in that time).
pub const REPORT_WRITE_TIMEOUT: Duration = Duration::from_secs(2);

struct Service {
    store: Arc<dyn Store>,
    cluster: String,
    ca: Arc<ClusterCa>,
    hub: Hub,
    lifetime: Duration,
    heard: Option<Arc<gpushare_engine::heard::HeardFrom>>,
}

fn peer<T>(req: &Request<T>) -> Option<Peer> {
    req.extensions().get::<Peer>().cloned()
}

/// The host the caller's certificate names, or Unauthenticated.
fn caller<T>(req: &Request<T>) -> Result<(String, Peer), Status> {
    let p = peer(req).ok_or_else(|| Status::unauthenticated("no TLS peer"))?;
    let host = p.host.clone().ok_or_else(|| {
        Status::unauthenticated("this call needs the host's certificate (join first)")
    })?;
    Ok((host, p))
}

fn to_pb(v: &HostView) -> pb::Assignment {
    pb::Assignment {
        version: v.version,
        host_removed: v.removed,
        view_json: v.json.as_ref().clone(),
    }
}

fn revoked_status(host: &str) -> Status {
    Status::permission_denied(format!(
        "the certificate of host {host:?} is revoked: join again with a new token"
    ))
}

impl Service {
    /// Refuse a certificate of `host` whose key is not the one its registration
    /// recorded: an old certificate of a host that was removed, and whose id another
    /// machine then joined under, reads and reports nothing (issue 46).
    async fn bound(&self, host: &str, p: &Peer) -> Result<(), Status> {
        let Some(h) = self.fleet_host(host).await? else {
            return Ok(()); // not in the fleet: each call says so in its own way
        };
        match (&h.registration, &p.key) {
            (Some(r), Some(k)) if &r.key_sha256 == k => Ok(()),
            (Some(_), _) => {
                tracing::warn!(peer = %p.addr, %host, "agent API: refused a certificate whose key is not the one the host registered with");
                Err(Status::permission_denied(format!(
                    "this certificate's key is not the one host {host:?} registered with (the host was removed and joined again by another machine?): join again with a new token"
                )))
            }
            (None, _) => self.bound_launched(host, p).await,
        }
    }

    /// A launched host's certificate must carry the key bound at its first join
    /// ([`revoke::bind_key`]); the followed copy is checked first, a mismatch again
    /// against the record as stored (it may have just been re-bound).
    async fn bound_launched(&self, host: &str, p: &Peer) -> Result<(), Status> {
        let matches = |r: &revoke::Revocations| match (r.key(host), &p.key) {
            (None, _) => true,
            (Some(bound), Some(k)) => bound == k,
            (Some(_), None) => false,
        };
        if matches(&self.hub.revocations().borrow()) || matches(&self.revocations().await?) {
            return Ok(());
        }
        tracing::warn!(peer = %p.addr, %host, "agent API: refused a certificate whose key is not the one the launched host joined with");
        Err(Status::permission_denied(format!(
            "this certificate's key is not the one host {host:?} joined with: join again with a token minted for its id"
        )))
    }

    /// Bind launched host `host` to `key` at its join (issue 46 item 2): its first
    /// join binds it, a token minted for its id re-binds it, any other join with
    /// another key is refused.
    async fn bind_launched(
        &self,
        host: &str,
        key: &str,
        replace: bool,
        peer: &str,
    ) -> Result<(), Status> {
        match revoke::bind_key(self.store.as_ref(), host, key, replace).await {
            Ok(revoke::Binding::Replaced) => {
                tracing::warn!(%peer, %host, "agent API: launched host joined with a new key (a token minted for its id); its older certificates are refused");
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e @ revoke::RevokeError::KeyTaken { .. }) => {
                tracing::warn!(%peer, %host, "agent API: join refused: the launched host joined with another key");
                Err(Status::permission_denied(e.to_string()))
            }
            Err(e) => Err(Status::unavailable(gpushare_agent::error_chain(&e))),
        }
    }

    /// Host `id` as recorded in the fleet (`None`: not in it). Right after start,
    /// this waits a while for the first read of the state (rather than reading it
    /// whole once per call: a 40,000-task state is 11 MiB on etcd).
    async fn fleet_host(&self, id: &str) -> Result<Option<Host>, Status> {
        if let Some(h) = self.hub.host(id) {
            return Ok(h);
        }
        self.hub.wait_loaded(STATE_WAIT).await;
        self.hub
            .host(id)
            .ok_or_else(|| Status::unavailable("the controller has not read the state yet"))
    }

    /// The revocations as stored now (for the rare calls that issue certificates).
    async fn revocations(&self) -> Result<revoke::Revocations, Status> {
        revoke::load(self.store.as_ref())
            .await
            .map_err(|e| Status::unavailable(gpushare_agent::error_chain(&e)))
    }

    fn identity(
        &self,
        host: &str,
        csr_der: &[u8],
        revocations: &revoke::Revocations,
    ) -> Result<pb::Identity, Status> {
        let (cert_der, not_after) = self
            .ca
            .issue_host_cert(host, csr_der, self.lifetime, revocations.generation(host))
            .map_err(|e| Status::invalid_argument(gpushare_agent::error_chain(&e)))?;
        Ok(pb::Identity {
            host_id: host.to_string(),
            cluster: self.cluster.clone(),
            cert_der,
            ca_der: self.ca.cert_der().to_vec(),
            not_after,
        })
    }
}

#[tonic::async_trait]
impl AgentApi for Service {
    async fn join(
        &self,
        request: Request<pb::JoinRequest>,
    ) -> Result<Response<pb::Identity>, Status> {
        let addr = peer(&request)
            .map(|p| p.addr.to_string())
            .unwrap_or_default();
        let req = request.into_inner();
        if !req.cluster.is_empty() && req.cluster != self.cluster {
            tracing::warn!(peer = %addr, asked = ?req.cluster, "agent API: join refused: another cluster");
            return Err(Status::permission_denied(format!(
                "this controller serves cluster {:?}, not {:?}",
                self.cluster, req.cluster
            )));
        }
        // Joins are rare: the token's scope and a registered host's claim are checked
        // against the state as stored (read again only when it changed).
        let state = self
            .store
            .load_shared()
            .await
            .map_err(|e| Status::unavailable(gpushare_agent::error_chain(&e)))?;
        // A token minted for a registered host's id lets that host join with a new
        // key (after `host revoke`, or a lost key; issue 46 item 13).
        let token = tokens::peek(self.store.as_ref(), &req.token, unix_now())
            .await
            .map_err(|e| Status::unavailable(gpushare_agent::error_chain(&e)))?;
        let rekey_for = token.clone().flatten();
        let (facts, key) = registration::claim(&state, &req, rekey_for.as_deref()).inspect_err(|e| {
            tracing::warn!(peer = %addr, host = ?req.host_id, reason = ?e.message(), "agent API: join refused");
        })?;
        let revocations = self.revocations().await?;
        // A launched host bound to another key is refused before a token's use is
        // spent (a token minted for its id re-binds it).
        let claimed = if req.host_id.is_empty() {
            rekey_for.as_deref().unwrap_or(&facts.host_id)
        } else {
            &req.host_id
        };
        if token.is_some()
            && rekey_for.as_deref() != Some(claimed)
            && revocations.key(claimed).is_some_and(|k| k != key)
        {
            tracing::warn!(peer = %addr, host = ?claimed, "agent API: join refused: the launched host joined with another key");
            return Err(Status::permission_denied(
                revoke::RevokeError::KeyTaken {
                    host: claimed.to_string(),
                }
                .to_string(),
            ));
        }
        let (host, register) = match tokens::consume_for(
            self.store.as_ref(),
            &req.token,
            &req.host_id,
            &facts.host_id,
            &state,
            unix_now(),
        )
        .await
        {
            Ok(h) => h,
            Err(tokens::JoinRefusal::Tokens(e)) => {
                let msg = gpushare_agent::error_chain(&e);
                tracing::warn!(peer = %addr, error = %msg, "agent API: join failed");
                return Err(Status::unavailable(msg));
            }
            Err(refusal) => {
                // The refusal names the token's id, never the token.
                tracing::warn!(peer = %addr, host = ?req.host_id, reason = %refusal, "agent API: join refused");
                return Err(Status::permission_denied(refusal.to_string()));
            }
        };
        let launched = state
            .hosts
            .get(&host)
            .is_some_and(|h| h.registration.is_none());
        // A registered host re-keyed by a token for its id: only when the key changes
        // (the state lock is taken for it, and an apply may hold it).
        let rekey = rekey_for.as_deref() == Some(host.as_str())
            && state
                .hosts
                .get(&host)
                .and_then(|h| h.registration.as_ref())
                .is_some_and(|r| r.key_sha256 != key);
        let recorded = match register {
            Some(pool) => {
                registration::record(self.store.as_ref(), &host, &pool, &facts, &key, &addr).await
            }
            None if launched => {
                let replace = rekey_for.as_deref() == Some(host.as_str());
                self.bind_launched(&host, &key, replace, &addr).await
            }
            None if rekey => {
                registration::record_key(self.store.as_ref(), &host, &key, &addr).await
            }
            None => Ok(()),
        };
        if let Err(status) = recorded {
            if status.code() == tonic::Code::Unavailable {
                // It may pass: the use is given back, so the host tries again.
                if let Err(e) = tokens::give_back(self.store.as_ref(), &req.token).await {
                    tracing::warn!(peer = %addr, error = %gpushare_agent::error_chain(&e), "agent API: could not give a token's use back");
                }
            }
            return Err(status);
        }
        let id = self.identity(&host, &req.csr_der, &revocations)?;
        tracing::info!(peer = %addr, %host, "agent API: host joined");
        Ok(Response::new(id))
    }

    async fn renew(
        &self,
        request: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::Identity>, Status> {
        let (host, p) = caller(&request)?;
        let revocations = self.revocations().await?;
        if p.revoked(&host, &revocations) {
            tracing::warn!(peer = %p.addr, %host, "agent API: renewal refused: the certificate is revoked");
            return Err(revoked_status(&host));
        }
        self.bound(&host, &p).await?;
        let Some(h) = self.fleet_host(&host).await? else {
            tracing::warn!(peer = %p.addr, %host, "agent API: renewal refused: the host is not in the fleet");
            return Err(Status::permission_denied(format!(
                "host {host:?} is not in the fleet"
            )));
        };
        // A renewal with a new key moves the host's binding to it (the caller proved
        // it holds the bound one), so the renewed certificate is taken.
        let csr_der = &request.get_ref().csr_der;
        let new_key = registration::key_sha256(csr_der)
            .map_err(|e| Status::invalid_argument(gpushare_agent::error_chain(&e)))?;
        if p.key.as_deref() != Some(new_key.as_str()) {
            let addr = p.addr.to_string();
            if h.registration.is_some() {
                registration::record_key(self.store.as_ref(), &host, &new_key, &addr).await?;
            } else {
                self.bind_launched(&host, &new_key, true, &addr).await?;
            }
        }
        let id = self.identity(&host, csr_der, &revocations)?;
        tracing::info!(peer = %p.addr, %host, "agent API: host certificate renewed");
        Ok(Response::new(id))
    }

    type WatchAssignmentStream =
        tokio_stream::wrappers::ReceiverStream<Result<pb::Assignment, Status>>;

    async fn watch_assignment(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchAssignmentStream>, Status> {
        let (host, p) = caller(&request)?;
        let req = request.into_inner();
        if !req.host_id.is_empty() && req.host_id != host {
            tracing::warn!(peer = %p.addr, %host, asked = %req.host_id, "agent API: refused another host's assignment");
            return Err(Status::permission_denied(format!(
                "host {host:?} may read only its own assignment, not {:?}'s",
                req.host_id
            )));
        }
        self.bound(&host, &p).await?;
        let Some(mut rx) = self.hub.subscribe(&host) else {
            return Err(Status::unavailable(
                "the controller has not read the state yet",
            ));
        };
        let mut revocations = self.hub.revocations();
        let (tx, out) = mpsc::channel(4);
        let mut last = req.resume_version;
        tokio::spawn(async move {
            loop {
                // A revoked certificate is told what a removed host is (its agent
                // stops every task), then refused.
                if p.revoked(&host, &revocations.borrow_and_update()) {
                    tracing::warn!(peer = %p.addr, %host, "agent API: assignment refused: the certificate is revoked");
                    let removed = HostView::removed();
                    if removed.version != last {
                        let _ = tx.send(Ok(to_pb(&removed))).await;
                    }
                    let _ = tx.send(Err(revoked_status(&host))).await;
                    return;
                }
                let v = rx.borrow_and_update().clone();
                if v.version != last {
                    if tx.send(Ok(to_pb(&v))).await.is_err() {
                        return;
                    }
                    last = v.version;
                }
                tokio::select! {
                    r = rx.changed() => if r.is_err() { return },
                    r = revocations.changed() => if r.is_err() { return },
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            out,
        )))
    }

    async fn report(
        &self,
        request: Request<pb::ReportRequest>,
    ) -> Result<Response<pb::ReportResponse>, Status> {
        let (host, p) = caller(&request)?;
        if p.revoked(&host, &self.hub.revocations().borrow()) {
            tracing::warn!(peer = %p.addr, %host, "agent API: report refused: the certificate is revoked");
            return Err(revoked_status(&host));
        }
        let mut report: HostReport = serde_json::from_slice(&request.get_ref().report_json)
            .map_err(|e| Status::invalid_argument(format!("the report is not valid: {e}")))?;
        if report.host_id != host {
            tracing::warn!(peer = %p.addr, %host, report_for = ?report.host_id, "agent API: refused a report for another host");
            return Err(Status::permission_denied(format!(
                "host {host:?} may write only its own report, not {:?}'s",
                report.host_id
            )));
        }
        self.bound(&host, &p).await?;
        // Stamped with this controller's time; bounded; texts cleaned (issue 46).
        let now = unix_now();
        report.accept(now).map_err(|why| {
            tracing::warn!(peer = %p.addr, %host, %why, "agent API: report refused");
            Status::invalid_argument(why)
        })?;
        if let Some(ahead) = report
            .agent_at
            .and_then(|a| a.checked_sub(now))
            .filter(|d| *d > 300)
        {
            tracing::warn!(peer = %p.addr, %host, ahead_s = ahead, "agent API: the host's clock is ahead of the controller's; its report is stamped with the controller's time");
        }
        // Heard, whether or not the store takes the report now.
        if let Some(heard) = &self.heard {
            heard.heard(&host, now);
        }
        // A store that does not take the report soon (down, frozen) is not waited
        // for: the agent reports again at its next interval, and is heard each time.
        match tokio::time::timeout(REPORT_WRITE_TIMEOUT, self.store.put_report(&report)).await {
            Ok(Ok(())) => Ok(Response::new(pb::ReportResponse {})),
            Ok(Err(e)) => Err(Status::unavailable(gpushare_agent::error_chain(&e))),
            Err(_) => Err(Status::unavailable(format!(
                "the store did not take the report within {} s; it was heard, report again",
                REPORT_WRITE_TIMEOUT.as_secs()
            ))),
        }
    }
}

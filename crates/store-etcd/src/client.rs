//! gpushare's etcd v3 client, over the tonic client that build.rs generates from
//! `proto/` (gpushare's own description of the part of etcd's API it calls).
//!
//! - One channel balanced over every endpoint, with a connect timeout, a timeout on
//!   each request, HTTP/2 keep-alive, and TLS (a CA, optionally a client identity).
//! - Username and password: [`Client::connect`] calls `Auth.Authenticate` and every
//!   request carries the token in the `token` metadata header. When etcd answers that
//!   the token is no longer good (etcd 3.4's simple tokens expire after 5 minutes
//!   without use; a changed auth store outdates them), the client authenticates again,
//!   once, and repeats the request.
//! - Requests are etcd's own messages with a few builders ([`RangeRequest::new`],
//!   [`PutRequest::new`], [`Compare::version`], [`TxnRequest::when`], …); watches and
//!   lease keep-alives are bidirectional streams ([`WatchStream`], [`LeaseKeeper`]).

use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::mpsc;
use tonic::metadata::AsciiMetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::url::Secret;
use gpushare_core::util::{read_lock, write_lock};

/// The generated messages and clients.
pub mod proto {
    #![allow(clippy::all, missing_docs)]
    pub mod mvccpb {
        tonic::include_proto!("mvccpb");
    }
    pub mod authpb {
        tonic::include_proto!("authpb");
    }
    pub mod etcdserverpb {
        tonic::include_proto!("etcdserverpb");
    }
}

pub use proto::authpb::{permission::Type as PermissionType, Permission};
use proto::etcdserverpb as pb;
pub use proto::etcdserverpb::Compare;
pub use proto::etcdserverpb::{
    compare::CompareResult as CompareOp, DeleteRangeRequest, DeleteRangeResponse,
    LeaseGrantResponse, PutRequest, PutResponse, RangeRequest, RangeResponse, RequestOp,
    ResponseHeader, TxnRequest, TxnResponse, WatchCreateRequest, WatchResponse,
};
pub use proto::mvccpb::{event::EventType, Event, KeyValue};

/// HTTP/2 pings on an idle connection, so a dead member is noticed.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// How long a ping may go unanswered before the connection is given up.
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Requests queued on a stream (watch, lease keep-alive) before sending waits.
const STREAM_QUEUE: usize = 4;

/// How to reach etcd.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `http://host:port` or `https://host:port` (with [`ClientConfig::tls`]), one per
    /// member; requests are balanced over them.
    pub endpoints: Vec<String>,
    pub tls: Option<Tls>,
    pub credentials: Option<Credentials>,
    /// Bound on opening a connection to one member.
    pub connect_timeout: Duration,
    /// Bound on one request (until its answer, or a stream's first answer, arrives).
    pub request_timeout: Duration,
    /// The largest answer accepted (tonic's default of 4 MiB is too small for a page
    /// of large values).
    pub max_decode: usize,
}

impl ClientConfig {
    /// Plain HTTP to `endpoints`, no credentials, the default timeouts.
    pub fn new(endpoints: impl IntoIterator<Item = impl Into<String>>) -> ClientConfig {
        ClientConfig {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            tls: None,
            credentials: None,
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(30),
            max_decode: 4 * 1024 * 1024,
        }
    }
}

/// TLS: the CA bundle that signed the members' certificates (none: the client's
/// default roots) and, for mutual TLS, the client's certificate and key (PEM).
#[derive(Clone, Default)]
pub struct Tls {
    pub ca_pem: Option<Vec<u8>>,
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("ca", &self.ca_pem.is_some())
            .field("identity", &self.identity.is_some())
            .finish()
    }
}

/// An etcd user and its password (never logged).
#[derive(Debug, Clone)]
pub struct Credentials {
    pub user: String,
    pub password: Secret,
}

/// What went wrong talking to etcd.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// etcd, or the transport to it, answered a request with an error.
    #[error("etcd answered {:?}: {}", .0.code(), .0.message())]
    Status(#[source] tonic::Status),
    #[error("{endpoint:?} is not an etcd endpoint URL")]
    Endpoint {
        endpoint: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("the TLS settings for {endpoint} are not usable")]
    Tls {
        endpoint: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("no etcd endpoint given")]
    NoEndpoint,
    #[error("etcd's authentication token is not a valid header value")]
    Token,
    /// etcd closed a stream (a watch, a lease keep-alive) that was still wanted.
    #[error("etcd closed the {0} stream")]
    Closed(&'static str),
}

impl From<tonic::Status> for ClientError {
    fn from(s: tonic::Status) -> Self {
        ClientError::Status(s)
    }
}

impl ClientError {
    /// The error status etcd answered with, if that is what this is.
    pub fn status(&self) -> Option<&tonic::Status> {
        match self {
            ClientError::Status(s) => Some(s),
            _ => None,
        }
    }
}

/// Adds the current authentication token (if any) to every request.
#[derive(Clone, Default)]
struct TokenInterceptor(Arc<RwLock<Option<AsciiMetadataValue>>>);

impl tonic::service::Interceptor for TokenInterceptor {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let token = read_lock(&self.0).clone();
        if let Some(t) = token {
            req.metadata_mut().insert("token", t);
        }
        Ok(req)
    }
}

type Svc = InterceptedService<Channel, TokenInterceptor>;

/// The credentials and the token they got, shared by a client's clones.
struct Session {
    credentials: Option<Credentials>,
    token: TokenInterceptor,
    /// Bumped on each new token, so concurrent callers refused with the same stale
    /// token authenticate once between them.
    generation: std::sync::atomic::AtomicU64,
    refreshing: tokio::sync::Mutex<()>,
    /// `Authenticate` goes without a token.
    auth: pb::auth_client::AuthClient<Channel>,
}

/// An etcd v3 client. Cheap to clone (clones share the connection and the token).
#[derive(Clone)]
pub struct Client {
    kv: pb::kv_client::KvClient<Svc>,
    watch: pb::watch_client::WatchClient<Svc>,
    lease: pb::lease_client::LeaseClient<Svc>,
    auth: pb::auth_client::AuthClient<Svc>,
    session: Arc<Session>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field(
                "user",
                &self.session.credentials.as_ref().map(|c| c.user.as_str()),
            )
            .finish_non_exhaustive()
    }
}

/// Whether etcd refused a request for its token (expired, unknown, outdated, or
/// missing), so that authenticating again may help.
fn token_refused(s: &tonic::Status) -> bool {
    s.code() == tonic::Code::Unauthenticated
        || [
            "invalid auth token",
            "user name is empty",
            "revision of auth store is old",
        ]
        .iter()
        .any(|m| s.message().contains(m))
}

impl Client {
    /// Connect to the endpoints in `config`. Connecting is lazy (the first request
    /// opens the connection) unless credentials are given: then this authenticates.
    pub async fn connect(config: ClientConfig) -> Result<Client, ClientError> {
        let mut endpoints = Vec::with_capacity(config.endpoints.len());
        for url in &config.endpoints {
            let mut ep = Endpoint::from_shared(url.clone())
                .map_err(|source| ClientError::Endpoint {
                    endpoint: url.clone(),
                    source,
                })?
                .connect_timeout(config.connect_timeout)
                .timeout(config.request_timeout)
                .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
                .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
                .keep_alive_while_idle(true);
            if let Some(tls) = &config.tls {
                let mut t = ClientTlsConfig::new();
                if let Some(ca) = &tls.ca_pem {
                    t = t.ca_certificate(Certificate::from_pem(ca));
                }
                if let Some((cert, key)) = &tls.identity {
                    t = t.identity(Identity::from_pem(cert, key));
                }
                ep = ep.tls_config(t).map_err(|source| ClientError::Tls {
                    endpoint: url.clone(),
                    source,
                })?;
            }
            endpoints.push(ep);
        }
        if endpoints.is_empty() {
            return Err(ClientError::NoEndpoint);
        }
        let channel = Channel::balance_list(endpoints.into_iter());
        let token = TokenInterceptor::default();
        let max = config.max_decode;
        let client = Client {
            kv: pb::kv_client::KvClient::with_interceptor(channel.clone(), token.clone())
                .max_decoding_message_size(max),
            watch: pb::watch_client::WatchClient::with_interceptor(channel.clone(), token.clone())
                .max_decoding_message_size(max),
            lease: pb::lease_client::LeaseClient::with_interceptor(channel.clone(), token.clone())
                .max_decoding_message_size(max),
            auth: pb::auth_client::AuthClient::with_interceptor(channel.clone(), token.clone()),
            session: Arc::new(Session {
                credentials: config.credentials,
                token,
                generation: Default::default(),
                refreshing: Default::default(),
                auth: pb::auth_client::AuthClient::new(channel),
            }),
        };
        if client.session.credentials.is_some() {
            client.authenticate().await?;
        }
        Ok(client)
    }

    /// Get a new token for the credentials (nothing without credentials).
    pub async fn authenticate(&self) -> Result<(), ClientError> {
        let Some(c) = &self.session.credentials else {
            return Ok(());
        };
        let resp = self
            .session
            .auth
            .clone()
            .authenticate(pb::AuthenticateRequest {
                name: c.user.clone(),
                password: c.password.expose().to_string(),
            })
            .await?
            .into_inner();
        let token: AsciiMetadataValue = resp.token.parse().map_err(|_| ClientError::Token)?;
        *write_lock(&self.session.token.0) = Some(token);
        self.session
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        tracing::debug!(user = %c.user, "authenticated to etcd");
        Ok(())
    }

    /// Run `call`; when etcd refuses its token and there are credentials, authenticate
    /// again (once among callers that failed with the same token) and run it again.
    async fn authed<T, F, Fut>(&self, call: F) -> Result<T, ClientError>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        use std::sync::atomic::Ordering;
        let generation = self.session.generation.load(Ordering::SeqCst);
        match call(self.clone()).await {
            Ok(v) => Ok(v),
            Err(s) if self.session.credentials.is_some() && token_refused(&s) => {
                {
                    let _one = self.session.refreshing.lock().await;
                    if self.session.generation.load(Ordering::SeqCst) == generation {
                        tracing::debug!(
                            answer = s.message(),
                            "etcd refused the token; authenticating again"
                        );
                        self.authenticate().await?;
                    }
                }
                Ok(call(self.clone()).await?)
            }
            Err(s) => Err(s.into()),
        }
    }

    pub async fn range(&self, req: RangeRequest) -> Result<RangeResponse, ClientError> {
        self.authed(|mut c| {
            let r = req.clone();
            async move { Ok(c.kv.range(r).await?.into_inner()) }
        })
        .await
    }

    /// The value of one key, if it exists.
    pub async fn get(&self, key: impl Into<Vec<u8>>) -> Result<Option<KeyValue>, ClientError> {
        Ok(self
            .range(RangeRequest::new(key))
            .await?
            .kvs
            .into_iter()
            .next())
    }

    pub async fn put(&self, req: PutRequest) -> Result<PutResponse, ClientError> {
        self.authed(|mut c| {
            let r = req.clone();
            async move { Ok(c.kv.put(r).await?.into_inner()) }
        })
        .await
    }

    pub async fn delete(
        &self,
        req: DeleteRangeRequest,
    ) -> Result<DeleteRangeResponse, ClientError> {
        self.authed(|mut c| {
            let r = req.clone();
            async move { Ok(c.kv.delete_range(r).await?.into_inner()) }
        })
        .await
    }

    pub async fn txn(&self, req: TxnRequest) -> Result<TxnResponse, ClientError> {
        self.authed(|mut c| {
            let r = req.clone();
            async move { Ok(c.kv.txn(r).await?.into_inner()) }
        })
        .await
    }

    /// A new lease of `ttl_secs` seconds (etcd picks its id).
    pub async fn lease_grant(&self, ttl_secs: i64) -> Result<LeaseGrantResponse, ClientError> {
        self.authed(|mut c| async move {
            Ok(c.lease
                .lease_grant(pb::LeaseGrantRequest {
                    ttl: ttl_secs,
                    id: 0,
                })
                .await?
                .into_inner())
        })
        .await
    }

    /// End lease `id` now: the keys under it go.
    pub async fn lease_revoke(&self, id: i64) -> Result<(), ClientError> {
        self.authed(|mut c| async move {
            c.lease
                .lease_revoke(pb::LeaseRevokeRequest { id })
                .await
                .map(|_| ())
        })
        .await
    }

    /// A stream to refresh lease `id` on ([`LeaseKeeper::keep_alive`]).
    pub async fn lease_keep_alive(&self, id: i64) -> Result<LeaseKeeper, ClientError> {
        self.authed(|mut c| async move {
            let (tx, rx) = mpsc::channel(STREAM_QUEUE);
            // etcd answers (and so opens the stream) only once it has a request.
            tx.send(pb::LeaseKeepAliveRequest { id })
                .await
                .map_err(|_| tonic::Status::cancelled("the keep-alive request was dropped"))?;
            let answers = c
                .lease
                .lease_keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await?
                .into_inner();
            Ok(LeaseKeeper {
                id,
                tx,
                answers,
                sent: true,
            })
        })
        .await
    }

    /// Watch what `create` names (a key, or a range with `range_end`) from its
    /// `start_revision` on.
    pub async fn watch(&self, create: WatchCreateRequest) -> Result<WatchStream, ClientError> {
        self.authed(|mut c| {
            let create = create.clone();
            async move {
                let (tx, rx) = mpsc::channel(STREAM_QUEUE);
                // Queued before the stream opens: etcd answers it at once, which is
                // also the first answer the request timeout waits for.
                let first = pb::WatchRequest {
                    request_union: Some(pb::watch_request::RequestUnion::CreateRequest(create)),
                };
                tx.send(first)
                    .await
                    .map_err(|_| tonic::Status::cancelled("the watch request was dropped"))?;
                let answers = c
                    .watch
                    .watch(tokio_stream::wrappers::ReceiverStream::new(rx))
                    .await?
                    .into_inner();
                Ok(WatchStream { tx, answers })
            }
        })
        .await
    }

    /// The user and role calls of an administrator (tests set up RBAC with them).
    pub fn admin(&self) -> Admin {
        Admin {
            client: self.clone(),
        }
    }
}

/// Refreshes one lease over a stream; dropping it ends the stream.
#[derive(Debug)]
pub struct LeaseKeeper {
    id: i64,
    tx: mpsc::Sender<pb::LeaseKeepAliveRequest>,
    answers: tonic::Streaming<pb::LeaseKeepAliveResponse>,
    /// A refresh is sent and its answer not yet read (the one that opened the stream).
    sent: bool,
}

impl LeaseKeeper {
    /// Refresh the lease once; its TTL again in seconds (0 or less: the lease is gone).
    pub async fn keep_alive(&mut self) -> Result<i64, ClientError> {
        if !self.sent {
            self.tx
                .send(pb::LeaseKeepAliveRequest { id: self.id })
                .await
                .map_err(|_| ClientError::Closed("lease keep-alive"))?;
            self.sent = true;
        }
        let answer = self.answers.message().await?;
        self.sent = false;
        match answer {
            Some(r) => Ok(r.ttl),
            None => Err(ClientError::Closed("lease keep-alive")),
        }
    }
}

/// One watch; dropping it ends the stream.
#[derive(Debug)]
pub struct WatchStream {
    tx: mpsc::Sender<pb::WatchRequest>,
    answers: tonic::Streaming<WatchResponse>,
}

impl WatchStream {
    /// The next answer: events, a progress notice (no events), or the cancellation
    /// (`canceled`, with `compact_revision` when the start revision was compacted).
    /// `None` when etcd ended the stream.
    pub async fn message(&mut self) -> Result<Option<WatchResponse>, ClientError> {
        Ok(self.answers.message().await?)
    }

    /// Ask etcd for a progress notice (an answer without events whose header says up
    /// to which revision everything was sent).
    pub async fn request_progress(&self) -> Result<(), ClientError> {
        let req = pb::WatchRequest {
            request_union: Some(pb::watch_request::RequestUnion::ProgressRequest(
                pb::WatchProgressRequest {},
            )),
        };
        self.tx
            .send(req)
            .await
            .map_err(|_| ClientError::Closed("watch"))
    }
}

/// Users, roles and turning authentication on.
#[derive(Debug, Clone)]
pub struct Admin {
    client: Client,
}

macro_rules! admin_call {
    ($client:expr, $method:ident, $req:expr) => {{
        let req = $req;
        $client
            .authed(|mut c| {
                let r = req.clone();
                async move { c.auth.$method(r).await.map(|_| ()) }
            })
            .await
    }};
}

impl Admin {
    pub async fn user_add(&self, name: &str, password: &str) -> Result<(), ClientError> {
        admin_call!(
            self.client,
            user_add,
            pb::AuthUserAddRequest {
                name: name.into(),
                password: password.into(),
            }
        )
    }

    pub async fn role_add(&self, name: &str) -> Result<(), ClientError> {
        admin_call!(
            self.client,
            role_add,
            pb::AuthRoleAddRequest { name: name.into() }
        )
    }

    pub async fn role_grant_permission(
        &self,
        role: &str,
        perm: Permission,
    ) -> Result<(), ClientError> {
        admin_call!(
            self.client,
            role_grant_permission,
            pb::AuthRoleGrantPermissionRequest {
                name: role.into(),
                perm: Some(perm),
            }
        )
    }

    pub async fn user_grant_role(&self, user: &str, role: &str) -> Result<(), ClientError> {
        admin_call!(
            self.client,
            user_grant_role,
            pb::AuthUserGrantRoleRequest {
                user: user.into(),
                role: role.into(),
            }
        )
    }

    pub async fn auth_enable(&self) -> Result<(), ClientError> {
        admin_call!(self.client, auth_enable, pb::AuthEnableRequest {})
    }
}

mod messages;
pub use messages::prefix_end;

#[cfg(test)]
mod tests;

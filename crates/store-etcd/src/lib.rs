//! The `etcd` store: gpushare's system of record in an etcd v3 cluster, for fleets,
//! for agents on other machines and for several reconcilers.
//!
//! `store = "etcd://host:2379[,host2:2379,...]/prefix"` (default prefix `gpushare`; use one
//! prefix per cluster, e.g. `/gpushare/prod`). Under `<prefix>/`:
//!
//! | key | value |
//! | --- | --- |
//! | `state/meta` | `{"format":1,"serial":N,"cluster":"…","staged":null}`, and the recent `capacity_refusals` when there are any |
//! | `state/d/res/<kind.name>` | one applied resource |
//! | `state/d/rev/<family>` | the revisions of one task-definition family |
//! | `state/d/host/<host id>` | one host |
//! | `state/d/task/<task id>` | one task (agents watch these) |
//! | `state/stage/<token>/<res\|rev\|host\|task>/<id>` | a large commit's staged values (empty: deleted) |
//! | `commit` | the claim of a large commit in progress (leased) |
//! | `journal/head`, `journal/plan/<id>/<n>`, `journal/done` | the apply journal, in chunks |
//! | `lock` | the apply lock, naming its holder (leased) |
//! | `leader` | the leading reconciler (leased; [`EtcdStore::campaign`]) |
//! | `report/<host id>` | an agent's report (leased: the heartbeat) |
//! | `status` | the last reconcile pass's status record (`gpushare status`) |
//!
//! docs/etcd.md has the whole design, the RBAC roles, TLS and operations.
//!
//! # Commits
//! A commit compares and swaps on the state it was computed from, and writes only the
//! keys that changed (plus `state/meta`, which carries the serial). The guard is
//! "`state/meta` is at the revision the writer read, and no large commit is claimed"
//! (after reading a large commit's unfinished copy: "no key under `state/` changed
//! since", an etcd range compare), so a writer that lost the race gets
//! [`StoreError::Conflict`] and has written nothing.
//!
//! A change that fits in one transaction (at most [`EtcdOptions::max_txn_ops`]
//! operations and [`EtcdOptions::max_txn_bytes`] bytes; etcd 3.4 refuses more than 128
//! operations or 1.5 MiB by default) is that one transaction. A larger one (the first
//! commit of a 10,000-task state) is staged:
//! 1. claim `commit` (leased, kept alive) under the same guard;
//! 2. write every changed value under `state/stage/<token>/` in as many transactions as
//!    needed, each guarded by the claim: readers ignore these keys;
//! 3. flip: one small transaction sets `state/meta` to the new serial with
//!    `staged: <token>`. From this revision on, readers see the stored keys overlaid
//!    with the staged ones, which is exactly the new state;
//! 4. copy the staged values into `state/d/` (chunked, guarded by the claim), then one
//!    transaction clears `staged`, deletes `state/stage/` and the claim.
//!
//! A writer that dies before the flip leaves only ignored staged keys (the next commit
//! deletes them); one that dies after it leaves a committed state that every reader
//! already sees whole, and the next commit rewrites whatever the copy had not reached
//! (it diffs against the keys as stored). Nothing relies on etcd's history, so
//! compaction never breaks a load.

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, KeyValue, PutOptions,
    Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use gpushare_core::model::{AppliedResource, Host, HostReport, Revision, StoreState, Task};
use gpushare_engine::store::{Journal, Leader, LockGuard, StatusRecord, Store, StoreError};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod commit;
use commit::Outcome;
mod leader;
mod snapshot;
use snapshot::Snapshot;
mod lease;
mod url;
mod watch;

pub use leader::Leadership;
pub use url::{
    CredentialsError, EtcdOptions, EtcdUrl, Secret, UrlError, DEFAULT_PORT, DEFAULT_PREFIX,
};
pub use url::{ENV_CACERT, ENV_CERT, ENV_KEY, ENV_PASSWORD, ENV_USERNAME};
pub use watch::AssignmentWatch;

use lease::KeepAlive;

const META: &str = "state/meta";
const STATE: &str = "state/";
const DATA: &str = "state/d/";
const STAGE: &str = "state/stage/";
const CLAIM: &str = "commit";
const LOCK: &str = "lock";
const JOURNAL: &str = "journal/";
const JOURNAL_HEAD: &str = "journal/head";
const JOURNAL_DONE: &str = "journal/done";
const JOURNAL_PLAN: &str = "journal/plan/";
const REPORTS: &str = "report/";
/// The last reconcile pass's status record.
const STATUS: &str = "status";
/// The store's identity (see `StoreState::store_id`), made once with create-if-absent.
const STORE_ID: &str = "store-id";
/// Keys per page when reading a range (responses stay far below the decoding limit).
const PAGE: i64 = 1000;
/// The most a response may be (tonic's default of 4 MiB is too small for a page of
/// large revision families).
const MAX_DECODE: usize = 256 * 1024 * 1024;
const LOCK_POLL: Duration = Duration::from_millis(100);
/// How many times a commit re-reads after a concurrent change that left the serial as it was.
const COMMIT_ATTEMPTS: usize = 8;
const META_FORMAT: u32 = 1;

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Url(#[from] UrlError),
    #[error("cannot read the {what} {path} for {url}")]
    TlsFile {
        url: String,
        what: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{url}: {problem}")]
    Config { url: String, problem: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// An etcd operation that failed, for [`StoreError::Unreachable`]'s source.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub struct EtcdOpError {
    pub what: String,
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

#[derive(Debug, thiserror::Error)]
#[error("no answer within {seconds} s")]
struct TimedOut {
    seconds: f64,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Message(String);

/// Who holds the apply lock, as written to `<prefix>/lock`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdLockInfo {
    pub user: String,
    pub hostname: String,
    pub pid: u32,
    /// What the holder is doing, e.g. `gpushare apply`.
    pub command: String,
    /// RFC 3339, UTC.
    pub since: String,
}

impl std::fmt::Display for EtcdLockInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} (user {}, pid {} on {})",
            self.command, self.user, self.pid, self.hostname
        )
    }
}

/// What this handle has written of the state and the journal, for measuring what an
/// apply step costs etcd ([`EtcdStore::write_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Successful write transactions.
    pub txns: u64,
    /// Keys put.
    pub puts: u64,
    /// Keys (or, for a prefix, ranges) deleted.
    pub deletes: u64,
    /// Bytes of keys and values put.
    pub bytes: u64,
}

/// `state/meta`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Meta {
    format: u32,
    serial: u64,
    cluster: String,
    /// The token of a flipped large commit whose staged values are not yet copied.
    #[serde(default)]
    staged: Option<String>,
    /// `StoreState::capacity_refusals` (a few recent entries: they ride with the meta).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    capacity_refusals: Vec<gpushare_core::facts::CapacityRefusal>,
}

/// `commit`: who is writing a large commit.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Claim {
    token: String,
    serial: u64,
    holder: String,
    since: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct JournalHead {
    id: String,
    chunks: usize,
    bytes: usize,
    /// Which apply the journal is (so a position is only ever written to its own).
    #[serde(default)]
    holder: String,
    #[serde(default)]
    base_serial: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct JournalDone {
    id: String,
    done: usize,
}

/// The `etcd` store. Cheap to clone (clones share the connection and caches).
#[derive(Clone)]
pub struct EtcdStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    url: EtcdUrl,
    location: String,
    opts: EtcdOptions,
    has_user: bool,
    /// The last snapshot this handle read or wrote (commits diff against it).
    cache: Mutex<Option<Arc<Snapshot>>>,
    /// Report leases by host id.
    report_leases: Mutex<HashMap<String, i64>>,
    /// The id and head revision of the journal this handle last wrote or read.
    journal_id: Mutex<Option<(String, i64)>>,
    #[doc(hidden)]
    failpoint: Mutex<Option<Failpoint>>,
    stats: Mutex<WriteStats>,
    /// This store's identity; empty when these credentials may not read it (an agent's).
    store_id: Mutex<String>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("location", &self.inner.location)
            .finish_non_exhaustive()
    }
}

/// Test hook: stop a large commit at a point, as if its writer died there (the claim
/// is left to expire). Not for production use.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failpoint {
    /// After the values are staged, before the flip.
    BeforeFlip,
    /// After the flip, before any staged value is copied.
    AfterFlip,
}

impl EtcdStore {
    /// Open `url` (`etcd://…`) with `options` (see [`EtcdOptions::from_env`]), checking
    /// that the store answers within `options.connect_timeout`.
    pub async fn open(url: &str, options: EtcdOptions) -> Result<EtcdStore, OpenError> {
        let url = EtcdUrl::parse(url)?;
        EtcdStore::connect(url, options).await
    }

    pub async fn connect(url: EtcdUrl, options: EtcdOptions) -> Result<EtcdStore, OpenError> {
        let opts = options.merged_with(&url);
        let location = url.location();
        if opts.max_txn_ops < 4 || opts.max_txn_bytes < 4096 {
            return Err(OpenError::Config {
                url: location,
                problem: "max_txn_ops must be at least 4 and max_txn_bytes at least 4096".into(),
            });
        }
        let mut connect = ConnectOptions::new()
            .with_connect_timeout(opts.connect_timeout)
            .with_timeout(opts.request_timeout)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5));
        let tls = build_tls(&opts, &location)?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        if let Some(tls) = tls {
            connect = connect.with_tls(tls);
        }
        let has_user = match (&opts.username, &opts.password) {
            (Some(u), Some(p)) => {
                connect = connect.with_user(u.clone(), p.expose().to_string());
                true
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err(OpenError::Config {
                    url: location,
                    problem: format!("give both {ENV_USERNAME} and {ENV_PASSWORD}, or neither"),
                })
            }
            (None, None) => false,
        };
        let endpoints: Vec<String> = url
            .endpoints
            .iter()
            .map(|e| format!("{scheme}://{e}"))
            .collect();
        let unreachable =
            |source: Box<dyn std::error::Error + Send + Sync>| StoreError::Unreachable {
                location: location.clone(),
                source,
            };
        // Connecting is lazy unless credentials are given; either way, bounded.
        let client = match tokio::time::timeout(
            opts.connect_timeout + Duration::from_secs(1),
            Client::connect(&endpoints, Some(connect)),
        )
        .await
        {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(classify(&location, "connecting".into(), e).into()),
            Err(_) => {
                return Err(unreachable(Box::new(TimedOut {
                    seconds: opts.connect_timeout.as_secs_f64(),
                }))
                .into())
            }
        };
        let store = EtcdStore {
            inner: Arc::new(Inner {
                client,
                location: location.clone(),
                url,
                has_user,
                cache: Mutex::new(None),
                report_leases: Mutex::new(HashMap::new()),
                journal_id: Mutex::new(None),
                failpoint: Mutex::new(None),
                stats: Mutex::new(WriteStats::default()),
                store_id: Mutex::new(String::new()),
                opts,
            }),
        };
        // One cheap read proves the store answers (and that we may read it).
        let probe = store.key(META);
        let timeout = store.inner.opts.connect_timeout + Duration::from_secs(1);
        let mut c = store.inner.client.clone();
        match tokio::time::timeout(
            timeout,
            c.get(probe, Some(GetOptions::new().with_count_only())),
        )
        .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(classify(&location, "reading the state".into(), e).into()),
            Err(_) => {
                return Err(unreachable(Box::new(TimedOut {
                    seconds: timeout.as_secs_f64(),
                }))
                .into())
            }
        }
        let id = store.ensure_store_id().await?;
        *lock(&store.inner.store_id) = id;
        tracing::debug!(store = %location, "connected to etcd");
        Ok(store)
    }

    /// The store's identity: read, or created once with a create-if-absent transaction
    /// (so concurrent first opens agree). Credentials that may neither read nor create
    /// it (an agent's, under the documented roles) get an empty id: agents never
    /// launch or terminate, which is all the id guards.
    async fn ensure_store_id(&self) -> Result<String, StoreError> {
        let key = self.key(STORE_ID);
        let fresh = gpushare_engine::store::new_store_id();
        let txn = Txn::new()
            .when(vec![Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then(vec![TxnOp::put(key.clone(), fresh.clone(), None)])
            .or_else(vec![TxnOp::get(key.clone(), None)]);
        let mut c = self.inner.client.clone();
        let resp = match c.txn(txn).await {
            Ok(r) => r,
            Err(e) => {
                return match classify(&self.inner.location, "creating the store id".into(), e) {
                    StoreError::Io { source, .. }
                        if source.kind() == std::io::ErrorKind::PermissionDenied =>
                    {
                        tracing::debug!(store = %self.inner.location, "these credentials may not read the store id");
                        Ok(String::new())
                    }
                    other => Err(other),
                }
            }
        };
        if resp.succeeded() {
            tracing::info!(store = %self.inner.location, store_id = %fresh, "created the store's identity");
            return Ok(fresh);
        }
        let found = resp
            .op_responses()
            .into_iter()
            .find_map(|op| match op {
                etcd_client::TxnOpResponse::Get(g) => g
                    .kvs()
                    .first()
                    .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()),
                _ => None,
            })
            .unwrap_or_default();
        if !gpushare_engine::store::valid_store_id(&found) {
            return Err(StoreError::InvalidStoreId {
                path: format!("{} ({key})", self.inner.location),
                found,
            });
        }
        Ok(found)
    }

    /// This store's identity (empty for credentials that may not read it).
    pub fn store_id(&self) -> String {
        lock(&self.inner.store_id).clone()
    }

    /// The parsed URL (endpoints and prefix).
    pub fn url(&self) -> &EtcdUrl {
        &self.inner.url
    }

    /// What this handle has written of the state and journal so far (take the
    /// difference around an operation to measure it).
    pub fn write_stats(&self) -> WriteStats {
        *lock(&self.inner.stats)
    }

    fn tally(&self, puts: usize, deletes: usize, bytes: usize) {
        let mut s = lock(&self.inner.stats);
        s.txns += 1;
        s.puts += puts as u64;
        s.deletes += deletes as u64;
        s.bytes += bytes as u64;
    }

    /// Puts, deletes and bytes of writing `changes` under `under`.
    fn measure(&self, under: &str, changes: &[(&str, Option<&[u8]>)]) -> (usize, usize, usize) {
        let klen = self.inner.url.prefix.len() + 1 + under.len();
        changes
            .iter()
            .fold((0, 0, 0), |(p, d, b), (rel, v)| match v {
                Some(v) => (p + 1, d, b + klen + rel.len() + v.len()),
                None => (p, d + 1, b),
            })
    }

    #[doc(hidden)]
    pub fn set_failpoint(&self, f: Option<Failpoint>) {
        *lock(&self.inner.failpoint) = f;
    }

    fn key(&self, rel: &str) -> String {
        format!("{}/{}", self.inner.url.prefix, rel)
    }

    fn rel<'a>(&self, key: &'a [u8], under: &str) -> Option<&'a str> {
        let k = std::str::from_utf8(key).ok()?;
        k.strip_prefix(self.inner.url.prefix.as_str())?
            .strip_prefix('/')?
            .strip_prefix(under)
    }

    fn unreachable(
        &self,
        what: String,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> StoreError {
        StoreError::Unreachable {
            location: self.inner.location.clone(),
            source: Box::new(EtcdOpError {
                what,
                source: Box::new(source),
            }),
        }
    }

    fn corrupt(&self, rel: &str, source: serde_json::Error) -> StoreError {
        StoreError::Corrupt {
            path: format!("{}/{}", self.inner.location, rel),
            source,
        }
    }

    fn corrupt_msg(&self, rel: &str, msg: String) -> StoreError {
        self.corrupt(rel, <serde_json::Error as serde::de::Error>::custom(msg))
    }

    /// Run one etcd call, bounded by the request timeout, re-authenticating once if the
    /// token expired.
    async fn call<T, F, Fut>(&self, what: impl Fn() -> String, f: F) -> Result<T, StoreError>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let limit = self.inner.opts.request_timeout;
        let deadline = tokio::time::Instant::now() + limit;
        let mut refreshed = false;
        let mut backoff = Duration::from_millis(50);
        loop {
            match tokio::time::timeout_at(deadline, f(self.inner.client.clone())).await {
                Ok(Ok(v)) => return Ok(v),
                // A member went away or the cluster is electing a leader: try again (on
                // another member) until the deadline. Every call is safe to repeat: the
                // writes are guarded, and a guarded write that landed before its answer
                // was lost is recognised by its caller.
                Ok(Err(e))
                    if is_transient(&e) && tokio::time::Instant::now() + backoff < deadline =>
                {
                    tracing::debug!(what = %what(), error = %e, "etcd call failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                Ok(Err(etcd_client::Error::GRpcStatus(s)))
                    if !refreshed
                        && self.inner.has_user
                        && s.code() == tonic::Code::Unauthenticated =>
                {
                    refreshed = true;
                    if let Err(e) = self.inner.client.refresh_token().await {
                        return Err(classify(&self.inner.location, what(), e));
                    }
                }
                Ok(Err(e)) => return Err(classify(&self.inner.location, what(), e)),
                Err(_) => {
                    return Err(self.unreachable(
                        what(),
                        TimedOut {
                            seconds: limit.as_secs_f64(),
                        },
                    ))
                }
            }
        }
    }

    async fn txn(&self, what: impl Fn() -> String, txn: Txn) -> Result<TxnResponse, StoreError> {
        self.call(what, |c| {
            let t = txn.clone();
            async move {
                c.kv_client()
                    .max_decoding_message_size(MAX_DECODE)
                    .txn(t)
                    .await
            }
        })
        .await
    }

    async fn get_one(&self, rel: &str) -> Result<Option<KeyValue>, StoreError> {
        let key = self.key(rel);
        let mut resp = self
            .call(
                || format!("reading {rel}"),
                |mut c| {
                    let k = key.clone();
                    async move { c.get(k, None).await }
                },
            )
            .await?;
        Ok(resp.take_kvs().into_iter().next())
    }

    /// Every key under `rel_prefix`, read in pages at one revision (`revision` 0: the
    /// latest). Returns the revision read at.
    async fn range(
        &self,
        rel_prefix: &str,
        revision: i64,
    ) -> Result<(i64, Vec<KeyValue>), StoreError> {
        let prefix = self.key(rel_prefix);
        let end = prefix_end(prefix.as_bytes());
        let mut start = prefix.into_bytes();
        let mut rev = revision;
        let mut out = Vec::new();
        loop {
            let opts = GetOptions::new()
                .with_range(end.clone())
                .with_limit(PAGE)
                .with_revision(rev);
            let mut resp = self
                .call(
                    || format!("reading {rel_prefix}"),
                    |c| {
                        let (s, o) = (start.clone(), opts.clone());
                        async move {
                            c.kv_client()
                                .max_decoding_message_size(MAX_DECODE)
                                .get(s, Some(o))
                                .await
                        }
                    },
                )
                .await?;
            if rev == 0 {
                rev = resp.header().map_or(0, |h| h.revision());
            }
            let more = resp.more();
            let kvs = resp.take_kvs();
            if let Some(last) = kvs.last() {
                start = last.key().to_vec();
                start.push(0);
            }
            out.extend(kvs);
            if !more {
                return Ok((rev, out));
            }
        }
    }

    /// End a lease now (best effort, bounded): what it holds goes at once instead of
    /// after its TTL.
    async fn revoke(&self, id: i64) {
        let mut c = self.inner.client.clone();
        let limit = self.inner.opts.request_timeout.min(Duration::from_secs(5));
        if let Ok(Err(e)) = tokio::time::timeout(limit, c.lease_revoke(id)).await {
            tracing::debug!(lease = id, error = %e, "could not revoke a lease; it expires with its TTL");
        }
    }

    // ---- reports ----------------------------------------------------------------

    fn report_rel(host_id: &str) -> Result<String, StoreError> {
        if !gpushare_core::ids::valid_id(host_id) {
            return Err(StoreError::InvalidKey {
                what: "host id",
                key: host_id.to_string(),
            });
        }
        Ok(format!("{REPORTS}{host_id}"))
    }

    async fn report_lease(&self, host_id: &str, fresh: bool) -> Result<i64, StoreError> {
        if !fresh {
            if let Some(id) = lock(&self.inner.report_leases).get(host_id) {
                return Ok(*id);
            }
        }
        let ttl = self.inner.opts.report_ttl.as_secs().max(2) as i64;
        let g = self
            .call(
                || format!("granting {host_id}'s report lease"),
                |mut c| async move { c.lease_grant(ttl, None).await },
            )
            .await?;
        lock(&self.inner.report_leases).insert(host_id.to_string(), g.id());
        Ok(g.id())
    }

    /// Heartbeat: refresh the lease of `host_id`'s report (written by this handle's
    /// `put_report`), so it does not expire. `Ok(false)` when there is no live report
    /// lease (never written here, or expired): write the report again.
    pub async fn keep_report_alive(&self, host_id: &str) -> Result<bool, StoreError> {
        let Some(id) = lock(&self.inner.report_leases).get(host_id).copied() else {
            return Ok(false);
        };
        let refreshed = self
            .call(
                || format!("refreshing {host_id}'s report lease"),
                |mut c| async move {
                    let (mut keeper, mut stream) = c.lease_keep_alive(id).await?;
                    keeper.keep_alive().await?;
                    Ok(stream.message().await?.map_or(0, |r| r.ttl()))
                },
            )
            .await;
        let ttl = match refreshed {
            Ok(ttl) => ttl,
            // Expired (and reported as an error rather than a zero TTL).
            Err(e) if is_lease_not_found(&e) => 0,
            Err(e) => return Err(e),
        };
        if ttl <= 0 {
            lock(&self.inner.report_leases).remove(host_id);
        }
        Ok(ttl > 0)
    }

    /// Follow the tasks assigned to `host_id`: the first item is the current list, then
    /// one item each time a commit changes it. Agents use this instead of polling.
    pub async fn watch_assignments(&self, host_id: &str) -> Result<AssignmentWatch, StoreError> {
        Self::report_rel(host_id)?;
        Ok(watch::spawn(self.clone(), host_id.to_string()))
    }

    /// Who holds the apply lock now, if anyone.
    pub async fn lock_info(&self) -> Result<Option<EtcdLockInfo>, StoreError> {
        match self.get_one(LOCK).await? {
            None => Ok(None),
            Some(kv) => serde_json::from_slice(kv.value())
                .map(Some)
                .map_err(|e| self.corrupt(LOCK, e)),
        }
    }
}

struct EtcdLockGuard {
    store: EtcdStore,
    keep: Option<KeepAlive>,
}

#[async_trait]
impl LockGuard for EtcdLockGuard {
    async fn release(mut self: Box<Self>) -> Result<(), StoreError> {
        let Some(keep) = self.keep.take() else {
            return Ok(());
        };
        let id = keep.id;
        drop(keep);
        // Delete the record only while it is still ours, then end the lease.
        let key = self.store.key(LOCK);
        let txn = Txn::new()
            .when(vec![Compare::lease(key.clone(), CompareOp::Equal, id)])
            .and_then(vec![TxnOp::delete(key, None)]);
        let r = self.store.txn(|| "releasing the lock".into(), txn).await;
        self.store.revoke(id).await;
        tracing::debug!(store = %self.store.inner.location, "released the state lock");
        r.map(|_| ())
    }
}

impl Drop for EtcdLockGuard {
    fn drop(&mut self) {
        let Some(keep) = self.keep.take() else {
            return;
        };
        let id = keep.id;
        drop(keep);
        // Dropped without release: revoke in the background when a runtime is there;
        // otherwise the lease (and the lock) expires after its TTL.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let store = self.store.clone();
            rt.spawn(async move { store.revoke(id).await });
        }
    }
}

#[async_trait]
impl Store for EtcdStore {
    fn location(&self) -> String {
        self.inner.location.clone()
    }

    async fn load(&self) -> Result<StoreState, StoreError> {
        let (s, mut state) = self.read_snapshot().await?;
        *lock(&self.inner.cache) = Some(s);
        state.store_id = self.store_id();
        Ok(state)
    }

    async fn commit(&self, expected_serial: u64, state: &StoreState) -> Result<(), StoreError> {
        if state.serial != expected_serial + 1 {
            return Err(StoreError::BadSerial {
                expected: expected_serial,
                given: state.serial,
            });
        }
        let new = self.encode(state)?;
        let meta = Meta {
            format: META_FORMAT,
            serial: state.serial,
            cluster: state.cluster.clone(),
            staged: None,
            capacity_refusals: state.capacity_refusals.clone(),
        };
        let started = Instant::now();
        for attempt in 0..COMMIT_ATTEMPTS {
            let base = self.base(expected_serial).await?;
            if base.serial() != expected_serial {
                // A write of ours whose answer was lost (a member died, the call was
                // repeated) may have landed: then the stored state is exactly ours.
                if attempt > 0 && base.serial() == state.serial {
                    let (snap, now) = self.read_snapshot().await?;
                    if now == *state && snap.meta.as_ref().is_some_and(|m| m.staged.is_none()) {
                        *lock(&self.inner.cache) = Some(snap);
                        return Ok(());
                    }
                }
                return Err(StoreError::Conflict {
                    expected: expected_serial,
                    found: base.serial(),
                });
            }
            let changes = Self::diff(&base.stored, &new);
            let bytes: usize = changes
                .iter()
                .map(|(k, v)| k.len() + v.map_or(0, <[u8]>::len) + self.inner.url.prefix.len() + 32)
                .sum();
            let small = changes.len() + 2 <= self.inner.opts.max_txn_ops
                && bytes + 4096 <= self.inner.opts.max_txn_bytes;
            let outcome = if small {
                self.commit_small(&base, &changes, &meta).await?
            } else {
                self.commit_staged(&base, &changes, &meta).await?
            };
            match outcome {
                Outcome::Done(revision) => {
                    let keys = changes.len();
                    *lock(&self.inner.cache) = Some(Arc::new(Snapshot {
                        revision,
                        meta: Some(meta),
                        meta_revision: revision,
                        stored: new,
                        has_stage: false,
                    }));
                    tracing::debug!(
                        serial = state.serial,
                        keys_written = keys,
                        staged = !small,
                        ms = started.elapsed().as_millis() as u64,
                        store = %self.inner.location,
                        "committed state"
                    );
                    return Ok(());
                }
                Outcome::Unfinished => {
                    *lock(&self.inner.cache) = None;
                    return Ok(());
                }
                Outcome::Claimed => {
                    *lock(&self.inner.cache) = None;
                    self.wait_for_claim().await?;
                }
                Outcome::Moved => {
                    // Re-read: a new serial is a conflict; the same one (a finished copy,
                    // cleaned stage) is retried against the keys as they are now.
                    *lock(&self.inner.cache) = None;
                }
            }
        }
        let found = self.read_snapshot().await?.0.serial();
        Err(StoreError::Conflict {
            expected: expected_serial,
            found,
        })
    }

    async fn lock(
        &self,
        holder: &str,
        timeout: Duration,
    ) -> Result<Box<dyn LockGuard>, StoreError> {
        let ttl = self.inner.opts.lock_ttl;
        let keep = self
            .kept_lease(
                ttl,
                "granting the lock's lease",
                format!("lock held by {holder:?}"),
            )
            .await?;
        let lease = keep.id;
        let guard = EtcdLockGuard {
            store: self.clone(),
            keep: Some(keep),
        };
        let info = EtcdLockInfo {
            user: user_name(),
            hostname: hostname(),
            pid: std::process::id(),
            command: holder.to_string(),
            since: rfc3339(unix_now()),
        };
        let bytes = serde_json::to_vec(&info).map_err(|e| self.corrupt(LOCK, e))?;
        let key = self.key(LOCK);
        let started = Instant::now();
        loop {
            let txn = Txn::new()
                .when(vec![Compare::version(key.clone(), CompareOp::Equal, 0)])
                .and_then(vec![TxnOp::put(
                    key.clone(),
                    bytes.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                )])
                .or_else(vec![TxnOp::get(key.clone(), None)]);
            let resp = self.txn(|| "taking the lock".into(), txn).await?;
            // Taken by this very lease: a repeated call whose first answer was lost.
            let ours = resp.op_responses().into_iter().any(|r| match r {
                TxnOpResponse::Get(g) => g.kvs().first().is_some_and(|kv| kv.lease() == lease),
                _ => false,
            });
            if resp.succeeded() || ours {
                tracing::debug!(holder, store = %self.inner.location, "took the state lock");
                return Ok(Box::new(guard));
            }
            let waited = started.elapsed();
            if waited >= timeout {
                let current = resp.op_responses().into_iter().find_map(|r| match r {
                    TxnOpResponse::Get(g) => g
                        .kvs()
                        .first()
                        .and_then(|kv| serde_json::from_slice::<EtcdLockInfo>(kv.value()).ok()),
                    _ => None,
                });
                drop(guard);
                return Err(StoreError::Locked {
                    holder: current
                        .as_ref()
                        .map_or_else(|| "an unknown process".to_string(), |i| i.to_string()),
                    since: current.map_or_else(|| "unknown".to_string(), |i| i.since),
                    waited_seconds: waited.as_secs(),
                });
            }
            tokio::time::sleep(LOCK_POLL.min(timeout - waited)).await;
        }
    }

    async fn read_journal(&self) -> Result<Option<Journal>, StoreError> {
        let txn = Txn::new().and_then(vec![
            TxnOp::get(self.key(JOURNAL_HEAD), None),
            TxnOp::get(self.key(JOURNAL_DONE), None),
        ]);
        let resp = self.txn(|| "reading the journal".into(), txn).await?;
        let mut got = resp.op_responses().into_iter().map(|r| match r {
            TxnOpResponse::Get(g) => g
                .kvs()
                .first()
                .map(|kv| (kv.value().to_vec(), kv.mod_revision())),
            _ => None,
        });
        let (head, done) = (got.next().flatten(), got.next().flatten());
        let Some((head, head_rev)) = head else {
            return Ok(None);
        };
        let done = done.map(|(v, _)| v);
        let head: JournalHead =
            serde_json::from_slice(&head).map_err(|e| self.corrupt(JOURNAL_HEAD, e))?;
        let plan_prefix = format!("{JOURNAL_PLAN}{}/", head.id);
        let (_, kvs) = self.range(&plan_prefix, 0).await?;
        if kvs.len() != head.chunks {
            return Err(self.corrupt_msg(
                &plan_prefix,
                format!(
                    "{} of the journal's {} parts are there",
                    kvs.len(),
                    head.chunks
                ),
            ));
        }
        let mut bytes = Vec::with_capacity(head.bytes);
        for kv in &kvs {
            bytes.extend_from_slice(kv.value());
        }
        let mut journal: Journal =
            serde_json::from_slice(&bytes).map_err(|e| self.corrupt(&plan_prefix, e))?;
        if let Some(done) = done {
            let done: JournalDone =
                serde_json::from_slice(&done).map_err(|e| self.corrupt(JOURNAL_DONE, e))?;
            if done.id == head.id {
                journal.done = journal.done.max(done.done);
            }
        }
        *lock(&self.inner.journal_id) = Some((head.id, head_rev));
        Ok(Some(journal))
    }

    async fn write_journal(&self, journal: &Journal) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(journal).map_err(|e| self.corrupt(JOURNAL_HEAD, e))?;
        let old = match self.get_one(JOURNAL_HEAD).await? {
            Some(kv) => serde_json::from_slice::<JournalHead>(kv.value())
                .ok()
                .map(|h| h.id),
            None => None,
        };
        let id = unique_token();
        let part = self.inner.opts.max_txn_bytes.saturating_sub(4096).max(1024);
        let parts: Vec<&[u8]> = bytes.chunks(part).collect();
        for (i, p) in parts.iter().enumerate() {
            let key = self.key(&format!("{JOURNAL_PLAN}{id}/{i:08}"));
            let size = key.len() + p.len();
            let txn = Txn::new().and_then(vec![TxnOp::put(key, p.to_vec(), None)]);
            self.txn(|| format!("writing part {} of the journal", i + 1), txn)
                .await?;
            self.tally(1, 0, size);
        }
        let head = JournalHead {
            id: id.clone(),
            chunks: parts.len(),
            bytes: bytes.len(),
            holder: journal.holder.clone(),
            base_serial: journal.plan.base_serial,
        };
        let done = JournalDone {
            id: id.clone(),
            done: journal.done,
        };
        let mut ops = vec![
            TxnOp::put(
                self.key(JOURNAL_HEAD),
                serde_json::to_vec(&head).map_err(|e| self.corrupt(JOURNAL_HEAD, e))?,
                None,
            ),
            TxnOp::put(
                self.key(JOURNAL_DONE),
                serde_json::to_vec(&done).map_err(|e| self.corrupt(JOURNAL_DONE, e))?,
                None,
            ),
        ];
        let deletes = usize::from(old.is_some());
        if let Some(old) = old {
            ops.push(TxnOp::delete(
                self.key(&format!("{JOURNAL_PLAN}{old}/")),
                Some(DeleteOptions::new().with_prefix()),
            ));
        }
        let head_bytes = serde_json::to_vec(&head).map_or(0, |v| v.len())
            + serde_json::to_vec(&done).map_or(0, |v| v.len())
            + self.key(JOURNAL_HEAD).len()
            + self.key(JOURNAL_DONE).len();
        let resp = self
            .txn(|| "writing the journal".into(), Txn::new().and_then(ops))
            .await?;
        self.tally(2, deletes, head_bytes);
        let head_rev = resp.header().map_or(0, |h| h.revision());
        *lock(&self.inner.journal_id) = Some((id, head_rev));
        Ok(())
    }

    async fn advance_journal(&self, journal: &Journal) -> Result<(), StoreError> {
        // Only the position is written, under the journal it belongs to: guarded by the
        // head's revision, so a position never lands on another apply's journal.
        for _ in 0..2 {
            let cached = lock(&self.inner.journal_id).clone();
            let (id, head_rev) = match cached {
                Some(c) => c,
                None => match self.get_one(JOURNAL_HEAD).await? {
                    Some(kv) => {
                        let head = serde_json::from_slice::<JournalHead>(kv.value())
                            .map_err(|e| self.corrupt(JOURNAL_HEAD, e))?;
                        if head.holder != journal.holder
                            || head.base_serial != journal.plan.base_serial
                        {
                            return Err(self.corrupt_msg(
                                JOURNAL_HEAD,
                                format!(
                                    "the journal in the store is {:?}'s over serial {}, not this apply's ({:?} over serial {})",
                                    head.holder, head.base_serial, journal.holder, journal.plan.base_serial
                                ),
                            ));
                        }
                        (head.id, kv.mod_revision())
                    }
                    // No journal: write it whole.
                    None => return self.write_journal(journal).await,
                },
            };
            let done = JournalDone {
                id: id.clone(),
                done: journal.done,
            };
            let v = serde_json::to_vec(&done).map_err(|e| self.corrupt(JOURNAL_DONE, e))?;
            let txn = Txn::new()
                .when(vec![Compare::mod_revision(
                    self.key(JOURNAL_HEAD),
                    CompareOp::Equal,
                    head_rev,
                )])
                .and_then(vec![TxnOp::put(self.key(JOURNAL_DONE), v.clone(), None)]);
            if self
                .txn(|| "advancing the journal".into(), txn)
                .await?
                .succeeded()
            {
                self.tally(1, 0, self.key(JOURNAL_DONE).len() + v.len());
                *lock(&self.inner.journal_id) = Some((id, head_rev));
                return Ok(());
            }
            *lock(&self.inner.journal_id) = None;
        }
        Err(self.corrupt_msg(
            JOURNAL_HEAD,
            "the journal was replaced while its position was being written".into(),
        ))
    }

    async fn clear_journal(&self) -> Result<(), StoreError> {
        // The head and every part in one transaction.
        let txn = Txn::new().and_then(vec![TxnOp::delete(
            self.key(JOURNAL),
            Some(DeleteOptions::new().with_prefix()),
        )]);
        self.txn(|| "clearing the journal".into(), txn).await?;
        *lock(&self.inner.journal_id) = None;
        Ok(())
    }

    async fn put_report(&self, report: &HostReport) -> Result<(), StoreError> {
        let rel = Self::report_rel(&report.host_id)?;
        let bytes = serde_json::to_vec(report).map_err(|e| self.corrupt(&rel, e))?;
        let key = self.key(&rel);
        let mut fresh = false;
        loop {
            let lease = self.report_lease(&report.host_id, fresh).await?;
            let r = self
                .call(
                    || format!("writing {rel}"),
                    |mut c| {
                        let (k, v) = (key.clone(), bytes.clone());
                        async move { c.put(k, v, Some(PutOptions::new().with_lease(lease))).await }
                    },
                )
                .await;
            match r {
                Ok(_) => break,
                // The lease expired (the agent was away longer than its TTL): a new one.
                Err(e) if !fresh && is_lease_not_found(&e) => fresh = true,
                Err(e) => return Err(e),
            }
        }
        // Writing is a heartbeat too: restart the lease's TTL.
        self.keep_report_alive(&report.host_id).await?;
        Ok(())
    }

    async fn reports(&self) -> Result<Vec<HostReport>, StoreError> {
        let (_, kvs) = self.range(REPORTS, 0).await?;
        let mut out = Vec::with_capacity(kvs.len());
        for kv in kvs {
            let rel = String::from_utf8_lossy(kv.key()).into_owned();
            let rel = rel
                .strip_prefix(&format!("{}/", self.inner.url.prefix))
                .unwrap_or(&rel)
                .to_string();
            out.push(serde_json::from_slice(kv.value()).map_err(|e| self.corrupt(&rel, e))?);
        }
        Ok(out)
    }

    async fn delete_report(&self, host_id: &str) -> Result<(), StoreError> {
        let rel = Self::report_rel(host_id)?;
        let key = self.key(&rel);
        self.call(
            || format!("deleting {rel}"),
            |mut c| {
                let k = key.clone();
                async move { c.delete(k, None).await }
            },
        )
        .await?;
        let lease = lock(&self.inner.report_leases).remove(host_id);
        if let Some(id) = lease {
            self.revoke(id).await;
        }
        Ok(())
    }

    async fn adopt_identity(&self, id: &str) -> Result<(), StoreError> {
        let key = self.key(STORE_ID);
        if !gpushare_engine::store::valid_store_id(id) {
            return Err(StoreError::InvalidStoreId {
                path: format!("{} ({key})", self.inner.location),
                found: id.chars().take(80).collect(),
            });
        }
        self.call(
            || "writing the store id".to_string(),
            |mut c| {
                let (k, v) = (key.clone(), id.to_string());
                async move { c.put(k, v, None).await }
            },
        )
        .await?;
        tracing::info!(store = %self.inner.location, store_id = %id, "the store took over another store's identity");
        *lock(&self.inner.store_id) = id.to_string();
        Ok(())
    }

    async fn put_status(&self, status: &StatusRecord) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(status).map_err(|e| self.corrupt(STATUS, e))?;
        let key = self.key(STATUS);
        self.call(
            || format!("writing {STATUS}"),
            |mut c| {
                let (k, v) = (key.clone(), bytes.clone());
                async move { c.put(k, v, None).await }
            },
        )
        .await?;
        Ok(())
    }

    async fn status(&self) -> Result<Option<StatusRecord>, StoreError> {
        match self.get_one(STATUS).await? {
            None => Ok(None),
            Some(kv) => serde_json::from_slice(kv.value())
                .map(Some)
                .map_err(|e| self.corrupt(STATUS, e)),
        }
    }
    async fn campaign(
        &self,
        candidate: &str,
        timeout: Option<Duration>,
    ) -> Result<Option<Box<dyn Leader>>, StoreError> {
        let l = EtcdStore::campaign(self, candidate, timeout).await?;
        Ok(Some(Box::new(l)))
    }

    async fn leader(&self) -> Result<Option<String>, StoreError> {
        Ok(EtcdStore::leader(self).await?.map(|i| i.to_string()))
    }
}

/// Map an etcd error: refused permissions are I/O errors (permission denied) naming
/// what was refused; everything else means the store could not be reached.
fn classify(location: &str, what: String, e: etcd_client::Error) -> StoreError {
    if let etcd_client::Error::GRpcStatus(s) = &e {
        let refused = matches!(
            s.code(),
            tonic::Code::PermissionDenied | tonic::Code::Unauthenticated
        ) || s.message().contains("authentication failed");
        if refused {
            return StoreError::Io {
                path: format!("{location} ({what})"),
                source: std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!("etcd refused: {}", s.message()),
                ),
            };
        }
    }
    StoreError::Unreachable {
        location: location.to_string(),
        source: Box::new(EtcdOpError {
            what,
            source: Box::new(e),
        }),
    }
}

/// Errors after which the same call may succeed on another member or a moment later.
fn is_transient(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            let m = s.message();
            s.code() == tonic::Code::Unavailable
                || (matches!(
                    s.code(),
                    tonic::Code::Unknown | tonic::Code::Internal | tonic::Code::Cancelled
                ) && [
                    "leader",
                    "timed out",
                    "transport",
                    "connection",
                    "broken pipe",
                    "h2 protocol",
                ]
                .iter()
                .any(|w| m.contains(w)))
        }
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        _ => false,
    }
}

fn etcd_status(e: &StoreError) -> Option<&tonic::Status> {
    let StoreError::Unreachable { source, .. } = e else {
        return None;
    };
    let op = source.downcast_ref::<EtcdOpError>()?;
    match op.source.downcast_ref::<etcd_client::Error>()? {
        etcd_client::Error::GRpcStatus(s) => Some(s),
        _ => None,
    }
}

fn is_compacted(e: &StoreError) -> bool {
    etcd_status(e).is_some_and(|s| s.message().contains("compacted"))
}

fn is_lease_not_found(e: &StoreError) -> bool {
    if etcd_status(e).is_some_and(|s| s.message().contains("lease not found")) {
        return true;
    }
    let StoreError::Unreachable { source, .. } = e else {
        return false;
    };
    source
        .downcast_ref::<EtcdOpError>()
        .and_then(|op| op.source.downcast_ref::<etcd_client::Error>())
        .is_some_and(
            |e| matches!(e, etcd_client::Error::LeaseKeepAliveError(m) if m.contains("not found")),
        )
}

fn build_tls(opts: &EtcdOptions, url: &str) -> Result<Option<etcd_client::TlsOptions>, OpenError> {
    if opts.cacert.is_none() && opts.cert.is_none() && opts.key.is_none() {
        return Ok(None);
    }
    let read = |what: &'static str, p: &std::path::Path| {
        std::fs::read(p).map_err(|source| OpenError::TlsFile {
            url: url.to_string(),
            what,
            path: p.display().to_string(),
            source,
        })
    };
    let mut tls = etcd_client::TlsOptions::new();
    if let Some(ca) = &opts.cacert {
        tls = tls.ca_certificate(etcd_client::Certificate::from_pem(read(
            "CA certificate",
            ca,
        )?));
    }
    match (&opts.cert, &opts.key) {
        (Some(c), Some(k)) => {
            tls = tls.identity(etcd_client::Identity::from_pem(
                read("client certificate", c)?,
                read("client key", k)?,
            ));
        }
        (None, None) => {}
        _ => {
            return Err(OpenError::Config {
                url: url.to_string(),
                problem: "a client certificate needs its key, and a key its certificate".into(),
            })
        }
    }
    Ok(Some(tls))
}

/// The first key after every key starting with `prefix`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn unique_token() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{nanos:x}-{:x}-{:x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `YYYY-MM-DDTHH:MM:SSZ` (UTC) for seconds since the epoch.
fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn hostname() -> String {
    for p in ["/proc/sys/kernel/hostname", "/etc/hostname"] {
        if let Ok(s) = std::fs::read_to_string(p) {
            let s = s.trim();
            if !s.is_empty() {
                return s.to_string();
            }
        }
    }
    std::env::var("HOSTNAME").unwrap_or_else(|_| "unknown-host".into())
}

fn user_name() -> String {
    ["USER", "LOGNAME"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "unknown-user".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_and_dates() {
        assert_eq!(prefix_end(b"a/"), b"a0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn diff_lists_changed_and_removed_keys() {
        let a: BTreeMap<String, Vec<u8>> = [
            ("task/a".into(), b"1".to_vec()),
            ("task/b".into(), b"2".to_vec()),
        ]
        .into();
        let b: BTreeMap<String, Vec<u8>> = [
            ("task/a".into(), b"1".to_vec()),
            ("task/c".into(), b"3".to_vec()),
        ]
        .into();
        let d = EtcdStore::diff(&a, &b);
        assert_eq!(d, vec![("task/c", Some(&b"3"[..])), ("task/b", None)]);
    }
}

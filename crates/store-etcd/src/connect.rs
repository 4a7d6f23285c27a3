//! Opening a store: the options checked, TLS and credentials, the connection (lazy
//! unless credentials are given, bounded either way), a first read proving the store
//! answers, and reading (or making) the store's identity (`identity.rs`).

use crate::client::{self, Client, RangeRequest};
use crate::error::{classify, OpenError, TimedOut};
use crate::keys::{MAX_DECODE, META};
use crate::url::{EtcdOptions, EtcdUrl, ENV_PASSWORD, ENV_USERNAME};
use crate::{EtcdStore, Inner, WriteStats};
use gpushare_core::util::lock;
use gpushare_engine::store::StoreError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
        let tls = build_tls(&opts, &location)?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let credentials = match (&opts.username, &opts.password) {
            (Some(user), Some(password)) => Some(client::Credentials {
                user: user.clone(),
                password: password.clone(),
            }),
            (Some(_), None) | (None, Some(_)) => {
                return Err(OpenError::Config {
                    url: location,
                    problem: format!("give both {ENV_USERNAME} and {ENV_PASSWORD}, or neither"),
                })
            }
            (None, None) => None,
        };
        let config = client::ClientConfig {
            endpoints: url
                .endpoints
                .iter()
                .map(|e| format!("{scheme}://{e}"))
                .collect(),
            tls,
            credentials,
            connect_timeout: opts.connect_timeout,
            request_timeout: opts.request_timeout,
            max_decode: MAX_DECODE,
        };
        let unreachable =
            |source: Box<dyn std::error::Error + Send + Sync>| StoreError::Unreachable {
                location: location.clone(),
                source,
            };
        // Connecting is lazy unless credentials are given; either way, bounded.
        let client = match tokio::time::timeout(
            opts.connect_timeout + Duration::from_secs(1),
            Client::connect(config),
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
                cache: Mutex::new(None),
                loaded: Mutex::new(None),
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
        let c = &store.inner.client;
        match tokio::time::timeout(timeout, c.range(RangeRequest::new(probe).count_only())).await {
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
}

fn build_tls(opts: &EtcdOptions, url: &str) -> Result<Option<client::Tls>, OpenError> {
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
    let ca_pem = match &opts.cacert {
        Some(ca) => Some(read("CA certificate", ca)?),
        None => None,
    };
    let identity = match (&opts.cert, &opts.key) {
        (Some(c), Some(k)) => Some((read("client certificate", c)?, read("client key", k)?)),
        (None, None) => None,
        _ => {
            return Err(OpenError::Config {
                url: url.to_string(),
                problem: "a client certificate needs its key, and a key its certificate".into(),
            })
        }
    };
    Ok(Some(client::Tls { ca_pem, identity }))
}

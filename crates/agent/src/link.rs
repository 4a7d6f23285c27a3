//! Where an agent reads its host's assignment and writes its report: the store
//! itself (`gpushare agent --store`, the local fleet's in-process agents), or the
//! controller's agent API (`gpushare agent --server`, gpushare-agent-api), which
//! sends the host only its own view.

use async_trait::async_trait;
use gpushare_core::model::{HostReport, StoreState};
use gpushare_engine::store::{Store, StoreError};
use std::sync::Arc;

#[async_trait]
pub trait Link: Send + Sync {
    /// Where it reads and writes, for messages.
    fn location(&self) -> String;
    /// The state holding at least this host, its tasks and their revisions.
    async fn assignment(&self) -> Result<Arc<StoreState>, StoreError>;
    async fn put_report(&self, report: &HostReport) -> Result<(), StoreError>;
}

/// The store as a link: the whole state, read as it is kept.
pub struct StoreLink(pub Arc<dyn Store>);

#[async_trait]
impl Link for StoreLink {
    fn location(&self) -> String {
        self.0.location()
    }
    async fn assignment(&self) -> Result<Arc<StoreState>, StoreError> {
        self.0.load_shared().await
    }
    async fn put_report(&self, report: &HostReport) -> Result<(), StoreError> {
        self.0.put_report(report).await
    }
}

/// One host's share of a state read once for many agents (the local fleet's round:
/// [`StoreState::host_shares`]), with its reports gathered in `reports` for the
/// round to write all hosts' at once ([`Store::put_reports`]).
pub struct ShareLink {
    pub share: Arc<StoreState>,
    pub location: String,
    pub reports: Arc<std::sync::Mutex<Vec<HostReport>>>,
}

#[async_trait]
impl Link for ShareLink {
    fn location(&self) -> String {
        self.location.clone()
    }
    async fn assignment(&self) -> Result<Arc<StoreState>, StoreError> {
        Ok(Arc::clone(&self.share))
    }
    async fn put_report(&self, report: &HostReport) -> Result<(), StoreError> {
        gpushare_core::util::lock(&self.reports).push(report.clone());
        Ok(())
    }
}

/// The local address this host reaches `server` (`https://name:port`) from: a UDP
/// socket is connected there (no packet is sent) and asked for its own address.
/// `None` when the name does not resolve or no route leads there.
pub fn local_address_towards(server: &str) -> Option<String> {
    let rest = server.split_once("://").map_or(server, |(_, r)| r);
    let authority = rest.split('/').next()?;
    let target = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        authority.to_string()
    } else {
        format!("{authority}:443")
    };
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&target)
        .ok()?
        .next()?;
    let bind = if addr.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let sock = std::net::UdpSocket::bind(bind).ok()?;
    sock.connect(addr).ok()?;
    let local = sock.local_addr().ok()?.ip();
    (!local.is_unspecified()).then(|| local.to_string())
}

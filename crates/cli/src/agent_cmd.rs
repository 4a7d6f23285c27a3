//! `gpushare agent`: opens the store named by `--store` and runs the host agent
//! until SIGTERM or SIGINT (the pass in progress finishes; tasks keep running).

use anyhow::Context;
use gpushare_agent::{run_agent, Args};
use gpushare_engine::store::{FileStore, Store};
use std::path::PathBuf;
use std::sync::Arc;

/// A `file://DIR` URL (or a plain directory path) as a file store.
fn open_store(url: &str) -> anyhow::Result<Arc<dyn Store>> {
    let dir = if let Some(rest) = url.strip_prefix("file://") {
        PathBuf::from(rest)
    } else if url.contains("://") {
        anyhow::bail!("store URL {url:?}: this build of the agent opens file:// stores only");
    } else {
        PathBuf::from(url)
    };
    let store =
        FileStore::open(&dir).with_context(|| format!("opening the store {}", dir.display()))?;
    Ok(Arc::new(store))
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; stopping on SIGINT only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

pub async fn run(args: Args) -> anyhow::Result<u8> {
    let store = open_store(&args.store)?;
    run_agent(&args, store, shutdown_signal())
        .await
        .map_err(|e| anyhow::anyhow!(gpushare_agent::error_chain(&e)))?;
    Ok(0)
}

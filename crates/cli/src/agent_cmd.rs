//! `gpushare agent`: runs the host agent against the controller's agent API
//! (`--server`) or the store named by `--store`, until SIGTERM or SIGINT (the pass in
//! progress finishes; tasks keep running).

use gpushare_agent::{run_agent, Args};
use std::path::Path;

pub(crate) async fn shutdown_signal() {
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
    if args.server.is_some() {
        gpushare_agent_api::client::run(&args, shutdown_signal())
            .await
            .map_err(|e| anyhow::anyhow!(gpushare_agent::error_chain(&e)))?;
        return Ok(0);
    }
    // The backends factory opens the store, as for every other command; a relative
    // path is taken from the current directory.
    let (store, _) = gpushare_backends::open_store(args.store.as_deref(), Path::new("")).await?;
    run_agent(&args, store, shutdown_signal())
        .await
        .map_err(|e| anyhow::anyhow!(gpushare_agent::error_chain(&e)))?;
    Ok(0)
}

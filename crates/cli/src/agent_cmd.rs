//! `gpushare agent`: opens the store named by `--store` and runs the host agent
//! until SIGTERM or SIGINT (the pass in progress finishes; tasks keep running).

use gpushare_agent::{run_agent, Args};
use std::path::Path;

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
    // The backends factory opens the store, as for every other command; a relative
    // path is taken from the current directory.
    let (store, _) = gpushare_backends::open_store(Some(&args.store), Path::new("")).await?;
    run_agent(&args, store, shutdown_signal())
        .await
        .map_err(|e| anyhow::anyhow!(gpushare_agent::error_chain(&e)))?;
    Ok(0)
}

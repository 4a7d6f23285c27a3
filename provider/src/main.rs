//! terraform-provider-gpushare: started by Terraform (go-plugin handshake), or by
//! hand with `--debug` for a reattach session.

use gpushare_provider::grpc::ProviderService;
use gpushare_provider::handler::Handler;
use gpushare_provider::server::{self, Mode, ServeError};
use std::sync::Arc;

fn main() {
    // Logs go to stderr only (stdout carries the handshake line), at the level of
    // TF_LOG_PROVIDER / TF_LOG, as Terraform's providers log.
    gpushare_provider::logging::init();
    let debug = std::env::args()
        .skip(1)
        .any(|a| a == "--debug" || a == "-debug");
    let code = match run(debug) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{e:#}");
            1
        }
    };
    std::process::exit(code);
}

fn run(debug: bool) -> anyhow::Result<()> {
    let mode = if debug {
        Mode::Debug
    } else {
        server::check_launch(&|k| std::env::var(k).ok())?;
        // Plain gRPC only in --debug mode (as Terraform's own reattach flow): under the
        // handshake, no client certificate means no authentication, so it is refused.
        let client_cert_pem = std::env::var("PLUGIN_CLIENT_CERT")
            .ok()
            .filter(|s| !s.trim().is_empty())
            .ok_or(ServeError::NoClientCertificate)?;
        Mode::Plugin { client_cert_pem }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        if !debug {
            // Ctrl-C in a terminal reaches the whole process group; Terraform stops us
            // through StopProvider and GRPCController/Shutdown instead (as go-plugin does).
            tokio::spawn(async {
                loop {
                    if tokio::signal::ctrl_c().await.is_err() {
                        break;
                    }
                    tracing::info!("SIGINT ignored: Terraform will stop the provider");
                }
            });
        }
        let service = ProviderService::new(Arc::new(
            Handler::new().with_hooks(gpushare_engine::apply::Hooks::from_env()),
        ));
        server::serve(service, mode)
            .await
            .map_err(|e: ServeError| anyhow::Error::new(e))
    })
}

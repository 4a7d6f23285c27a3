//! The go-plugin server side: magic cookie, protocol negotiation, the handshake
//! line, AutoMTLS, the health and controller services, and debug (reattach) mode.

use crate::grpc::ProviderService;
use crate::proto::plugin::grpc_controller_server::{GrpcController, GrpcControllerServer};
use crate::proto::plugin::Empty;
use crate::proto::tfplugin6::provider_server::ProviderServer;
use crate::tls::{self, ServerIdentity, TlsSetupError};
use std::io::Write;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;

pub const MAGIC_COOKIE_KEY: &str = "TF_PLUGIN_MAGIC_COOKIE";
pub const MAGIC_COOKIE_VALUE: &str =
    "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2";
/// go-plugin's own protocol version (the first handshake field).
pub const CORE_PROTOCOL_VERSION: u32 = 1;
/// Terraform's plugin protocol major version we speak.
pub const APP_PROTOCOL_VERSION: u32 = 6;
pub const PROVIDER_ADDRESS: &str = "registry.terraform.io/gpushare/gpushare";

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "This binary is a plugin. These are not meant to be executed directly.\n\
         Please execute the program that consumes these plugins, which will\n\
         load any plugins automatically (run `terraform plan` in a directory that\n\
         uses the gpushare provider), or run it with --debug to print\n\
         TF_REATTACH_PROVIDERS for a debugging session."
    )]
    NotLaunchedByTerraform,
    #[error(
        "PLUGIN_CLIENT_CERT is not set: refusing to serve the provider over unauthenticated gRPC \
         (any local user could drive it with this process's cloud credentials). Terraform \
         always sends a client certificate (go-plugin AutoMTLS); to debug the provider by hand, \
         run it with --debug"
    )]
    NoClientCertificate,
    #[error("Terraform asked for plugin protocol versions {offered:?}; this provider speaks only version {APP_PROTOCOL_VERSION}")]
    UnsupportedProtocol { offered: String },
    #[error("could not listen on 127.0.0.1")]
    Listen(#[source] std::io::Error),
    #[error("TLS setup failed")]
    Tls(#[source] TlsSetupError),
    #[error("the gRPC server failed")]
    Serve(#[source] tonic::transport::Error),
    #[error("could not write the handshake line to stdout")]
    Stdout(#[source] std::io::Error),
}

/// Checks the magic cookie and negotiates the protocol version, from the environment.
pub fn check_launch(env: &dyn Fn(&str) -> Option<String>) -> Result<u32, ServeError> {
    if env(MAGIC_COOKIE_KEY).as_deref() != Some(MAGIC_COOKIE_VALUE) {
        return Err(ServeError::NotLaunchedByTerraform);
    }
    match env("PLUGIN_PROTOCOL_VERSIONS") {
        None => Ok(APP_PROTOCOL_VERSION),
        Some(list) if list.trim().is_empty() => Ok(APP_PROTOCOL_VERSION),
        Some(list) => {
            if list
                .split(',')
                .any(|v| v.trim().parse::<u32>().ok() == Some(APP_PROTOCOL_VERSION))
            {
                Ok(APP_PROTOCOL_VERSION)
            } else {
                Err(ServeError::UnsupportedProtocol { offered: list })
            }
        }
    }
}

/// The first stdout line go-plugin reads.
pub fn handshake_line(addr: std::net::SocketAddr, cert: Option<&str>) -> String {
    match cert {
        Some(c) => format!("{CORE_PROTOCOL_VERSION}|{APP_PROTOCOL_VERSION}|tcp|{addr}|grpc|{c}"),
        None => format!("{CORE_PROTOCOL_VERSION}|{APP_PROTOCOL_VERSION}|tcp|{addr}|grpc|"),
    }
}

/// The `TF_REATTACH_PROVIDERS` value for a provider listening on `addr`.
pub fn reattach_json(addr: std::net::SocketAddr) -> String {
    serde_json::json!({
        PROVIDER_ADDRESS: {
            "Protocol": "grpc",
            "ProtocolVersion": APP_PROTOCOL_VERSION,
            "Pid": std::process::id(),
            "Test": true,
            "Addr": { "Network": "tcp", "String": addr.to_string() }
        }
    })
    .to_string()
}

/// A TLS connection tonic can serve.
pub struct TlsConn(tokio_rustls::server::TlsStream<TcpStream>);

impl tonic::transport::server::Connected for TlsConn {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

/// go-plugin's controller: `Shutdown` makes the server stop.
struct Controller {
    shutdown: CancellationToken,
}

#[tonic::async_trait]
impl GrpcController for Controller {
    async fn shutdown(
        &self,
        _req: tonic::Request<Empty>,
    ) -> Result<tonic::Response<Empty>, tonic::Status> {
        tracing::info!("GRPCController/Shutdown: stopping");
        self.shutdown.cancel();
        Ok(tonic::Response::new(Empty {}))
    }
}

/// How long a connection may take to finish its TLS handshake before it is dropped
/// (a peer that connects and says nothing must not hold a task forever).
pub const TLS_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How the server was started.
pub enum Mode {
    /// Launched by Terraform: print the handshake line, serve mutual TLS with
    /// Terraform's client certificate (`PLUGIN_CLIENT_CERT`, required).
    Plugin { client_cert_pem: String },
    /// `--debug`: print the reattach JSON, plain gRPC on loopback, run until Ctrl-C.
    Debug,
}

/// One DEBUG line per served RPC, in a span naming it, with its latency in microseconds
/// (`TF_LOG_PROVIDER=DEBUG`), as Terraform's SDKs log the requests they serve.
fn served_requests() -> tower_http::trace::TraceLayer<
    tower_http::classify::SharedClassifier<tower_http::classify::GrpcErrorsAsFailures>,
    impl Fn(&tonic::codegen::http::Request<tonic::body::Body>) -> tracing::Span + Clone,
    (),
    tower_http::trace::DefaultOnResponse,
> {
    tower_http::trace::TraceLayer::new_for_grpc()
        .make_span_with(|r: &tonic::codegen::http::Request<tonic::body::Body>| {
            tracing::debug_span!("rpc", method = r.uri().path())
        })
        .on_request(())
        .on_response(
            tower_http::trace::DefaultOnResponse::new()
                .level(tracing::Level::DEBUG)
                .latency_unit(tower_http::LatencyUnit::Micros),
        )
}

/// Serves the provider until Terraform asks us to stop (Shutdown, Ctrl-C in debug mode).
pub async fn serve(service: ProviderService, mode: Mode) -> Result<(), ServeError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(ServeError::Listen)?;
    let addr = listener.local_addr().map_err(ServeError::Listen)?;
    let shutdown = CancellationToken::new();

    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_service_status("plugin", tonic_health::ServingStatus::Serving)
        .await;

    let router = tonic::transport::Server::builder()
        .layer(served_requests())
        .add_service(health_service)
        .add_service(GrpcControllerServer::new(Controller {
            shutdown: shutdown.clone(),
        }))
        .add_service(
            ProviderServer::new(service)
                .max_decoding_message_size(256 << 20)
                .max_encoding_message_size(256 << 20),
        );

    let tls_config = tls_for(&mode)?;
    announce(
        &mode,
        addr,
        tls_config.as_ref().map(|(c, _)| c.as_str()),
        &shutdown,
    )?;
    let stop = shutdown.clone().cancelled_owned();
    match tls_config {
        Some((_, cfg)) => {
            let incoming = accept_tls(listener, cfg, shutdown);
            router
                .serve_with_incoming_shutdown(incoming, stop)
                .await
                .map_err(ServeError::Serve)
        }
        None => router
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener)
                    .map(|c| c.inspect(no_delay)),
                stop,
            )
            .await
            .map_err(ServeError::Serve),
    }
}

/// Under Terraform (plugin mode): a fresh server identity, trusting only the client
/// certificate Terraform gave; its certificate for the handshake line, and the TLS
/// configuration. None in debug mode (plain gRPC on loopback).
fn tls_for(
    mode: &Mode,
) -> Result<Option<(String, std::sync::Arc<rustls::ServerConfig>)>, ServeError> {
    let Mode::Plugin {
        client_cert_pem: pem,
    } = mode
    else {
        return Ok(None);
    };
    let client = tls::client_cert_from_pem(pem).map_err(ServeError::Tls)?;
    let identity = ServerIdentity::generate().map_err(ServeError::Tls)?;
    let cfg = tls::server_config(&identity, client).map_err(ServeError::Tls)?;
    Ok(Some((identity.handshake_cert(), cfg)))
}

/// Tell the client where to connect: go-plugin's handshake line on stdout (plugin
/// mode), or the TF_REATTACH_PROVIDERS value to set (debug mode, which stops on
/// Ctrl-C).
fn announce(
    mode: &Mode,
    addr: std::net::SocketAddr,
    cert: Option<&str>,
    shutdown: &CancellationToken,
) -> Result<(), ServeError> {
    let mut out = std::io::stdout().lock();
    match mode {
        Mode::Plugin { .. } => writeln!(out, "{}", handshake_line(addr, cert)),
        Mode::Debug => {
            let s = shutdown.clone();
            tokio::spawn(async move {
                let _ = tokio::signal::ctrl_c().await;
                s.cancel();
            });
            writeln!(
                out,
                "Provider started. To attach Terraform, set TF_REATTACH_PROVIDERS:\n\n\tTF_REATTACH_PROVIDERS='{}'\n",
                reattach_json(addr)
            )
        }
    }
    .and_then(|_| out.flush())
    .map_err(ServeError::Stdout)
}

/// The TLS connections accepted on `listener` until `shutdown`: each handshake in a
/// task of its own, dropped (and logged) when it fails or takes longer than
/// [`TLS_HANDSHAKE_TIMEOUT`].
fn accept_tls(
    listener: tokio::net::TcpListener,
    cfg: std::sync::Arc<rustls::ServerConfig>,
    shutdown: CancellationToken,
) -> tokio_stream::wrappers::ReceiverStream<Result<TlsConn, std::io::Error>> {
    let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<TlsConn, std::io::Error>>(16);
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = listener.accept() => match r {
                    Ok(c) => c,
                    Err(e) => { tracing::warn!(error = %e, "accept failed"); continue; }
                },
            };
            no_delay(&tcp);
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let accept = acceptor.accept(tcp);
                tokio::pin!(accept);
                tokio::select! {
                    r = &mut accept => match r {
                        Ok(tls) => {
                            let _ = tx.send(Ok(TlsConn(tls))).await;
                        }
                        Err(e) => tracing::warn!(%peer, error = %e, "TLS handshake refused"),
                    },
                    // Logged before the connection is dropped (with `accept`, below).
                    _ = tokio::time::sleep(TLS_HANDSHAKE_TIMEOUT) => {
                        tracing::warn!(%peer, timeout = ?TLS_HANDSHAKE_TIMEOUT, "TLS handshake timed out; connection dropped");
                    }
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// Turns Nagle's algorithm off on a connection from Terraform: gRPC writes a response
/// as several small frames, and with Nagle on the later ones wait for the client's
/// delayed ACK (40 ms on Linux), which a plan of 100 resources paid again and again.
fn no_delay(tcp: &TcpStream) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "could not set TCP_NODELAY");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connections_from_terraform_do_not_wait_for_acks() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let client = TcpStream::connect(addr).await.expect("connect");
        let (served, _) = listener.accept().await.expect("accept");
        assert!(
            !served.nodelay().expect("read the option"),
            "Nagle is on by default"
        );
        no_delay(&served);
        assert!(served.nodelay().expect("read the option"));
        drop(client);
    }

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn launch_checks_cookie_and_protocol() {
        assert!(matches!(
            check_launch(&env_of(&[])),
            Err(ServeError::NotLaunchedByTerraform)
        ));
        assert!(matches!(
            check_launch(&env_of(&[(MAGIC_COOKIE_KEY, "nope")])),
            Err(ServeError::NotLaunchedByTerraform)
        ));
        assert_eq!(
            check_launch(&env_of(&[
                (MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE),
                ("PLUGIN_PROTOCOL_VERSIONS", "5,6")
            ]))
            .unwrap(),
            6
        );
        assert!(matches!(
            check_launch(&env_of(&[
                (MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE),
                ("PLUGIN_PROTOCOL_VERSIONS", "4,5")
            ])),
            Err(ServeError::UnsupportedProtocol { .. })
        ));
    }

    #[test]
    fn handshake_line_shape() {
        let addr: std::net::SocketAddr = "127.0.0.1:4567".parse().unwrap();
        assert_eq!(
            handshake_line(addr, Some("QUJD")),
            "1|6|tcp|127.0.0.1:4567|grpc|QUJD"
        );
        let j: serde_json::Value = serde_json::from_str(&reattach_json(addr)).unwrap();
        assert_eq!(j[PROVIDER_ADDRESS]["Addr"]["String"], "127.0.0.1:4567");
        assert_eq!(j[PROVIDER_ADDRESS]["ProtocolVersion"], 6);
    }
}

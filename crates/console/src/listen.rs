//! Serving a router the way the operations listener and the console both serve:
//! HTTP/1 only, at most [`MAX_CONNECTIONS`] connections at once, a header read
//! timeout and a limit on a connection's life.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Connections served at once; more wait in the kernel's accept queue, holding no
/// descriptor of this process, so clients of the endpoint never take the
/// descriptors the controller's passes need.
pub const MAX_CONNECTIONS: usize = 32;
/// A client must send a request's headers within this, or its connection is closed.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection is closed this long after it was accepted, whatever it does (the
/// endpoints answer at once: this cuts idle and slow clients).
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections the kernel queues beyond those served (they hold no descriptor of
/// this process until accepted).
const BACKLOG: u32 = 1024;

/// The address could not be listened on.
#[derive(Debug, thiserror::Error)]
#[error("listening on {addr}: {source}")]
pub struct ListenError {
    pub addr: SocketAddr,
    #[source]
    pub source: std::io::Error,
}

/// Bind `addr` and serve `app` in the background under [`MAX_CONNECTIONS`],
/// [`HEADER_READ_TIMEOUT`] and [`CONNECTION_TIMEOUT`]; the address bound.
pub async fn serve_app(addr: SocketAddr, app: axum::Router) -> Result<SocketAddr, ListenError> {
    let fail = |source| ListenError { addr, source };
    let listener = listen(addr).map_err(fail)?;
    let bound = listener.local_addr().map_err(fail)?;
    tokio::spawn(accept_loop(listener, app));
    Ok(bound)
}

/// A listening socket on `addr` with [`BACKLOG`] (address reuse on, as std's).
fn listen(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Accept a connection only while fewer than [`MAX_CONNECTIONS`] are open, and
/// serve each under the timeouts.
async fn accept_loop(listener: tokio::net::TcpListener, app: axum::Router) {
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, or a connection reset before it was taken:
                // wait a little rather than spin.
                tracing::warn!(error = %e, "the operations endpoint could not accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            match tokio::time::timeout(CONNECTION_TIMEOUT, connection).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(error = %e, "an operations connection ended"),
                Err(_) => tracing::debug!("an operations connection was open too long; closed"),
            }
        });
    }
}

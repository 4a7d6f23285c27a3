//! gpushare's agent API (docs/agent.md): the controller serves every host its own
//! assignment and takes its report, over gRPC with mutual TLS, so that no host reads
//! the store.
//!
//! - [`pki`]: the cluster CA (kept in the store), host and server certificates;
//! - [`tls`]: the rustls configurations (client certificates required but for
//!   `Join`; the agent pins the CA by hash);
//! - [`tokens`]: join tokens (only their hashes are stored);
//! - [`registration`]: your own hosts joining a registered pool;
//! - [`view`]: per-host views of the state and their fan-out;
//! - [`server`]: the gRPC service (`gpushare serve`, `gpushare reconcile --agent-listen`);
//! - [`client`]: the agent's side (`gpushare agent --server`).

/// The generated gRPC code of `proto/agent.proto`.
pub mod pb {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("gpushare.agent.v1");
}

pub mod client;
pub mod pki;
pub mod registration;
pub mod server;
pub mod tls;
pub mod tokens;
pub mod view;

pub use pki::ca_hash;
pub use server::{start, Running, ServeError, ServerOptions};

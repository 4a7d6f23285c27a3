//! gpushare's agent API (docs/agent.md): the controller serves every host its own
//! assignment and takes its report, over gRPC with mutual TLS, so that no host reads
//! the store.
//!
//! - [`pki`]: the cluster CA (kept in the store), host and server certificates;
//! - [`tls`]: the rustls configurations (client certificates required but for
//!   `Join`; the agent pins the CA by hash);
//! - [`tokens`]: join tokens (only their hashes are stored);
//! - [`issuer`]: the single-use tokens apply mints for launched hosts' user data;
//! - [`registration`]: your own hosts joining a registered pool;
//! - [`view`]: per-host views of the state and their fan-out;
//! - [`server`]: the gRPC service (`gpushare serve`, `gpushare reconcile --agent-listen`);
//! - [`hub`]: the fan-out of the views (one watch or poll of the state per serving
//!   process), and [`revoke`]: certificate revocation;
//! - [`client`]: the agent's side (`gpushare agent --server`).

/// The generated gRPC code of `proto/agent.proto`.
pub mod pb {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    tonic::include_proto!("gpushare.agent.v1");
}

/// The views' fan-out (see [`view`] for the views themselves).
pub mod hub;

pub mod client;
pub mod issuer;
pub mod limits;
pub mod pki;
pub mod registration;
pub mod revoke;
pub mod server;
pub mod tls;
pub mod tokens;
pub mod view;

pub use issuer::StoreIssuer;
pub use limits::ConnLimits;
pub use pki::ca_hash;
pub use server::{start, Running, ServeError, ServerOptions};

//! Launched hosts join on their own: each launch mints a single-use join token bound to
//! the new host id ([`JoinIssuer`], implemented over the store by the agent API crate),
//! and the cloud puts it in the host's user data with the controller's address and the
//! cluster CA's hash ([`JoinGrant`]). Nothing long-lived is in user data: the token
//! works once, for this host id, until the boot grace is over.

use crate::store::Store;
use async_trait::async_trait;
use std::time::Duration;

/// What a launched host needs to join the controller's agent API: `gpushare agent
/// --server SERVER --join TOKEN --ca-hash CA_HASH --host-id HOST`.
#[derive(Clone, PartialEq, Eq)]
pub struct JoinGrant {
    /// The controller's agent API (`https://HOST:PORT`, the settings'
    /// `controller_address`).
    pub server: String,
    /// The join token (`<id>.<secret>`): single-use, bound to the host id.
    pub token: String,
    /// `sha256:<hex>` of the cluster CA certificate, which the agent pins.
    pub ca_hash: String,
}

impl std::fmt::Debug for JoinGrant {
    // The token is a secret: never in logs or error messages.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinGrant")
            .field("server", &self.server)
            .field("token", &"(hidden)")
            .field("ca_hash", &self.ca_hash)
            .finish()
    }
}

impl JoinGrant {
    /// The grant written where a real one cannot be minted (a preview of the user data
    /// in `plan`, preflight's size check): a token of the real length and shape.
    pub fn placeholder(server: &str) -> JoinGrant {
        JoinGrant {
            server: server.to_string(),
            token: format!("{}.{}", "0".repeat(8), "0".repeat(32)),
            ca_hash: format!("sha256:{}", "0".repeat(64)),
        }
    }

    /// The host's boot environment as `NAME=value` lines (an env file, for `docker run
    /// --env-file` or a systemd `EnvironmentFile=`): what the agent's flags read.
    pub fn env_lines(&self, host_id: &str) -> String {
        format!(
            "GPUSHARE_SERVER={}\nGPUSHARE_JOIN_TOKEN={}\nGPUSHARE_CA_HASH={}\nGPUSHARE_HOST_ID={host_id}\n",
            self.server, self.token, self.ca_hash
        )
    }
}

/// Why a join token could not be minted for a launch.
#[derive(Debug, thiserror::Error)]
#[error("minting the join token of host {host_id}")]
pub struct JoinError {
    pub host_id: String,
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// Mints single-use join tokens bound to a host id, in `store`.
#[async_trait]
pub trait JoinIssuer: Send + Sync {
    /// A token that lets `host_id` (of pool `pool`) join once within `ttl`, with the
    /// cluster CA's hash (the CA is made on first use).
    async fn issue(
        &self,
        store: &dyn Store,
        cluster: &str,
        host_id: &str,
        pool: &str,
        ttl: Duration,
        now: u64,
    ) -> Result<(String, String), JoinError>;
}

/// How apply mints the joins of its launches: the issuer, the address put in user
/// data and the tokens' life (the planner's boot grace).
#[derive(Clone, Copy)]
pub struct JoinLaunch<'a> {
    pub issuer: &'a dyn JoinIssuer,
    pub server: &'a str,
    pub ttl: Duration,
}

impl JoinLaunch<'_> {
    /// Mint the grant of one launch.
    pub async fn grant(
        &self,
        store: &dyn Store,
        cluster: &str,
        host_id: &str,
        pool: &str,
        now: u64,
    ) -> Result<JoinGrant, JoinError> {
        let (token, ca_hash) = self
            .issuer
            .issue(store, cluster, host_id, pool, self.ttl, now)
            .await?;
        Ok(JoinGrant {
            server: self.server.to_string(),
            token,
            ca_hash,
        })
    }
}

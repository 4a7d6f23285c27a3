//! The agent API on the command line: `gpushare serve --agent-listen ADDR` (a plain
//! server for a fleet reconciled by hand), `gpushare reconcile --agent-listen ADDR`
//! (every replica serves, leader or not), `gpushare token create|list|revoke` and
//! `gpushare host revoke`.

use crate::args::VarArgs;
use crate::setup;
use anyhow::Context;
use gpushare_agent_api::pki::ClusterCa;
use gpushare_agent_api::revoke;
use gpushare_agent_api::tokens::{self, TokenScope};
use gpushare_agent_api::ServerOptions;
use gpushare_core::util::{lock, unix_now};
use gpushare_engine::fsutil::rfc3339;
use gpushare_engine::store::Store;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where the agent API is served.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AgentApiArgs {
    /// Serve the agent API (hosts join with tokens and read only their own assignment,
    /// docs/agent.md) on ADDR, e.g. 0.0.0.0:7443.
    #[arg(long, value_name = "ADDR")]
    pub agent_listen: Option<SocketAddr>,
    /// A name or address the agents dial, put in the server certificate (repeatable;
    /// localhost, the loopback addresses and a specific listen address always are).
    #[arg(long = "agent-name", value_name = "NAME", requires = "agent_listen")]
    pub agent_names: Vec<String>,
}

#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Make a join token for `gpushare agent --join` and print it (only this once:
    /// the store keeps its hash), with the CA hash agents pin.
    Create {
        dir: Option<std::path::PathBuf>,
        /// Only hosts of this pool (capacity_provider) may join with it.
        #[arg(long, value_name = "POOL")]
        pool: Option<String>,
        /// Only this host id may join with it (it may join before the host is recorded).
        #[arg(long, value_name = "ID")]
        host_id: Option<String>,
        /// How long it is valid: 90s, 30m, 1h, 2d.
        #[arg(long, default_value = "1h", value_parser = tokens::parse_ttl)]
        ttl: Duration,
        /// How many hosts may join with it.
        #[arg(long, default_value_t = 1)]
        uses: u32,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        vars: VarArgs,
    },
    /// List the join tokens (their ids and scopes, never the tokens) and the CA hash.
    List {
        dir: Option<std::path::PathBuf>,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        vars: VarArgs,
    },
    /// Revoke a join token by its id (hosts that joined with it keep their identity).
    Revoke {
        id: String,
        dir: Option<std::path::PathBuf>,
        #[command(flatten)]
        vars: VarArgs,
    },
}

/// `gpushare host revoke HOST`: refuse every certificate host HOST was issued until
/// now (a stolen one); its agent is told the host is removed and stops its tasks.
pub async fn revoke_host(
    host: &str,
    dir: Option<std::path::PathBuf>,
    vars: &VarArgs,
) -> anyhow::Result<u8> {
    let (store, _) = open(&setup::config_dir(dir)?, vars).await?;
    let generation = revoke::revoke(store.as_ref(), host).await?;
    println!(
        "Revoked every agent API certificate host {host} was issued so far (its certificates now need \
         revocation generation {generation}): its agent stops its tasks; it joins again with a new token \
         (gpushare token create --host-id {host})."
    );
    Ok(0)
}

/// The store and cluster of the configuration in `dir`.
async fn open(dir: &Path, vars: &VarArgs) -> anyhow::Result<(Arc<dyn Store>, String)> {
    let desired = setup::load(dir, vars)?;
    let (store, _) = gpushare_backends::open_store(desired.settings.store.as_deref(), dir).await?;
    Ok((store, desired.settings.cluster))
}

/// Start the agent API on `store` at `listen` and say so (`who:` first).
async fn start(
    who: &str,
    store: Arc<dyn Store>,
    cluster: &str,
    args: &AgentApiArgs,
    listen: SocketAddr,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<gpushare_agent_api::Running> {
    let mut opts = ServerOptions::new(listen);
    opts.names = args.agent_names.clone();
    opts.heard = Some(Arc::clone(&HEARD));
    let running = gpushare_agent_api::start(store, cluster, opts, shutdown).await?;
    println!(
        "{who}: agent API of cluster {cluster:?} on https://{} (CA {})",
        running.addr, running.ca_hash
    );
    Ok(running)
}

/// `gpushare serve`: the agent API until SIGTERM or SIGINT.
pub async fn serve(dir: &Path, args: &AgentApiArgs, vars: &VarArgs) -> anyhow::Result<u8> {
    let listen = args
        .agent_listen
        .context("gpushare serve needs --agent-listen ADDR")?;
    let (store, cluster) = open(dir, vars).await?;
    let running = start(
        "serve",
        store,
        &cluster,
        args,
        listen,
        crate::agent_cmd::shutdown_signal(),
    )
    .await?;
    running.wait().await?;
    println!("serve: stopped");
    Ok(0)
}

/// What this process's agent API heard from the agents: the reconciler of a
/// `reconcile --agent-listen` judges silence by it too (issue 44).
pub static HEARD: std::sync::LazyLock<Arc<gpushare_engine::heard::HeardFrom>> =
    std::sync::LazyLock::new(|| Arc::new(gpushare_engine::heard::HeardFrom::new(unix_now())));

/// The store the agent API of this `reconcile` process serves (it follows the first
/// store the configuration names; another store needs a restart).
static SERVED: Mutex<Option<String>> = Mutex::new(None);

/// `reconcile --agent-listen`: serve the agent API on `store` from the first pass on.
pub async fn serve_for_reconcile(
    args: &AgentApiArgs,
    store: &Arc<dyn Store>,
    cluster: &str,
) -> anyhow::Result<()> {
    let Some(listen) = args.agent_listen else {
        return Ok(());
    };
    let location = store.location();
    {
        let served = lock(&SERVED);
        match served.as_deref() {
            Some(l) if l == location => return Ok(()),
            Some(l) => {
                tracing::warn!(serving = %l, configured = %location, "the configuration names another store; the agent API keeps serving the first one until reconcile restarts");
                return Ok(());
            }
            None => {}
        }
    }
    let running = start(
        "reconcile",
        Arc::clone(store),
        cluster,
        args,
        listen,
        std::future::pending(),
    )
    .await?;
    *lock(&SERVED) = Some(location);
    tokio::spawn(async move {
        if let Err(e) = running.wait().await {
            tracing::error!(error = %gpushare_agent::error_chain(&e), "the agent API stopped");
        }
    });
    Ok(())
}

/// `gpushare token ...`.
pub async fn token(command: TokenCommand) -> anyhow::Result<u8> {
    match command {
        TokenCommand::Create {
            dir,
            pool,
            host_id,
            ttl,
            uses,
            json,
            vars,
        } => {
            let (store, cluster) = open(&setup::config_dir(dir)?, &vars).await?;
            let scope = TokenScope {
                pool,
                host_id,
                ttl,
                uses,
            };
            let tokens::Minted {
                token,
                info,
                ca_hash,
            } = tokens::mint(store.as_ref(), &cluster, &scope, unix_now()).await?;
            if json {
                let out = serde_json::json!({
                    "id": info.id,
                    "token": token,
                    "ca_hash": ca_hash,
                    "cluster": cluster,
                    "pool": info.pool,
                    "host_id": info.host_id,
                    "expires_at": rfc3339(info.expires_at),
                    // null: any number of joins until it expires.
                    "uses": (info.uses_left != tokens::UNLIMITED).then_some(info.uses_left),
                });
                println!("{out}");
            } else {
                println!("Join token (shown only this once): {token}");
                println!("CA hash: {ca_hash}");
                println!(
                    "Valid until {} for {} join(s){}{}.",
                    rfc3339(info.expires_at),
                    info.uses_text(),
                    info.pool
                        .as_ref()
                        .map(|p| format!(" of pool {p}"))
                        .unwrap_or_default(),
                    info.host_id
                        .as_ref()
                        .map(|h| format!(" by host {h}"))
                        .unwrap_or_default(),
                );
                println!(
                    "On the host: gpushare agent --server https://CONTROLLER:PORT --join {token} --ca-hash {ca_hash}"
                );
                if info.pool.is_some() && info.host_id.is_none() {
                    println!(
                        "On a server of your own (a registered pool, docs/own-hosts.md): sudo gpushare host setup --server https://CONTROLLER:PORT --join {token} --ca-hash {ca_hash}"
                    );
                }
            }
            Ok(0)
        }
        TokenCommand::List { dir, json, vars } => {
            let (store, cluster) = open(&setup::config_dir(dir)?, &vars).await?;
            let ca = ClusterCa::load_or_create(store.as_ref(), &cluster).await?;
            let list = tokens::list(store.as_ref()).await?;
            let now = unix_now();
            let state = |t: &tokens::TokenInfo| t.state(now);
            if json {
                let out = serde_json::json!({
                    "ca_hash": ca.hash(),
                    "tokens": list.iter().map(|t| serde_json::json!({
                        "id": t.id,
                        "pool": t.pool,
                        "host_id": t.host_id,
                        "expires_at": rfc3339(t.expires_at),
                        // null: any number of joins until it expires.
                        "uses_left": (t.uses_left != tokens::UNLIMITED).then_some(t.uses_left),
                        "state": state(t),
                    })).collect::<Vec<_>>(),
                });
                println!("{out}");
            } else {
                println!("CA hash: {}", ca.hash());
                if list.is_empty() {
                    println!("No join tokens.");
                }
                for t in &list {
                    println!(
                        "{}  {:<8} uses left {:<3} until {}  pool {}  host {}",
                        t.id,
                        state(t),
                        t.uses_text(),
                        rfc3339(t.expires_at),
                        t.pool.as_deref().unwrap_or("any"),
                        t.host_id.as_deref().unwrap_or("any"),
                    );
                }
            }
            Ok(0)
        }
        TokenCommand::Revoke { id, dir, vars } => {
            let (store, _) = open(&setup::config_dir(dir)?, &vars).await?;
            tokens::revoke(store.as_ref(), &id).await?;
            println!("Revoked join token {id}.");
            Ok(0)
        }
    }
}

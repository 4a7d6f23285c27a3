//! `gpushare_join_token` driven by the real `terraform` binary (dev_overrides, no
//! `terraform init`): apply mints a pool token that the real agent API (served here
//! from the same store, on loopback) accepts for a host of that registered pool; the
//! plan shows the value only as `(sensitive value)`; a token revoked outside
//! Terraform reads as gone and is planned anew; destroy revokes it, so a join with
//! it is refused.

mod tfwork;

use gpushare_agent_api::client::{self, ServerAddr};
use gpushare_agent_api::registration::JoinFacts;
use gpushare_agent_api::tokens;
use gpushare_agent_api::ServerOptions;
use gpushare_engine::store::{FileStore, Store};
use std::sync::Arc;
use tfwork::Workdir;

const CONFIG: &str = r#"
terraform {
  required_providers {
    gpushare = { source = "gpushare/gpushare" }
  }
}

provider "gpushare" {
  cluster   = "tf-join"
  state_dir = ".gpushare"
}

resource "gpushare_capacity_provider" "lab" {
  name  = "lab"
  hosts = "registered"
}

resource "gpushare_join_token" "lab" {
  pool = gpushare_capacity_provider.lab.name
  ttl  = "2h"
}

output "token" {
  value     = gpushare_join_token.lab.value
  sensitive = true
}

output "token_id" {
  value = gpushare_join_token.lab.id
}

output "ca_hash" {
  value = gpushare_join_token.lab.ca_hash
}

output "expires_at" {
  value = gpushare_join_token.lab.expires_at
}
"#;

fn output(w: &Workdir, name: &str) -> String {
    w.ok(&["output", "-raw", name])
}

/// The agent API served from the Terraform working directory's store, as
/// `gpushare serve` serves it; a host `host` joins it with `token`.
async fn join(w: &Workdir, token: &str, host: &str) -> Result<(), String> {
    let store: Arc<dyn Store> =
        Arc::new(FileStore::open(w.path().join(".gpushare")).map_err(|e| e.to_string())?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let opts = ServerOptions::new("127.0.0.1:0".parse().expect("address"));
    let running = gpushare_agent_api::start(store, "tf-join", opts, async {
        let _ = stopped.await;
    })
    .await
    .map_err(|e| e.to_string())?;
    let server = ServerAddr::parse(&format!("https://localhost:{}", running.addr.port()))
        .map_err(|e| e.to_string())?;
    let facts = JoinFacts {
        host_id: host.to_string(),
        hostname: host.to_string(),
        ..JoinFacts::default()
    };
    let joined = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        client::join_with(&server, &running.ca_hash, token, None, None, &facts),
    )
    .await
    .map_err(|_| "the join did not finish within 60 s".to_string())?;
    let _ = stop.send(());
    let _ = running.wait().await;
    joined
        .map(|_| ())
        .map_err(|e| format!("{:#}", anyhow::Error::new(e)))
}

fn store_state(w: &Workdir) -> gpushare_core::model::StoreState {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let store = FileStore::open(w.path().join(".gpushare")).expect("store");
    rt.block_on(store.load()).expect("state")
}

#[test]
fn a_join_token_from_terraform_lets_a_host_join_its_pool_and_is_revoked_on_destroy() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let w = Workdir::new(CONFIG);

    let plan = w.ok(&["plan", "-no-color"]);
    assert!(
        plan.contains("+ resource \"gpushare_join_token\" \"lab\""),
        "{plan}"
    );
    assert!(
        plan.lines()
            .any(|l| l.trim_start().starts_with("+ value") && l.ends_with("(sensitive value)")),
        "{plan}"
    );
    w.ok(&["apply", "-auto-approve", "-no-color"]);
    let token = output(&w, "token");
    let id = output(&w, "token_id");
    assert!(token.starts_with(&format!("{id}.")), "{token} / {id}");
    // The state holds it; no command output does.
    let shown = w.ok(&["show", "-no-color"]);
    assert!(!shown.contains(&token), "{shown}");
    assert!(shown.contains("(sensitive value)"), "{shown}");
    let expires = output(&w, "expires_at");
    assert!(expires.ends_with('Z') && expires.contains('T'), "{expires}");

    // The store keeps its hash, scoped to the pool, with no limit of uses.
    let rtc = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let list = rtc
        .block_on(tokens::list(
            &FileStore::open(w.path().join(".gpushare")).expect("store"),
        ))
        .expect("tokens");
    let info = list
        .iter()
        .find(|t| t.id == id)
        .expect("the token is in the store");
    assert_eq!(info.pool.as_deref(), Some("lab"));
    assert_eq!(info.uses_left, u32::MAX);
    assert!(!serde_json::to_string(&list).expect("json").contains(&token));

    // A host of its pool joins with it (twice: a reusable pool token).
    rt.block_on(join(&w, &token, "rack-1"))
        .expect("rack-1 joins");
    rt.block_on(join(&w, &token, "rack-2"))
        .expect("rack-2 joins");
    let state = store_state(&w);
    for h in ["rack-1", "rack-2"] {
        let host = state.hosts.get(h).expect("registered");
        assert_eq!(host.capacity_provider, "lab");
        assert!(host.is_registered());
    }
    // The CA hash Terraform gives is the one the agent API serves with.
    let ca = output(&w, "ca_hash");
    assert!(ca.starts_with("sha256:"), "{ca}");

    // Converged: nothing to do.
    let out = w.run(&["plan", "-detailed-exitcode", "-no-color"]);
    assert_eq!(out.status.code(), Some(0), "a second plan is empty");

    // Revoked outside Terraform: it reads as gone and is planned anew.
    rtc.block_on(tokens::revoke(
        &FileStore::open(w.path().join(".gpushare")).expect("store"),
        &id,
    ))
    .expect("revoke");
    let plan = w.ok(&["plan", "-no-color"]);
    assert!(
        plan.contains("gpushare_join_token.lab will be created"),
        "{plan}"
    );
    w.ok(&["apply", "-auto-approve", "-no-color"]);
    let renewed = output(&w, "token");
    assert_ne!(renewed, token);
    let refused = rt.block_on(join(&w, &token, "rack-3"));
    assert!(refused.is_err(), "a revoked token is refused");

    // Destroy revokes it: a join with it is refused, and the store no longer has it.
    w.ok(&["destroy", "-auto-approve", "-no-color"]);
    let refused = rt
        .block_on(join(&w, &renewed, "rack-4"))
        .expect_err("a destroyed token is refused");
    assert!(refused.contains("unknown here"), "{refused}");
    let list = rtc
        .block_on(tokens::list(
            &FileStore::open(w.path().join(".gpushare")).expect("store"),
        ))
        .expect("tokens");
    assert!(list.is_empty(), "{list:?}");
}

#[test]
fn a_join_token_is_validated_and_not_imported() {
    let w = Workdir::new(
        r#"
terraform {
  required_providers {
    gpushare = { source = "gpushare/gpushare" }
  }
}

provider "gpushare" {
  cluster   = "tf-join-bad"
  state_dir = ".gpushare"
}

resource "gpushare_join_token" "bad" {
  pool = "lab"
  ttl  = "soon"
  uses = 0
}
"#,
    );
    let out = w.run(&["validate", "-no-color"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Invalid ttl") && err.contains("\"soon\""),
        "{err}"
    );
    assert!(err.contains("uses"), "{err}");
    std::fs::write(
        w.path().join("main.tf"),
        std::fs::read_to_string(w.path().join("main.tf"))
            .expect("main.tf")
            .replace("  ttl  = \"soon\"\n  uses = 0\n", ""),
    )
    .expect("main.tf");
    w.ok(&["validate", "-no-color"]);
    let out = w.run(&["import", "-no-color", "gpushare_join_token.bad", "0a1b2c3d"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot be imported"), "{err}");
    assert!(
        !w.path().join("terraform.tfstate").exists() || {
            let s = std::fs::read_to_string(w.path().join("terraform.tfstate")).unwrap_or_default();
            !s.contains("gpushare_join_token")
        }
    );
}

//! `gpushare_join_token` (issue 24): a pool token for your own servers, minted as
//! `gpushare token create --pool NAME` mints one ([`tokens::mint`]). It is not a
//! resource of gpushare's model (HCL has no such block) and runs no engine pass: the
//! store's token book is its remote object. Every argument forces replacement, so
//! there is no update; a token that expired, was used up or was revoked reads as
//! gone, so Terraform plans a new one; destroy revokes it. Import is refused: the
//! store keeps only the token's hash, so the token could not be read back.

use super::{Handler, Planned};
use crate::cty::Value;
use crate::diag::{attr_path, Diag, PathStep};
use crate::resource::{self, with_attrs};
use crate::schema::{join_token_schema, JOIN_TOKEN};
use gpushare_agent_api::registration::is_registered_pool;
use gpushare_agent_api::tokens::{self, TokenError, TokenScope};
use gpushare_core::schema::BlockLike;
use std::collections::BTreeMap;

/// The attributes the provider computes (unknown until the token is minted).
const COMPUTED: [&str; 4] = ["id", "value", "ca_hash", "expires_at"];

/// The arguments of a planned token as the token book takes them.
fn scope_of(planned: &Value) -> Result<TokenScope, Diag> {
    let pool = planned
        .attr("pool")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            Diag::error("Missing pool", "a join token needs the pool it is for")
                .at(attr_path(&["pool"]))
        })?
        .to_string();
    let default_ttl = join_token_schema()
        .attribute("ttl")
        .and_then(|a| a.default.as_ref())
        .and_then(serde_json::Value::as_str)
        .unwrap_or("1h");
    let ttl_text = planned
        .attr("ttl")
        .and_then(Value::as_str)
        .unwrap_or(default_ttl);
    let ttl = tokens::parse_ttl(ttl_text)
        .map_err(|e| Diag::error("Invalid ttl", e).at(attr_path(&["ttl"])))?;
    let uses = match planned.attr("uses") {
        None | Some(Value::Null) => tokens::UNLIMITED,
        Some(Value::Number(n)) => n
            .as_i64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n >= 1)
            .ok_or_else(|| {
                Diag::error(
                    "Invalid uses",
                    "uses must be a whole number from 1 to 4294967295",
                )
                .at(attr_path(&["uses"]))
            })?,
        Some(_) => {
            return Err(
                Diag::error("Invalid uses", "uses must be a number").at(attr_path(&["uses"]))
            )
        }
    };
    Ok(TokenScope {
        pool: Some(pool),
        host_id: None,
        ttl,
        uses,
    })
}

fn token_error(summary: &str, e: &TokenError) -> Diag {
    Diag::from_error(summary, e)
}

impl Handler {
    fn token_now(&self) -> u64 {
        self.clock
            .map_or_else(gpushare_core::util::unix_now, |c| c())
    }

    /// ValidateResourceConfig: the schema's checks, and a ttl that reads as a duration.
    pub(super) fn join_token_validate(&self, config: &Value) -> Vec<Diag> {
        let mut out = Vec::new();
        resource::validate_block(join_token_schema(), config, &mut Vec::new(), &mut out);
        if let Some(ttl) = config.attr("ttl").and_then(Value::as_str) {
            if let Err(e) = tokens::parse_ttl(ttl) {
                out.push(Diag::error("Invalid ttl", e).at(attr_path(&["ttl"])));
            }
        }
        out
    }

    /// PlanResourceChange: a new token's computed attributes are unknown; a changed
    /// argument replaces the token.
    pub(super) fn join_token_plan(
        &self,
        prior: &Value,
        proposed: &Value,
        config: &Value,
    ) -> Planned {
        let diags = self.join_token_validate(config);
        let mut planned = proposed.clone();
        let mut requires_replace = Vec::new();
        if !prior.is_null() && !proposed.is_null() {
            for a in join_token_schema()
                .attributes
                .iter()
                .filter(|a| a.is_argument())
            {
                if prior.attr(&a.name) != proposed.attr(&a.name) {
                    requires_replace.push(vec![PathStep::Attr(a.name.clone())]);
                }
            }
        }
        if let Value::Map(m) = &mut planned {
            if prior.is_null() || !requires_replace.is_empty() {
                for a in COMPUTED {
                    m.insert(a.to_string(), Value::unknown());
                }
            }
        }
        Planned {
            planned,
            requires_replace,
            diags,
        }
    }

    /// ApplyResourceChange: mint (create), revoke (destroy); an update changes nothing
    /// (every argument forces replacement).
    pub(super) async fn join_token_apply(
        &self,
        prior: &Value,
        planned: &Value,
    ) -> (Value, Vec<Diag>) {
        let backend = match self.backend() {
            Ok(b) => b,
            Err(d) => return (prior.clone(), vec![d]),
        };
        if planned.is_null() {
            let Some(id) = prior.attr("id").and_then(Value::as_str) else {
                return (Value::Null, vec![]);
            };
            return match tokens::revoke(backend.store(), id).await {
                Ok(()) | Err(TokenError::NotFound { .. }) => (Value::Null, vec![]),
                Err(e) => (
                    prior.clone(),
                    vec![token_error("Cannot revoke the join token", &e)],
                ),
            };
        }
        if !prior.is_null() {
            return (planned.clone(), vec![]);
        }
        let scope = match scope_of(planned) {
            Ok(s) => s,
            Err(d) => return (Value::Null, vec![d]),
        };
        let store = backend.store();
        let cluster = &backend.settings.cluster;
        let minted = match tokens::mint(store, cluster, &scope, self.token_now()).await {
            Ok(m) => m,
            Err(e) => {
                return (
                    Value::Null,
                    vec![token_error("Cannot make the join token", &e)],
                )
            }
        };
        let mut diags = vec![];
        let pool = scope.pool.unwrap_or_default();
        if let Ok(state) = store.load_shared().await {
            if !is_registered_pool(&state, &pool) {
                diags.push(
                    Diag::warning(
                        "Not a registered pool",
                        format!(
                            "capacity_provider.{pool} is not a registered pool (hosts = \"registered\") as applied: \
                             hosts cannot join it with this token until it is"
                        ),
                    )
                    .at(attr_path(&["pool"])),
                );
            }
        }
        let attrs = BTreeMap::from([
            ("id".to_string(), Value::string(&minted.info.id)),
            ("value".to_string(), Value::string(minted.token)),
            ("ca_hash".to_string(), Value::string(minted.ca_hash)),
            (
                "expires_at".to_string(),
                Value::string(gpushare_engine::fsutil::rfc3339(minted.info.expires_at)),
            ),
        ]);
        (with_attrs(planned.clone(), attrs), diags)
    }

    /// ReadResource: the token as it is, or gone (null) when the store no longer has
    /// it valid (expired, used up, revoked).
    pub(super) async fn join_token_read(&self, current: &Value) -> (Value, Vec<Diag>) {
        let backend = match self.backend() {
            Ok(b) => b,
            Err(d) => return (current.clone(), vec![d]),
        };
        let Some(id) = current.attr("id").and_then(Value::as_str) else {
            return (current.clone(), vec![]);
        };
        let list = match tokens::list(backend.store()).await {
            Ok(l) => l,
            Err(e) => {
                return (
                    current.clone(),
                    vec![token_error("Cannot read the join tokens", &e)],
                )
            }
        };
        let now = self.token_now();
        match list.iter().find(|t| t.id == id) {
            Some(t) if t.state(now) == "valid" => (current.clone(), vec![]),
            found => {
                tracing::info!(
                    token = %id,
                    state = found.map_or("revoked", |t| t.state(now)),
                    "join token gone: Terraform plans a new one"
                );
                (Value::Null, vec![])
            }
        }
    }

    /// ImportResourceState: refused, with the reason.
    pub(super) fn join_token_import(&self, id: &str) -> (Value, Vec<Diag>) {
        (
            Value::Null,
            vec![Diag::error(
                "Join tokens cannot be imported",
                format!(
                    "the store keeps only the hash of join token {id:?}, so its value cannot be read back; \
                     let Terraform create a new {JOIN_TOKEN} (and revoke the old one with `gpushare token revoke {id}`)"
                ),
            )],
        )
    }
}

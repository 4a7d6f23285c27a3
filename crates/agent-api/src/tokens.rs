//! Join tokens: `<id>.<secret>`, printed once by `gpushare token create`. The store
//! keeps only the SHA-256 of the whole token, with its scope (a pool, a host id),
//! expiry and remaining uses, in one controller's record updated compare-and-swap.
//! A token of another cluster is simply unknown here.

use gpushare_core::model::StoreState;
use gpushare_engine::store::{Store, StoreError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::time::Duration;

/// The store record holding the tokens.
pub const TOKENS_RECORD: &str = "agent-join-tokens";
/// Expired or used-up tokens are dropped from the record this long after.
const KEEP_SPENT: u64 = 24 * 3600;

/// A token as the store keeps it (never the token itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    pub id: String,
    /// SHA-256 of the whole token, hex.
    pub hash: String,
    /// Only hosts of this pool may join with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Only this host id may join with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_id: Option<String>,
    pub created_at: u64,
    pub expires_at: u64,
    pub uses_left: u32,
    /// When it was last used or spent (expired tokens and used-up ones are forgotten a day after).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent_at: Option<u64>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Book {
    tokens: Vec<TokenInfo>,
}

/// `uses_left` of a token that any number of hosts may join with until it expires
/// (the Terraform resource's `uses` left unset).
pub const UNLIMITED: u32 = u32::MAX;

impl TokenInfo {
    /// The joins left as people read them: a number, or `unlimited`.
    pub fn uses_text(&self) -> String {
        if self.uses_left == UNLIMITED {
            "unlimited".to_string()
        } else {
            self.uses_left.to_string()
        }
    }

    /// Count one join (an unlimited token stays unlimited).
    fn spend(&mut self, now: u64) {
        if self.uses_left != UNLIMITED {
            self.uses_left = self.uses_left.saturating_sub(1);
        }
        self.spent_at = Some(now);
    }

    /// `valid`, `expired` or `used up` at `now`.
    pub fn state(&self, now: u64) -> &'static str {
        if self.expires_at <= now {
            "expired"
        } else if self.uses_left == 0 {
            "used up"
        } else {
            "valid"
        }
    }
}

/// What `token create` asks for.
#[derive(Debug, Clone)]
pub struct TokenScope {
    pub pool: Option<String>,
    pub host_id: Option<String>,
    pub ttl: Duration,
    pub uses: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read or write the join tokens in the store")]
    Store {
        #[source]
        source: StoreError,
    },
    #[error("the join tokens record in the store is corrupt")]
    Corrupt {
        #[source]
        source: serde_json::Error,
    },
    #[error("no join token has id {id:?}")]
    NotFound { id: String },
    #[error("--uses must be at least 1")]
    NoUses,
    #[error("{what} {value:?} is not a valid identifier")]
    BadScope { what: &'static str, value: String },
    #[error("cannot load or create the cluster's CA")]
    Ca {
        #[source]
        source: crate::pki::PkiError,
    },
}

/// Why a join was refused (the token itself is never part of it: only its id).
#[derive(Debug, thiserror::Error)]
pub enum JoinRefusal {
    #[error("the join token is malformed")]
    Malformed,
    #[error("join token {id} is unknown here (revoked, or made for another cluster)")]
    Unknown { id: String },
    #[error("join token {id} expired")]
    Expired { id: String },
    #[error("join token {id} is used up")]
    UsedUp { id: String },
    #[error("join token {id} is for host {bound:?}, not {asked:?}")]
    WrongHost {
        id: String,
        bound: String,
        asked: String,
    },
    #[error("join token {id} names no host id: the agent must give one (--host-id)")]
    NoHostId { id: String },
    #[error("host {host:?} is not in the fleet (join token {id})")]
    NotInFleet { id: String, host: String },
    #[error("join token {id} is for pool {pool:?}; host {host:?} is in pool {host_pool:?}")]
    WrongPool {
        id: String,
        pool: String,
        host: String,
        host_pool: String,
    },
    #[error(transparent)]
    Tokens(#[from] TokenError),
}

fn random_hex(bytes: usize) -> String {
    use rand::RngCore;
    let mut b = vec![0u8; bytes];
    rand::rngs::OsRng.fill_bytes(&mut b);
    hex::encode(b)
}

fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Equal without telling how much of it matched by how long it took.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Read the book, change it with `f`, write it back compare-and-swap (again on a
/// concurrent change). `f` returns whether to write.
async fn update<T, E: From<TokenError>>(
    store: &dyn Store,
    mut f: impl FnMut(&mut Book) -> Result<(T, bool), E>,
) -> Result<T, E> {
    loop {
        let (mut book, version) = read(store).await?;
        let (out, write) = f(&mut book)?;
        if !write {
            return Ok(out);
        }
        let value =
            serde_json::to_string(&book).map_err(|source| TokenError::Corrupt { source })?;
        match store.put_record(TOKENS_RECORD, &value, version).await {
            Ok(_) => return Ok(out),
            Err(StoreError::RecordConflict { .. }) => continue,
            Err(source) => return Err(TokenError::Store { source }.into()),
        }
    }
}

async fn read(store: &dyn Store) -> Result<(Book, u64), TokenError> {
    match store
        .get_record(TOKENS_RECORD)
        .await
        .map_err(|source| TokenError::Store { source })?
    {
        None => Ok((Book::default(), 0)),
        Some(r) => Ok((
            serde_json::from_str(&r.value).map_err(|source| TokenError::Corrupt { source })?,
            r.version,
        )),
    }
}

fn forget_spent(book: &mut Book, now: u64) {
    book.tokens.retain(|t| {
        let spent = t
            .spent_at
            .filter(|_| t.uses_left == 0)
            .or_else(|| (t.expires_at <= now).then_some(t.expires_at));
        spent.is_none_or(|at| now < at.saturating_add(KEEP_SPENT))
    });
}

/// Make a token; returns it (the only time it exists outside the host it is given
/// to) and what the store keeps of it.
pub async fn create(
    store: &dyn Store,
    scope: &TokenScope,
    now: u64,
) -> Result<(String, TokenInfo), TokenError> {
    if scope.uses == 0 {
        return Err(TokenError::NoUses);
    }
    for (what, v) in [("--pool", &scope.pool), ("--host-id", &scope.host_id)] {
        if let Some(v) = v.as_ref().filter(|v| !gpushare_core::ids::valid_id(v)) {
            return Err(TokenError::BadScope {
                what,
                value: v.clone(),
            });
        }
    }
    let id = random_hex(4);
    let token = format!("{id}.{}", random_hex(16));
    let info = TokenInfo {
        id,
        hash: token_hash(&token),
        pool: scope.pool.clone(),
        host_id: scope.host_id.clone(),
        created_at: now,
        expires_at: now.saturating_add(scope.ttl.as_secs()),
        uses_left: scope.uses,
        spent_at: None,
    };
    let kept = info.clone();
    update(store, |book| {
        forget_spent(book, now);
        book.tokens.push(kept.clone());
        Ok::<_, TokenError>(((), true))
    })
    .await?;
    Ok((token, info))
}

/// A token just made ([`mint`]).
#[derive(Debug, Clone)]
pub struct Minted {
    /// The token itself: `<id>.<secret>`.
    pub token: String,
    /// What the store keeps of it.
    pub info: TokenInfo,
    /// The hash of the cluster's CA, which agents pin (`--ca-hash`).
    pub ca_hash: String,
}

/// Make a join token of `cluster` (`gpushare token create`, and the Terraform
/// provider's `gpushare_join_token`): the cluster's CA first when it has none yet,
/// so that the CA hash agents pin goes with the token.
pub async fn mint(
    store: &dyn Store,
    cluster: &str,
    scope: &TokenScope,
    now: u64,
) -> Result<Minted, TokenError> {
    let ca = crate::pki::ClusterCa::load_or_create(store, cluster)
        .await
        .map_err(|source| TokenError::Ca { source })?;
    let (token, info) = create(store, scope, now).await?;
    Ok(Minted {
        token,
        info,
        ca_hash: ca.hash(),
    })
}

/// A token's life as given on the command line or in Terraform: `90s`, `30m`,
/// `1h`, `2d` (days of 24 h: a token's life, not a calendar).
pub fn parse_ttl(s: &str) -> Result<Duration, String> {
    let span: jiff::Span = s
        .parse()
        .map_err(|e| format!("{s:?} is not a duration such as 90s, 30m, 1h or 2d ({e})"))?;
    let d = span
        .to_duration(jiff::SpanRelativeTo::days_are_24_hours())
        .map_err(|e| format!("{s:?}: give days, hours, minutes or seconds ({e})"))?;
    Duration::try_from(d).map_err(|_| format!("{s:?} is negative"))
}

/// The tokens the store keeps (used-up and expired ones for a day).
pub async fn list(store: &dyn Store) -> Result<Vec<TokenInfo>, TokenError> {
    Ok(read(store).await?.0.tokens)
}

/// Revoke token `id` now (hosts that joined with it keep their certificates).
pub async fn revoke(store: &dyn Store, id: &str) -> Result<(), TokenError> {
    update(store, |book| {
        let before = book.tokens.len();
        book.tokens.retain(|t| t.id != id);
        if book.tokens.len() == before {
            return Err(TokenError::NotFound { id: id.to_string() });
        }
        Ok(((), true))
    })
    .await
}

/// What a join's token is, looked up without spending it: `None` when it is not a
/// usable token of the book (unknown, expired, used up: the join is refused for
/// that), else the host id it was minted for, if any (`gpushare token create
/// --host-id`).
pub async fn peek(
    store: &dyn Store,
    token: &str,
    now: u64,
) -> Result<Option<Option<String>>, TokenError> {
    let Some((id, _)) = token.split_once('.') else {
        return Ok(None);
    };
    let hash = token_hash(token);
    let (book, _) = read(store).await?;
    Ok(book
        .tokens
        .into_iter()
        .find(|t| t.id == id && same(&t.hash, &hash) && t.expires_at > now && t.uses_left > 0)
        .map(|t| t.host_id))
}

/// Spend one use of `token` for host `asked` (empty: the host the token is bound
/// to), checking its scope against the fleet in `state`. Returns the host id.
pub async fn consume(
    store: &dyn Store,
    token: &str,
    asked: &str,
    state: &StoreState,
    now: u64,
) -> Result<String, JoinRefusal> {
    Ok(consume_for(store, token, asked, "", state, now).await?.0)
}

/// Give back one use of `token`, spent by a join whose registration then failed for
/// a reason that may pass (the state locked by an apply): the host may try again with
/// the same token (issue 46 item 8). A token since revoked or removed stays so.
pub async fn give_back(store: &dyn Store, token: &str) -> Result<(), TokenError> {
    let Some((id, _)) = token.split_once('.') else {
        return Ok(());
    };
    let hash = token_hash(token);
    update(store, |book| {
        let Some(t) = book
            .tokens
            .iter_mut()
            .find(|t| t.id == id && same(&t.hash, &hash))
        else {
            return Ok(((), false));
        };
        if t.uses_left != UNLIMITED {
            t.uses_left = t.uses_left.saturating_add(1);
        }
        Ok::<_, TokenError>(((), true))
    })
    .await
}

/// [`consume`], for a host that may also join a registered pool: `proposed` is the
/// id it asks for when `asked` is empty and the token binds none (derived from its
/// name). A pool token of a pool recorded as registered lets a host not yet in the
/// fleet join: returns the host id and, for such a host, the pool to record it in.
pub async fn consume_for(
    store: &dyn Store,
    token: &str,
    asked: &str,
    proposed: &str,
    state: &StoreState,
    now: u64,
) -> Result<(String, Option<String>), JoinRefusal> {
    let Some((id, secret)) = token.split_once('.') else {
        return Err(JoinRefusal::Malformed);
    };
    if id.is_empty() || secret.is_empty() || !id.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(JoinRefusal::Malformed);
    }
    let hash = token_hash(token);
    update(store, |book| {
        let t = book
            .tokens
            .iter_mut()
            .find(|t| t.id == id && same(&t.hash, &hash))
            .ok_or_else(|| JoinRefusal::Unknown { id: id.to_string() })?;
        if t.expires_at <= now {
            return Err(JoinRefusal::Expired { id: id.to_string() });
        }
        if t.uses_left == 0 {
            return Err(JoinRefusal::UsedUp { id: id.to_string() });
        }
        let host = match (&t.host_id, asked) {
            (Some(bound), "") => bound.clone(),
            (Some(bound), a) if bound != a => {
                return Err(JoinRefusal::WrongHost {
                    id: id.to_string(),
                    bound: bound.clone(),
                    asked: a.to_string(),
                })
            }
            (_, "") if !proposed.is_empty() => proposed.to_string(),
            (_, "") => return Err(JoinRefusal::NoHostId { id: id.to_string() }),
            (_, a) => a.to_string(),
        };
        // A token bound to a host id may be used before the host is recorded (minted
        // at launch); any other needs the host in the fleet, in its pool.
        if t.host_id.is_none() {
            let joins = t
                .pool
                .as_ref()
                .filter(|p| crate::registration::is_registered_pool(state, p));
            let Some(h) = state.hosts.get(&host) else {
                // A new host of a registered pool, recorded by the caller.
                let pool = joins.cloned().ok_or_else(|| JoinRefusal::NotInFleet {
                    id: id.to_string(),
                    host: host.clone(),
                })?;
                t.spend(now);
                return Ok(((host, Some(pool)), true));
            };
            if let Some(pool) = t.pool.as_ref().filter(|p| **p != h.capacity_provider) {
                return Err(JoinRefusal::WrongPool {
                    id: id.to_string(),
                    pool: pool.clone(),
                    host: host.clone(),
                    host_pool: h.capacity_provider.clone(),
                });
            }
        }
        t.spend(now);
        Ok(((host, None), true))
    })
    .await
}

#[cfg(test)]
mod tests {
    #[test]
    fn token_lifetimes_read_as_durations() {
        let secs = |s| super::parse_ttl(s).map(|d| d.as_secs());
        assert_eq!(secs("90s"), Ok(90));
        assert_eq!(secs("1h"), Ok(3600));
        assert_eq!(secs("2d"), Ok(172_800));
        assert!(secs("soon").is_err_and(|e| e.contains("\"soon\"")));
        assert!(secs("-1h").is_err());
    }

    #[test]
    fn an_unlimited_token_stays_unlimited_and_a_counted_one_runs_out() {
        let mut t = super::TokenInfo {
            id: "t".into(),
            hash: String::new(),
            pool: None,
            host_id: None,
            created_at: 0,
            expires_at: 100,
            uses_left: super::UNLIMITED,
            spent_at: None,
        };
        t.spend(5);
        assert_eq!(
            (t.uses_left, t.uses_text().as_str()),
            (super::UNLIMITED, "unlimited")
        );
        assert_eq!((t.spent_at, t.state(6)), (Some(5), "valid"));
        t.uses_left = 1;
        t.spend(7);
        assert_eq!((t.uses_text().as_str(), t.state(8)), ("0", "used up"));
        t.spend(9);
        assert_eq!(t.uses_left, 0);
    }
}

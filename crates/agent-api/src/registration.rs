//! Hosts joining a registered pool (`capacity_provider { hosts = "registered" }`):
//! your own servers, which gpushare never launches. Such a host joins with a pool
//! token and the facts it gives of itself ([`JoinFacts`]: the host id it derived
//! from its name or machine id, its CPUs, memory and GPUs); the controller records
//! it in the fleet on its first join, bound to the key of its signing request: a
//! second machine claiming the same id is refused until `gpushare host remove`
//! forgets the first. The host keeps its identity (key and certificate) in its state
//! directory, so a reboot needs no join, and its id stays what it derived.

use gpushare_core::model::{
    applied_pool, GpuInfo, Host, HostRegistration, HostSource, StoreState, REGISTERED_TYPE,
};
use gpushare_engine::store::{Store, StoreError};
use rcgen::{CertificateSigningRequestParams, PublicKeyData};
use rustls::pki_types::CertificateSigningRequestDer;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::time::Duration;

/// How long a join waits for the state lock (an apply in progress holds it).
const LOCK_WAIT: Duration = Duration::from_secs(20);

/// What a host says of itself when it joins (`JoinRequest.facts_json`). Only a
/// host joining a registered pool for the first time needs them; they are facts
/// for the planner until its agent's first report (GPUs) and for good (CPU, memory).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct JoinFacts {
    /// The host id it asks for when the agent is given none (derived from its
    /// name or machine id, see [`derive_host_id`]).
    #[serde(default)]
    pub host_id: String,
    #[serde(default)]
    pub hostname: String,
    /// The instance type it says it is (a registered pool's `instance_type` filter).
    #[serde(default)]
    pub instance_type: String,
    /// CPU units (1024 per CPU).
    #[serde(default)]
    pub cpu_units: u32,
    #[serde(default)]
    pub memory_mib: u64,
    #[serde(default)]
    pub gpus: Vec<GpuInfo>,
}

impl JoinFacts {
    /// The facts of a join request (empty: none given).
    pub fn from_request(json: &[u8]) -> Result<JoinFacts, serde_json::Error> {
        if json.is_empty() {
            return Ok(JoinFacts::default());
        }
        serde_json::from_slice(json)
    }

    /// This machine's facts: its name, the id derived from it (or from
    /// `/etc/machine-id`), its CPUs and memory, and `gpus`.
    pub fn of_this_machine(instance_type: Option<&str>, gpus: Vec<GpuInfo>) -> JoinFacts {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let hostname = read("/proc/sys/kernel/hostname").trim().to_string();
        let machine_id = read("/etc/machine-id").trim().to_string();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        let memory_mib = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kib| kib / 1024);
        JoinFacts {
            host_id: derive_host_id(&hostname, &machine_id).unwrap_or_default(),
            hostname,
            instance_type: instance_type.unwrap_or_default().to_string(),
            cpu_units: cpus.saturating_mul(1024),
            memory_mib,
            gpus,
        }
    }
}

/// A host id from the machine's name (lowercased; characters other than letters,
/// digits, '-', '_' and '.' become '-'), or, when the name gives none (empty,
/// `localhost`), `m-` and the first 12 hex digits of the machine id. Stable across
/// reboots and re-joins of one machine.
pub fn derive_host_id(hostname: &str, machine_id: &str) -> Option<String> {
    let name: String = hostname
        .trim()
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(gpushare_core::ids::MAX_ID_LEN)
        .collect();
    let name = name.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if !name.is_empty() && name != "localhost" && gpushare_core::ids::valid_id(name) {
        return Some(name.to_string());
    }
    let hex: String = machine_id
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(12)
        .collect();
    (hex.len() == 12).then(|| format!("m-{}", hex.to_ascii_lowercase()))
}

/// Why a host may not join a registered pool under the id it asks for.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    #[error("host id {host:?} is already registered by another machine (another key); remove it first (gpushare host remove {host}), join this one with a token minted for its id (gpushare token create --host-id {host}), or give it another name")]
    Taken { host: String },
    #[error("host id {host:?} is a launched host of the fleet, not a registered one")]
    Launched { host: String },
    #[error(
        "capacity_provider.{pool} is not a registered pool (hosts = \"registered\") as applied"
    )]
    NotRegistered { pool: String },
    #[error("capacity_provider.{pool} takes only hosts of instance type {want:?}; this host says {got:?} (gpushare agent --instance-type)")]
    WrongType {
        pool: String,
        want: String,
        got: String,
    },
    #[error("the host's certificate signing request is invalid")]
    BadCsr {
        #[source]
        source: rcgen::Error,
    },
    #[error("an interrupted apply left a journal: the host joins once it is finished")]
    ApplyPending,
    #[error("cannot record the host in the state")]
    Store {
        #[source]
        source: StoreError,
    },
}

impl RegisterError {
    /// Whether the host may try again later (the store, or an apply, is in the way).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            RegisterError::ApplyPending | RegisterError::Store { .. }
        )
    }
}

fn store_err(source: StoreError) -> RegisterError {
    RegisterError::Store { source }
}

/// SHA-256 (hex) of the public key of a certificate signing request: what a
/// registered host id is bound to.
pub fn key_sha256(csr_der: &[u8]) -> Result<String, RegisterError> {
    let csr =
        CertificateSigningRequestParams::from_der(&CertificateSigningRequestDer::from(csr_der))
            .map_err(|source| RegisterError::BadCsr { source })?;
    Ok(hex::encode(Sha256::digest(csr.public_key.der_bytes())))
}

/// Refuse a join under `host` by a key other than the one it was registered with
/// (checked before a token's use is spent; [`register`] checks again under the lock).
pub fn check_claim(state: &StoreState, host: &str, key: &str) -> Result<(), RegisterError> {
    match state.hosts.get(host).map(|h| &h.registration) {
        Some(Some(r)) if r.key_sha256 != key => Err(RegisterError::Taken {
            host: host.to_string(),
        }),
        _ => Ok(()),
    }
}

/// Whether `pool` is recorded in `state` as a registered pool.
pub fn is_registered_pool(state: &StoreState, pool: &str) -> bool {
    applied_pool(state, pool).is_some_and(|(s, _)| s == HostSource::Registered)
}

/// The record of a host joining registered pool `pool` now.
fn host_record(host: &str, pool: &str, facts: &JoinFacts, key: &str, now: u64) -> Host {
    let instance_type = if facts.instance_type.is_empty() {
        REGISTERED_TYPE.to_string()
    } else {
        facts.instance_type.clone()
    };
    Host::registered(
        host,
        pool,
        &instance_type,
        (facts.gpus.clone(), facts.cpu_units, facts.memory_mib),
        HostRegistration {
            key_sha256: key.to_string(),
            joined_at: now,
            hostname: facts.hostname.clone(),
        },
        now,
    )
}

/// Change the state under its lock (the engine's edit transaction): `edit` says
/// what to return and whether it changed the state (then it is committed, unless
/// an interrupted apply left a journal).
async fn under_lock<T>(
    store: &dyn Store,
    host: &str,
    edit: impl FnOnce(&mut StoreState) -> Result<(T, bool), RegisterError>,
) -> Result<T, RegisterError> {
    use gpushare_engine::store::edit::{self as tx, EditError, Edited, JournalRule};
    tx::edit(
        store,
        &format!("agent API: join of host {host}"),
        LOCK_WAIT,
        JournalRule::RefuseChanges,
        async |state: &mut StoreState| {
            let (value, changed) = edit(state)?;
            Ok(Edited { value, changed })
        },
    )
    .await
    .map_err(|e| match e {
        EditError::Edit(e) => e,
        EditError::JournalWaits => RegisterError::ApplyPending,
        EditError::Lock(s)
        | EditError::ReadJournal(s)
        | EditError::Load(s)
        | EditError::Commit(s)
        | EditError::Release(s) => store_err(s),
    })
}

/// Bind registered host `host` to `key` (under the state lock), for a join with a
/// token minted for that host id (`gpushare token create --host-id`): the way back
/// for a host whose certificates were revoked or whose key was lost (issue 46 item
/// 13). Its older certificates, of another key, are refused from then on. Returns
/// whether the key changed.
pub async fn rekey(
    store: &dyn Store,
    host: &str,
    key: &str,
    now: u64,
) -> Result<bool, RegisterError> {
    under_lock(store, host, |state| {
        let Some(r) = state
            .hosts
            .get_mut(host)
            .and_then(|h| h.registration.as_mut())
        else {
            return Ok((false, false));
        };
        if r.key_sha256 == key {
            return Ok((false, false));
        }
        r.key_sha256 = key.to_string();
        r.joined_at = now;
        Ok((true, true))
    })
    .await
}

/// Record `host` in registered pool `pool` (under the state lock), unless it is
/// there already with the same key. Returns whether it was recorded now.
pub async fn register(
    store: &dyn Store,
    host: &str,
    pool: &str,
    facts: &JoinFacts,
    key: &str,
    now: u64,
) -> Result<bool, RegisterError> {
    under_lock(store, host, |state| {
        if let Some(h) = state.hosts.get(host) {
            return match &h.registration {
                Some(r) if r.key_sha256 == key => Ok((false, false)),
                Some(_) => Err(RegisterError::Taken {
                    host: host.to_string(),
                }),
                None => Err(RegisterError::Launched {
                    host: host.to_string(),
                }),
            };
        }
        if !is_registered_pool(state, pool) {
            return Err(RegisterError::NotRegistered {
                pool: pool.to_string(),
            });
        }
        let want = state
            .resources
            .get(&gpushare_core::ResourceAddr::new(
                gpushare_core::ResourceKind::CapacityProvider,
                pool,
            ))
            .and_then(|r| r.attrs.get("instance_type"))
            .and_then(serde_json::Value::as_str)
            .filter(|t| !t.is_empty());
        if let Some(want) = want.filter(|w| *w != facts.instance_type) {
            return Err(RegisterError::WrongType {
                pool: pool.to_string(),
                want: want.to_string(),
                got: facts.instance_type.clone(),
            });
        }
        state
            .hosts
            .insert(host.to_string(), host_record(host, pool, facts, key, now));
        Ok((true, true))
    })
    .await
}

/// The facts of a join request and the key of its signing request, refused (as the
/// gRPC status the server answers) when the facts do not parse, the id the host
/// proposes is not an identifier, or the id it claims is registered to another key.
///
/// `rekey_for` is the host id the join's token was minted for, if any: that host
/// may join with a new key ([`rekey`]).
pub fn claim(
    state: &StoreState,
    req: &crate::pb::JoinRequest,
    rekey_for: Option<&str>,
) -> Result<(JoinFacts, String), tonic::Status> {
    let mut facts = JoinFacts::from_request(&req.facts_json).map_err(|e| {
        tonic::Status::invalid_argument(format!("the join facts are not valid: {e}"))
    })?;
    // One identifier rule for every id that enters through the API, checked before a
    // token's use is spent (issue 46).
    for (what, id) in [
        ("proposed host id", &facts.host_id),
        ("host id", &req.host_id),
    ] {
        if !id.is_empty() && !gpushare_core::ids::valid_id(id) {
            return Err(tonic::Status::invalid_argument(format!(
                "the {what} {id:?} is not a valid identifier (letters, digits, '-', '_' and '.', starting with a letter or digit, at most {} characters)",
                gpushare_core::ids::MAX_ID_LEN
            )));
        }
    }
    if facts.gpus.len() > gpushare_core::model::MAX_HOST_GPUS {
        return Err(tonic::Status::invalid_argument(format!(
            "the join facts name {} GPUs; a host has at most {}",
            facts.gpus.len(),
            gpushare_core::model::MAX_HOST_GPUS
        )));
    }
    facts
        .gpus
        .iter_mut()
        .for_each(gpushare_core::model::clean_gpu);
    facts.hostname = gpushare_core::model::clean_text(&facts.hostname);
    facts.instance_type = gpushare_core::model::clean_text(&facts.instance_type);
    let key = key_sha256(&req.csr_der)
        .map_err(|e| tonic::Status::invalid_argument(gpushare_agent::error_chain(&e)))?;
    let claimed = if req.host_id.is_empty() {
        &facts.host_id
    } else {
        &req.host_id
    };
    if rekey_for != Some(claimed.as_str()) {
        check_claim(state, claimed, &key)
            .map_err(|e| tonic::Status::permission_denied(e.to_string()))?;
    }
    Ok((facts, key))
}

/// [`rekey`] for the server: the refusal as a gRPC status (unavailable when the host
/// may try again), logged.
pub async fn record_key(
    store: &dyn Store,
    host: &str,
    key: &str,
    peer: &str,
) -> Result<(), tonic::Status> {
    match rekey(store, host, key, gpushare_core::util::unix_now()).await {
        Ok(changed) => {
            if changed {
                tracing::warn!(%peer, %host, "agent API: registered host joined with a new key (a token minted for its id); its older certificates are refused");
            }
            Ok(())
        }
        Err(e) => Err(refusal_status(&e, host, peer)),
    }
}

/// A registration refusal as the gRPC status the server answers (unavailable when
/// the host may try again), logged.
fn refusal_status(e: &RegisterError, host: &str, peer: &str) -> tonic::Status {
    let msg = gpushare_agent::error_chain(e);
    tracing::warn!(%peer, %host, reason = %msg, "agent API: registration refused");
    if e.is_transient() {
        tonic::Status::unavailable(msg)
    } else {
        tonic::Status::permission_denied(msg)
    }
}

/// [`register`] for the server: the refusal as a gRPC status (unavailable when the
/// host may try again), logged.
pub async fn record(
    store: &dyn Store,
    host: &str,
    pool: &str,
    facts: &JoinFacts,
    key: &str,
    peer: &str,
) -> Result<(), tonic::Status> {
    let now = gpushare_core::util::unix_now();
    match register(store, host, pool, facts, key, now).await {
        Ok(true) => {
            tracing::info!(%peer, %host, %pool, gpus = facts.gpus.len(), "agent API: host registered in a registered pool");
            Ok(())
        }
        Ok(false) => Ok(()),
        Err(e) => Err(refusal_status(&e, host, peer)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_ids_come_from_the_name_or_the_machine_id() {
        let mid = "0123456789abcdef0123456789abcdef";
        assert_eq!(
            derive_host_id("GPU-Rack-01", mid).as_deref(),
            Some("gpu-rack-01")
        );
        assert_eq!(
            derive_host_id("lab box#2", mid).as_deref(),
            Some("lab-box-2")
        );
        assert_eq!(derive_host_id("", mid).as_deref(), Some("m-0123456789ab"));
        assert_eq!(
            derive_host_id("localhost", mid).as_deref(),
            Some("m-0123456789ab")
        );
        assert_eq!(derive_host_id("", "short"), None);
        // The same machine derives the same id every time.
        assert_eq!(derive_host_id("node7", mid), derive_host_id("node7", mid));
    }
}

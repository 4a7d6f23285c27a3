//! A host's launch settings, as recorded with the host when it was planned
//! ([`LaunchRecord`]), and the pool's `refresh { ... }` block ([`RefreshSettings`]).
//!
//! A host whose recorded settings differ from its pool's settings now is
//! *outdated*: the planner rolls it (see `plan/refresh.rs` and docs/refresh.md).
//! The record keeps a digest (to compare) and the values (to say what differs).
//! Every value is built from named fields, never from a whole struct's
//! serialisation, so that a field added to a settings struct does not make every
//! running host outdated.

use super::CapacityProvider;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The settings a host was launched with, recorded with the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchRecord {
    /// Hex sha256 of `settings` (names and values).
    pub digest: String,
    /// Setting name -> its value as shown in plans (`image`, `security_groups`,
    /// `instance_profile`, `key_name`, `root_volume`, `metadata_options`, `mps`,
    /// `agent`, `user_data`).
    pub settings: BTreeMap<String, String>,
}

/// One launch setting that differs between a host and its pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingChange {
    pub name: String,
    /// As the host was launched (`None`: not recorded).
    pub from: Option<String>,
    /// As the pool launches now.
    pub to: String,
}

impl std::fmt::Display for SettingChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} -> {}",
            self.name,
            self.from.as_deref().unwrap_or("(not recorded)"),
            self.to
        )
    }
}

/// What an unset optional setting is shown as.
const UNSET: &str = "(none)";

fn opt(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| UNSET.to_string())
}

fn short_digest(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0x1f]);
    }
    format!("sha256:{}", &hex::encode(h.finalize())[..12])
}

impl LaunchRecord {
    /// The launch settings of a host launched now by `pool`.
    pub fn of(pool: &CapacityProvider) -> LaunchRecord {
        let mps = &pool.mps;
        let mps_text = format!(
            "enabled={} default_active_thread_percentage={} pipe_directory={} log_directory={}",
            mps.enabled,
            mps.default_active_thread_percentage
                .map_or_else(|| UNSET.to_string(), |p| p.to_string()),
            mps.pipe_directory,
            mps.log_directory
        ) + &mps.user.map_or_else(String::new, |u| format!(" user={u}"));
        let agent = &pool.agent;
        let agent_text = format!(
            "url={} sha256={} path={}",
            opt(&agent.url),
            opt(&agent.sha256),
            agent.path
        );
        let mut groups = pool.security_groups.clone();
        groups.sort();
        groups.dedup();
        let rv = &pool.root_volume;
        let md = &pool.metadata_options;
        let mut settings = BTreeMap::new();
        let mut put = |k: &str, v: String| {
            settings.insert(k.to_string(), v);
        };
        put("image", opt(&pool.image));
        put(
            "security_groups",
            if groups.is_empty() {
                UNSET.to_string()
            } else {
                groups.join(",")
            },
        );
        put("instance_profile", opt(&pool.instance_profile));
        put("key_name", opt(&pool.key_name));
        put(
            "root_volume",
            format!(
                "{} GiB {}{}",
                rv.size_gib,
                rv.volume_type,
                if rv.encrypted { " encrypted" } else { "" }
            ),
        );
        put(
            "metadata_options",
            format!(
                "http_tokens_required={} http_put_response_hop_limit={}",
                md.http_tokens_required, md.http_put_response_hop_limit
            ),
        );
        // The user data is made from the MPS settings and the agent's source (plus
        // per-host values such as a join token, which are no setting of the pool).
        put("user_data", short_digest(&[&mps_text, &agent_text]));
        put("mps", mps_text);
        put("agent", agent_text);
        let parts: Vec<String> = settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
        LaunchRecord {
            digest: short_digest(&parts),
            settings,
        }
    }

    /// The settings of `now` that differ from this record, by name.
    pub fn differences(&self, now: &LaunchRecord) -> Vec<SettingChange> {
        if self.digest == now.digest {
            return vec![];
        }
        now.settings
            .iter()
            .filter(|(k, v)| self.settings.get(*k) != Some(v))
            .map(|(k, v)| SettingChange {
                name: k.clone(),
                from: self.settings.get(k).cloned(),
                to: v.clone(),
            })
            .collect()
    }
}

/// `refresh { ... }` of a capacity provider: how outdated hosts roll.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct RefreshSettings {
    /// Share of the pool's hosts that must stay in service (not draining) while
    /// hosts roll, in percent; lowers the batch that `max_draining_percent` allows
    /// (never under one host).
    #[serde(default)]
    pub min_healthy_percent: u8,
    /// Seconds to wait after a batch's new hosts launched before the next batch
    /// (at each checkpoint only, when `checkpoints` is set).
    #[serde(default)]
    pub pause_seconds: u64,
    /// Percentages of the pool's outdated hosts at which the rollout pauses for
    /// `pause_seconds` (e.g. `[25, 50, 100]`); empty: after every batch.
    #[serde(default)]
    pub checkpoints: Vec<u8>,
}

impl RefreshSettings {
    pub fn is_default(&self) -> bool {
        *self == RefreshSettings::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> CapacityProvider {
        serde_json::from_value(serde_json::json!({"instance_type": "g6.xlarge", "max_size": 2}))
            .expect("pool")
    }

    #[test]
    fn a_new_image_differs_by_image_only() {
        let a = LaunchRecord::of(&pool());
        let mut p = pool();
        p.image = Some("ami-b".into());
        let b = LaunchRecord::of(&p);
        assert_ne!(a.digest, b.digest);
        let d = a.differences(&b);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].to_string(), "image (none) -> ami-b");
        assert!(a.differences(&a.clone()).is_empty());
    }

    #[test]
    fn mps_and_agent_changes_change_the_user_data_digest_and_tags_do_not() {
        let a = LaunchRecord::of(&pool());
        let mut p = pool();
        p.agent.url = Some("https://example.com/gpushare".into());
        let names: Vec<String> = a
            .differences(&LaunchRecord::of(&p))
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["agent", "user_data"]);
        let mut p = pool();
        p.tags.insert("team".into(), "ml".into());
        p.max_size = 9;
        p.security_groups = vec![];
        assert_eq!(LaunchRecord::of(&p), a);
        // Order of security groups does not matter.
        let mut x = pool();
        x.security_groups = vec!["sg-2".into(), "sg-1".into()];
        let mut y = pool();
        y.security_groups = vec!["sg-1".into(), "sg-2".into()];
        assert_eq!(LaunchRecord::of(&x), LaunchRecord::of(&y));
    }
}

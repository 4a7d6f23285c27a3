//! The `gpushare` block: which cluster, store and cloud, and how runs behave ([`Settings`]).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum CloudKind {
    #[default]
    Local,
    Ec2,
}

impl CloudKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CloudKind::Local => "local",
            CloudKind::Ec2 => "ec2",
        }
    }
}

/// Who runs the agents of the local simulated fleet's hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LocalAgents {
    /// gpushare runs them in-process, a round before every plan and after every apply
    /// (simulated runtime, stand-in GPUs and MPS daemon).
    #[default]
    InProcess,
    /// Each host's `gpushare agent` runs as a process of its own, started by the user
    /// or a test; hosts whose agent has not reported show so.
    External,
}

/// The `gpushare { ... }` block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub cluster: String,
    #[serde(default)]
    pub cloud: CloudKind,
    /// Store URL: `file://DIR` (default `DIR/.gpushare/` next to the config) or `etcd://host:port`.
    #[serde(default)]
    pub store: Option<String>,
    #[serde(default)]
    pub region: Option<String>,
    /// EC2 endpoint override (also read from AWS_ENDPOINT_URL_EC2 / AWS_ENDPOINT_URL).
    #[serde(default)]
    pub ec2_endpoint: Option<String>,
    /// ELBv2 endpoint override, for services' `load_balancer`s (also read from
    /// AWS_ENDPOINT_URL_ELASTIC_LOAD_BALANCING_V2 / AWS_ENDPOINT_URL).
    #[serde(default)]
    pub elbv2_endpoint: Option<String>,
    /// Seed for every random choice the planner makes (placement tie-breaks, ids).
    #[serde(default)]
    pub seed: u64,
    /// How long to wait for the store lock, in seconds.
    #[serde(default = "default_lock_timeout")]
    pub lock_timeout_seconds: u64,
    /// Local cloud: who runs the simulated hosts' agents.
    #[serde(default)]
    pub local_agents: LocalAgents,
    /// The controller's agent API as hosts dial it (`https://HOST:PORT`): launched
    /// hosts join with a single-use token minted at launch and this address, passed in
    /// their user data. Required with the ec2 cloud; with the local fleet's external
    /// agents, each launched host's boot environment (`gpushare debug user-data`).
    #[serde(default)]
    pub controller_address: Option<String>,
    /// Tags on every launched host and its volumes, under the pool's and the host's
    /// own tags (the more specific wins on a key).
    #[serde(default)]
    pub default_tags: BTreeMap<String, String>,
    /// How long after its recorded launch a host that the cloud does not list yet is
    /// taken for eventual consistency (pending), not for gone, in seconds.
    #[serde(default = "default_consistency_window")]
    pub consistency_window_seconds: u64,
    /// How long apply waits for a moved task's successor to be reported running by
    /// its agent before it stops the old task anyway, in seconds (0: no wait).
    #[serde(default = "default_move_timeout")]
    pub move_timeout_seconds: u64,
    /// How long plans avoid a subnet and zone that refused an instance type for lack of
    /// capacity, in seconds: the planner skips refusals older than this.
    #[serde(default = "default_capacity_refusal")]
    pub capacity_refusal_seconds: u64,
    /// Seconds without an agent report after which a host counts as silent and is
    /// replaced (0: never). The planner's [`crate::plan::Options`] take it from here
    /// (`--heartbeat-timeout` overrides it for one run).
    #[serde(default = "default_heartbeat_timeout")]
    pub heartbeat_timeout_seconds: u64,
    /// Seconds after its launch within which a host's agent must first report, or the
    /// host counts as silent (0: never); also the life of a launched host's join token.
    #[serde(default = "default_boot_grace")]
    pub boot_grace_seconds: u64,
    /// Whether plans move running tasks to fewer hosts (bounded moves).
    #[serde(default)]
    pub consolidate: bool,
}

/// Default heartbeat timeout (the planner's `Options::heartbeat_timeout_seconds`):
/// two minutes without a report.
pub const DEFAULT_HEARTBEAT_TIMEOUT_SECONDS: u64 = 120;
/// Default boot grace (the planner's `Options::boot_grace_seconds`): ten minutes to
/// boot and start the agent.
pub const DEFAULT_BOOT_GRACE_SECONDS: u64 = 600;

fn default_heartbeat_timeout() -> u64 {
    DEFAULT_HEARTBEAT_TIMEOUT_SECONDS
}

fn default_boot_grace() -> u64 {
    DEFAULT_BOOT_GRACE_SECONDS
}

/// Default [`Settings::capacity_refusal_seconds`]: ten minutes.
pub const DEFAULT_CAPACITY_REFUSAL_SECONDS: u64 = 600;

fn default_capacity_refusal() -> u64 {
    DEFAULT_CAPACITY_REFUSAL_SECONDS
}

fn default_consistency_window() -> u64 {
    300
}

fn default_move_timeout() -> u64 {
    600
}

fn default_lock_timeout() -> u64 {
    30
}

impl Settings {
    /// Settings from a Terraform provider block's attributes (as JSON, nulls for
    /// unset ones; see `schema::provider_schema`): `state_dir = DIR` is
    /// `store = "file://DIR"` (it wins over `store`), `endpoints = { ec2 = URL, elbv2 = URL }`
    /// are `ec2_endpoint` and `elbv2_endpoint`, `cluster` defaults to "default".
    pub fn from_provider_block(
        mut obj: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Settings, serde_json::Error> {
        use serde_json::Value;
        if let Some(Value::String(dir)) = obj.remove("state_dir") {
            obj.insert("store".into(), Value::String(format!("file://{dir}")));
        }
        if let Some(endpoints) = obj.remove("endpoints") {
            for (service, key) in [("ec2", "ec2_endpoint"), ("elbv2", "elbv2_endpoint")] {
                if let Some(url) = endpoints.get(service).and_then(|u| u.as_str()) {
                    obj.insert(key.into(), Value::String(url.to_string()));
                }
            }
        }
        obj.retain(|_, v| !v.is_null());
        obj.entry("cluster")
            .or_insert_with(|| Value::String("default".into()));
        serde_json::from_value(Value::Object(obj))
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            cluster: "default".into(),
            cloud: CloudKind::Local,
            store: None,
            region: None,
            ec2_endpoint: None,
            elbv2_endpoint: None,
            seed: 0,
            lock_timeout_seconds: default_lock_timeout(),
            local_agents: LocalAgents::InProcess,
            controller_address: None,
            default_tags: BTreeMap::new(),
            consistency_window_seconds: default_consistency_window(),
            move_timeout_seconds: default_move_timeout(),
            capacity_refusal_seconds: default_capacity_refusal(),
            heartbeat_timeout_seconds: default_heartbeat_timeout(),
            boot_grace_seconds: default_boot_grace(),
            consolidate: false,
        }
    }
}

/// What is wrong with a `store` URL, if anything: only `file://PATH`, a plain path
/// and `etcd://HOST:PORT[,HOST:PORT...]/PREFIX` are stores. A near miss (`etcd:/host`,
/// `file:path`, `etc://`) is refused with what was probably meant, never taken as a
/// directory of that name (which would plan a second, empty fleet). Returns the
/// problem and a hint.
pub fn store_url_issue(url: &str) -> Option<(String, String)> {
    const SCHEMES: [&str; 2] = ["file", "etcd"];
    let forms =
        "a store is `file://PATH`, a plain path, or `etcd://HOST:PORT/PREFIX` (docs/etcd.md)";
    if url.trim().is_empty() {
        return Some(("store is empty".into(), forms.into()));
    }
    if let Some((scheme, rest)) = url.split_once("://") {
        if SCHEMES.contains(&scheme) {
            return rest.trim_matches('/').is_empty().then(|| {
                (
                    format!(
                        "store {url:?} names no {}",
                        if scheme == "file" {
                            "directory"
                        } else {
                            "etcd member"
                        }
                    ),
                    forms.to_string(),
                )
            });
        }
        let near = SCHEMES
            .iter()
            .find(|s| crate::catalog::edit_distance(s, &scheme.to_ascii_lowercase()) <= 1);
        let hint = match near {
            Some(s) => format!("did you mean {s}://{rest}? {forms}"),
            None => forms.to_string(),
        };
        return Some((
            format!("store {url:?}: gpushare has no {scheme:?} store"),
            hint,
        ));
    }
    // `etcd:/host:2379`, `etcd:host:2379`, `file:/dir`: a scheme with its slashes wrong.
    if let Some((scheme, rest)) = url.split_once(':') {
        let lower = scheme.to_ascii_lowercase();
        if let Some(s) = SCHEMES
            .iter()
            .find(|s| crate::catalog::edit_distance(s, &lower) <= 1)
        {
            return Some((
                format!("store {url:?} looks like a {s} URL with its slashes wrong"),
                format!(
                    "did you mean {s}://{}? {forms}",
                    rest.trim_start_matches('/')
                ),
            ));
        }
    }
    None
}

#[cfg(test)]
mod store_url_tests {
    use super::store_url_issue;

    /// Issue 45 item 2, regression: a mistyped store URL became a new file store.
    #[test]
    fn only_file_paths_and_etcd_urls_are_stores_and_near_misses_say_what_was_meant() {
        for ok in [
            "file:///var/gpushare",
            "file://state",
            "state",
            "/abs/dir",
            "etcd://127.0.0.1:2379/p",
            "etcd://a:1,b:2/p?tls=1",
        ] {
            assert_eq!(store_url_issue(ok), None, "{ok}");
        }
        let (what, hint) = store_url_issue("etcd:/localhost:2379").expect("refused");
        assert!(what.contains("slashes wrong"), "{what}");
        assert!(
            hint.contains("did you mean etcd://localhost:2379"),
            "{hint}"
        );
        let (what, hint) = store_url_issue("s3://bucket/x").expect("refused");
        assert!(what.contains("no \"s3\" store"), "{what}");
        assert!(hint.contains("etcd://HOST:PORT/PREFIX"), "{hint}");
        let (_, hint) = store_url_issue("etc://h:1/p").expect("refused");
        assert!(hint.contains("did you mean etcd://h:1/p"), "{hint}");
        assert!(store_url_issue("file://").is_some());
        assert!(store_url_issue("").is_some());
    }
}

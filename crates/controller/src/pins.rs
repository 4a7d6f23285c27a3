//! What a git-following controller holds fixed: the store its state lives in, the
//! cloud and region (and endpoint) it drives, and the cluster name. They come from
//! the flags (`--store`, `--cloud`, `--cluster`) or else from the first commit the
//! controller takes, and are kept in `CACHE/pins.json` (0600) so a restart holds the
//! same ones; a commit that names others is refused, never applied (it could hand
//! the store's credentials to another address, or plan a whole new fleet).

use crate::error::PinError;
use gpushare_core::model::{CloudKind, Settings};
use std::path::Path;

/// Name of the pin file inside the git cache.
pub const PIN_FILE: &str = "pins.json";

/// The settings a controller holds fixed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pins {
    /// The store URL as the configuration names it (`None`: the default store,
    /// `STATE_DIR/.gpushare/`).
    pub store: Option<String>,
    pub cloud: CloudKind,
    pub region: Option<String>,
    pub ec2_endpoint: Option<String>,
    #[serde(default)]
    pub elbv2_endpoint: Option<String>,
    pub cluster: String,
}

/// One setting of a commit that differs from its pin.
#[derive(Debug)]
pub struct Mismatch {
    setting: &'static str,
    commit: String,
    pinned: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: the commit says {}, the controller is pinned to {}",
            self.setting, self.commit, self.pinned
        )
    }
}

fn shown(v: Option<&str>) -> String {
    v.map_or_else(|| "(unset)".to_string(), |s| format!("{s:?}"))
}

impl Pins {
    pub fn of(s: &Settings) -> Pins {
        Pins {
            store: s.store.clone(),
            cloud: s.cloud,
            region: s.region.clone(),
            ec2_endpoint: s.ec2_endpoint.clone(),
            elbv2_endpoint: s.elbv2_endpoint.clone(),
            cluster: s.cluster.clone(),
        }
    }

    /// Make `settings` follow the pins: a commit that leaves `store` out uses the
    /// pinned store; any other difference is a mismatch (and nothing is changed).
    pub fn hold(&self, settings: &mut Settings) -> Result<(), Vec<Mismatch>> {
        let mut out = Vec::new();
        let store = settings.store.clone().or_else(|| self.store.clone());
        let mut check = |setting, commit: Option<&str>, pinned: Option<&str>| {
            if commit != pinned {
                out.push(Mismatch {
                    setting,
                    commit: shown(commit),
                    pinned: shown(pinned),
                });
            }
        };
        check("store", store.as_deref(), self.store.as_deref());
        check(
            "cloud",
            Some(settings.cloud.as_str()),
            Some(self.cloud.as_str()),
        );
        check("region", settings.region.as_deref(), self.region.as_deref());
        check(
            "ec2_endpoint",
            settings.ec2_endpoint.as_deref(),
            self.ec2_endpoint.as_deref(),
        );
        check(
            "elbv2_endpoint",
            settings.elbv2_endpoint.as_deref(),
            self.elbv2_endpoint.as_deref(),
        );
        check(
            "cluster",
            Some(settings.cluster.as_str()),
            Some(self.cluster.as_str()),
        );
        if out.is_empty() {
            settings.store = store;
            Ok(())
        } else {
            Err(out)
        }
    }
}

/// The pins the flags give (any of store, cloud, cluster).
#[derive(Debug, Clone, Default)]
pub struct PinFlags {
    pub store: Option<String>,
    pub cloud: Option<CloudKind>,
    pub cluster: Option<String>,
}

impl PinFlags {
    /// The first commit's pins, with the flags over them: a commit that leaves
    /// `store` out takes the flag's; any other difference from a flag is a mismatch.
    pub fn first(&self, settings: &mut Settings) -> Result<Pins, Vec<Mismatch>> {
        let pins = self.set(Pins::of(settings));
        pins.hold(settings)?;
        Ok(pins)
    }

    /// `pins` with the flags given over them.
    fn set(&self, mut pins: Pins) -> Pins {
        if let Some(s) = &self.store {
            pins.store = Some(s.clone());
        }
        if let Some(c) = self.cloud {
            pins.cloud = c;
        }
        if let Some(c) = &self.cluster {
            pins.cluster = c.clone();
        }
        pins
    }

    /// The pins read from the pin file, with the flags over them (a flag that
    /// differs moves the pin: the operator's deliberate choice, logged).
    pub fn over(&self, before: Pins) -> Pins {
        let pins = self.set(before.clone());
        if pins != before {
            tracing::warn!(from = ?before, to = ?pins, "the flags move the controller's pins");
        }
        pins
    }
}

/// The pins kept in `path`, if any; a file that does not parse is an error (the
/// controller does not start rather than pin whatever the next commit says).
pub fn read(path: &Path) -> Result<Option<Pins>, PinError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| PinError::Parse {
                path: path.to_path_buf(),
                source,
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(PinError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Keep `pins` in `path` (0600, replaced atomically).
pub fn write(path: &Path, pins: &Pins) -> Result<(), PinError> {
    let bytes = serde_json::to_vec_pretty(pins).map_err(PinError::Serialise)?;
    gpushare_engine::fsutil::write_atomic(path, &bytes).map_err(|source| PinError::Write {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(store: Option<&str>, cluster: &str) -> Settings {
        Settings {
            cluster: cluster.into(),
            store: store.map(str::to_string),
            ..Settings::default()
        }
    }

    #[test]
    fn a_commit_leaving_the_store_out_takes_the_pinned_one_and_any_other_is_refused() {
        let flags = PinFlags {
            store: Some("etcd://etcd.internal:2379".into()),
            ..PinFlags::default()
        };
        let mut first = settings(None, "prod");
        let pins = flags.first(&mut first).expect("pinned");
        assert_eq!(first.store.as_deref(), Some("etcd://etcd.internal:2379"));
        assert_eq!(pins.cluster, "prod");

        let mut same = settings(Some("etcd://etcd.internal:2379"), "prod");
        pins.hold(&mut same).expect("the same store");
        let mut other = settings(Some("etcd://203.0.113.9:2379"), "staging");
        let e = pins.hold(&mut other).expect_err("refused");
        let lines: Vec<String> = e.iter().map(ToString::to_string).collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].starts_with("store: the commit says \"etcd://203.0.113.9:2379\""));
        assert!(lines[1].starts_with("cluster:"), "{lines:?}");
        assert_eq!(
            other.store.as_deref(),
            Some("etcd://203.0.113.9:2379"),
            "unchanged"
        );

        let mut wrong = settings(Some("/srv/elsewhere"), "prod");
        assert!(flags.first(&mut wrong).is_err(), "a flag is a pin too");
    }
}

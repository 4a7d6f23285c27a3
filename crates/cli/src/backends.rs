//! Builds the store and the cloud named by the `gpushare { store, cloud }` settings.
//!
//! - Store: `file` in `<config dir>/.gpushare/` by default; `store = "file://PATH"`
//!   (relative to the configuration directory) or a plain path overrides it.
//! - Cloud: `local` (the simulated fleet, kept in the state directory next to the
//!   file store) or `ec2`.

use anyhow::{bail, Context};
use gpushare_core::model::Settings;
use gpushare_engine::cloud::{open_cloud, Cloud, LocalCloud, OpenedCloud};
use gpushare_engine::store::{FileStore, Store};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Name of the default state directory inside the configuration directory.
pub const STATE_DIR: &str = ".gpushare";

/// The store and the cloud one command works with.
pub struct Backends {
    pub store: Arc<dyn Store>,
    pub cloud: Arc<dyn Cloud>,
    /// Set when the cloud is the local simulated fleet: its agents run in-process and
    /// faults can be injected.
    pub local: Option<Arc<LocalCloud>>,
    /// Where agents on launched hosts reach the store.
    pub store_address: String,
}

/// Where the store keeps its files for this configuration directory.
pub fn state_dir(settings: &Settings, config_dir: &Path) -> anyhow::Result<PathBuf> {
    let Some(url) = settings.store.as_deref() else {
        return Ok(config_dir.join(STATE_DIR));
    };
    let path = if let Some(p) = url.strip_prefix("file://") {
        p
    } else if let Some((scheme, _)) = url.split_once("://") {
        bail!(
            "settings.store = {url:?}: the {scheme:?} store is not available in this build of gpushare \
             (use file://PATH, or leave store unset for {STATE_DIR}/ next to the configuration)"
        );
    } else {
        url
    };
    if path.is_empty() {
        bail!("settings.store = {url:?} names no directory");
    }
    Ok(config_dir.join(path))
}

/// Open the store and the cloud for `settings`, the configuration living in `config_dir`.
pub async fn build(settings: &Settings, config_dir: &Path) -> anyhow::Result<Backends> {
    let dir = state_dir(settings, config_dir)?;
    let store = FileStore::open(&dir)
        .with_context(|| format!("opening the file store in {}", dir.display()))?;
    let store_address = store.location();
    let store: Arc<dyn Store> = Arc::new(store);
    #[cfg(feature = "ec2")]
    let ec2 = Some(gpushare_ec2::Ec2Cloud::from_settings(settings));
    #[cfg(not(feature = "ec2"))]
    let ec2 = gpushare_engine::cloud::NO_EC2;
    let OpenedCloud { cloud, local } = open_cloud(settings, &dir, ec2).await?;
    Ok(Backends {
        store,
        cloud,
        local,
        store_address,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_store(store: Option<&str>) -> Settings {
        Settings {
            store: store.map(str::to_string),
            ..Settings::default()
        }
    }

    #[test]
    fn the_state_directory_defaults_next_to_the_configuration() {
        let base = Path::new("/cfg");
        assert_eq!(
            state_dir(&with_store(None), base).expect("ok"),
            PathBuf::from("/cfg/.gpushare")
        );
        assert_eq!(
            state_dir(&with_store(Some("file://st")), base).expect("ok"),
            PathBuf::from("/cfg/st")
        );
        assert_eq!(
            state_dir(&with_store(Some("file:///abs/st")), base).expect("ok"),
            PathBuf::from("/abs/st")
        );
        assert_eq!(
            state_dir(&with_store(Some("rel")), base).expect("ok"),
            PathBuf::from("/cfg/rel")
        );
    }

    #[test]
    fn unknown_store_schemes_are_refused_by_name() {
        let err = state_dir(&with_store(Some("etcd://127.0.0.1:2379")), Path::new("/c"))
            .expect_err("refused");
        assert!(err.to_string().contains("\"etcd\" store"), "{err}");
        assert!(state_dir(&with_store(Some("file://")), Path::new("/c")).is_err());
    }
}

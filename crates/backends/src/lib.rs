//! The backends factory: opens the store and the cloud that `gpushare { store, cloud }`
//! (or the provider block) names, once, for the CLI, the host agent and the Terraform
//! provider alike. The only crate besides the binaries that knows the EC2 backend
//! (behind the `ec2` feature), so the engine never depends on the EC2 client.
//!
//! - Store: `file` in `<base>/.gpushare/` by default; `store = "file://PATH"` or a
//!   plain path (relative to `base`, the configuration directory) overrides it;
//!   `store = "etcd://HOST:PORT[,HOST:PORT...]/PREFIX"` is the etcd store (TLS files
//!   and credentials from `GPUSHARE_ETCD_*`, see docs/etcd.md).
//! - Cloud: `local` (the simulated fleet, kept in the file store's directory, or in
//!   `<base>/.gpushare/` beside an etcd store) or `ec2`.

use gpushare_core::model::{LocalAgents, Settings};
use gpushare_engine::agents::HostAgents;
use gpushare_engine::cloud::{open_cloud, OpenCloudError, OpenedCloud};
use gpushare_engine::reconcile::Backends;
use gpushare_engine::store::{FileStore, Store, StoreError};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Name of the default state directory inside the configuration directory.
pub const STATE_DIR: &str = ".gpushare";

/// Where the state lives, as parsed from a store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// A directory (the `file` store).
    Dir(PathBuf),
    /// An `etcd://` URL (the etcd store).
    Etcd(String),
}

/// Why the backends could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(
        "store = {url:?}: the {scheme:?} store is not available in this build of gpushare \
         (use file://PATH, or leave store unset for {STATE_DIR}/ next to the configuration)"
    )]
    UnsupportedStore { url: String, scheme: String },
    #[error("{problem}; {hint}")]
    BadStoreUrl { problem: String, hint: String },
    #[error("store = {url:?} names no directory")]
    EmptyPath { url: String },
    #[error("opening the file store in {}", dir.display())]
    FileStore {
        dir: PathBuf,
        #[source]
        source: StoreError,
    },
    #[error("opening the etcd store")]
    Etcd(#[source] gpushare_store_etcd::OpenError),
    #[error(transparent)]
    Cloud(#[from] OpenCloudError),
}

/// Parse `settings.store` (`None`: the default directory) against `base`.
pub fn store_location(store: Option<&str>, base: &Path) -> Result<StoreLocation, OpenError> {
    let Some(url) = store else {
        return Ok(StoreLocation::Dir(base.join(STATE_DIR)));
    };
    if let Some((problem, hint)) = gpushare_core::model::store_url_issue(url) {
        return Err(OpenError::BadStoreUrl { problem, hint });
    }
    let path = if let Some(p) = url.strip_prefix("file://") {
        p
    } else if url.starts_with("etcd://") {
        return Ok(StoreLocation::Etcd(url.to_string()));
    } else if let Some((scheme, _)) = url.split_once("://") {
        return Err(OpenError::UnsupportedStore {
            url: url.to_string(),
            scheme: scheme.to_string(),
        });
    } else {
        url
    };
    if path.is_empty() {
        return Err(OpenError::EmptyPath {
            url: url.to_string(),
        });
    }
    Ok(StoreLocation::Dir(base.join(path)))
}

/// Open the store a URL names (the host agent's `--store`).
pub async fn open_store(
    url: Option<&str>,
    base: &Path,
) -> Result<(Arc<dyn Store>, StoreLocation), OpenError> {
    let location = store_location(url, base)?;
    let store: Arc<dyn Store> = match &location {
        StoreLocation::Dir(dir) => {
            Arc::new(FileStore::open(dir).map_err(|source| OpenError::FileStore {
                dir: dir.clone(),
                source,
            })?)
        }
        StoreLocation::Etcd(url) => Arc::new(
            gpushare_store_etcd::EtcdStore::open(url, gpushare_store_etcd::EtcdOptions::from_env())
                .await
                .map_err(OpenError::Etcd)?,
        ),
    };
    Ok((store, location))
}

/// Open the store and the cloud for `settings`, relative paths taken from `base`.
pub async fn open(settings: &Settings, base: &Path) -> Result<Backends, OpenError> {
    let (store, location) = open_store(settings.store.as_deref(), base).await?;
    let (dir, state_dir) = match location {
        StoreLocation::Dir(dir) => (dir.clone(), Some(dir)),
        // The local fleet (if that is the cloud) lives beside the configuration.
        StoreLocation::Etcd(_) => (base.join(STATE_DIR), None),
    };
    // The EC2 backend caches the regional prices it reads in the store.
    #[cfg(feature = "ec2")]
    let ec2 = Some(async {
        gpushare_ec2::Ec2Cloud::from_settings(settings)
            .await
            .map(|c| c.with_price_cache(store.clone()))
    });
    #[cfg(not(feature = "ec2"))]
    let ec2 = gpushare_engine::cloud::NO_EC2;
    let OpenedCloud { cloud, local } = open_cloud(settings, &dir, ec2).await?;
    // Load balancers (ELBv2), connected on first use: only a service with a
    // `load_balancer` needs an AWS region.
    #[cfg(feature = "ec2")]
    let balancer: Option<Arc<dyn gpushare_engine::balancer::TargetGroups>> =
        Some(Arc::new(gpushare_ec2::Elbv2::from_settings(settings)));
    #[cfg(not(feature = "ec2"))]
    let balancer = None;
    // The local fleet's hosts run the host agent's own loop, in-process.
    // (or, with `local_agents = "external"`, each in a `gpushare agent` process of its own).
    let agents = local
        .clone()
        .filter(|_| settings.local_agents == LocalAgents::InProcess)
        .map(|l| Arc::new(gpushare_agent::SimFleet::new(l)) as Arc<dyn HostAgents>);
    tracing::debug!(store = %store.location(), cloud = cloud.kind(), "backends opened");
    Ok(Backends {
        store,
        cloud,
        local,
        state_dir,
        agents,
        consistency_window_seconds: settings.consistency_window_seconds,
        balancer,
        // Launched hosts join the controller with a token minted at launch (used when
        // the settings name a `controller_address`).
        joins: Some(Arc::new(gpushare_agent_api::StoreIssuer)),
    })
}

/// Whether this build has the EC2 backend.
pub const HAS_EC2: bool = cfg!(feature = "ec2");

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(store: Option<&str>, base: &str) -> PathBuf {
        match store_location(store, Path::new(base)).expect("parses") {
            StoreLocation::Dir(d) => d,
            other => panic!("not a directory: {other:?}"),
        }
    }

    #[test]
    fn the_state_directory_defaults_next_to_the_configuration() {
        assert_eq!(dir(None, "/cfg"), PathBuf::from("/cfg/.gpushare"));
        assert_eq!(dir(Some("file://st"), "/cfg"), PathBuf::from("/cfg/st"));
        assert_eq!(
            dir(Some("file:///abs/st"), "/cfg"),
            PathBuf::from("/abs/st")
        );
        assert_eq!(dir(Some("rel"), "/cfg"), PathBuf::from("/cfg/rel"));
        // The provider's state_dir is relative to Terraform's working directory.
        assert_eq!(dir(Some("file://st"), ""), PathBuf::from("st"));
    }

    #[test]
    fn unknown_store_schemes_are_refused_by_name() {
        let err =
            store_location(Some("consul://127.0.0.1:8500"), Path::new("/c")).expect_err("refused");
        assert!(err.to_string().contains("\"consul\" store"), "{err}");
        assert_eq!(
            store_location(Some("etcd://127.0.0.1:2379/p"), Path::new("/c")).expect("etcd"),
            StoreLocation::Etcd("etcd://127.0.0.1:2379/p".into())
        );
        assert!(matches!(
            store_location(Some("file://"), Path::new("/c")),
            Err(OpenError::BadStoreUrl { .. })
        ));
        // A near miss is refused, never taken as a directory of that name (issue 45).
        let err =
            store_location(Some("etcd:/127.0.0.1:2379"), Path::new("/c")).expect_err("refused");
        assert!(
            err.to_string()
                .contains("did you mean etcd://127.0.0.1:2379"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn opens_the_file_store_and_the_local_fleet_in_one_directory() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let b = open(&Settings::default(), tmp.path()).await.expect("opens");
        assert_eq!(
            b.state_dir.as_deref(),
            Some(tmp.path().join(STATE_DIR).as_path())
        );
        assert!(b.local.is_some());
        assert_eq!(b.cloud.kind(), "local");
        assert!(
            b.store.location().contains(".gpushare"),
            "{}",
            b.store.location()
        );
    }

    #[tokio::test]
    async fn a_store_that_cannot_be_opened_names_its_directory() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let file = tmp.path().join("file");
        std::fs::write(&file, "").expect("write");
        let settings = Settings {
            store: Some(format!("file://{}", file.display())),
            ..Settings::default()
        };
        let err = open(&settings, tmp.path()).await.err().expect("refused");
        assert!(
            matches!(err, OpenError::FileStore { ref dir, .. } if *dir == file),
            "{err:?}"
        );
    }
}

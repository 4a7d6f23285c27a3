//! The cloud named by `gpushare { cloud = ... }`: one factory for the CLI and the
//! Terraform provider, each of which maps [`OpenCloudError`] to its own kind of error.
//!
//! The EC2 backend is a crate of its own (its own EC2 client over aws-config and aws-sigv4) that depends on
//! this one, so it cannot be named here: a binary built with it hands [`open_cloud`]
//! the not yet started connection, and one built without it hands [`NO_EC2`].

use super::{Cloud, CloudError, LocalCloud};
use gpushare_core::model::{CloudKind, Settings};
use std::convert::Infallible;
use std::future::{Future, Ready};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why the configured cloud could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenCloudError {
    #[error("opening the local fleet in {}", dir.display())]
    Local {
        dir: PathBuf,
        #[source]
        source: CloudError,
    },
    #[error("setting up the ec2 cloud")]
    Ec2(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("cloud = \"ec2\" is not available in this build (built without the `ec2` feature)")]
    Ec2NotBuilt,
}

/// The opened cloud.
pub struct OpenedCloud {
    pub cloud: Arc<dyn Cloud>,
    /// Set when the cloud is the local simulated fleet: its agents run in-process and
    /// faults can be injected.
    pub local: Option<Arc<LocalCloud>>,
}

/// The `ec2` argument of [`open_cloud`] in a build without the EC2 backend.
pub const NO_EC2: Option<Ready<Result<LocalCloud, Infallible>>> = None;

/// Open the cloud `settings.cloud` names. The local fleet lives in `state_dir`; `ec2` is
/// the EC2 backend's connection for these settings (e.g.
/// `Some(Ec2Cloud::from_settings(settings))`), awaited only when the cloud is `ec2`,
/// or [`NO_EC2`].
pub async fn open_cloud<C, E>(
    settings: &Settings,
    state_dir: &Path,
    ec2: Option<impl Future<Output = Result<C, E>>>,
) -> Result<OpenedCloud, OpenCloudError>
where
    C: Cloud + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    match settings.cloud {
        CloudKind::Local => {
            let local = LocalCloud::open(state_dir).map_err(|source| OpenCloudError::Local {
                dir: state_dir.to_path_buf(),
                source,
            })?;
            let local = Arc::new(local);
            Ok(OpenedCloud {
                cloud: local.clone(),
                local: Some(local),
            })
        }
        CloudKind::Ec2 => {
            let connect = ec2.ok_or(OpenCloudError::Ec2NotBuilt)?;
            let cloud = connect
                .await
                .map_err(|e| OpenCloudError::Ec2(Box::new(e)))?;
            Ok(OpenedCloud {
                cloud: Arc::new(cloud),
                local: None,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn settings(cloud: CloudKind) -> Settings {
        Settings {
            cloud,
            ..Settings::default()
        }
    }

    #[derive(Debug, thiserror::Error)]
    #[error("no credentials")]
    struct NoCredentials;

    #[tokio::test]
    async fn local_opens_the_fleet_in_the_state_directory_without_connecting_to_ec2() {
        let dir = tempfile::tempdir().expect("tempdir");
        let connected = AtomicBool::new(false);
        let ec2 = async {
            connected.store(true, Ordering::SeqCst);
            Err::<LocalCloud, _>(NoCredentials)
        };
        let opened = open_cloud(&settings(CloudKind::Local), dir.path(), Some(ec2))
            .await
            .expect("local opens");
        assert!(opened.local.is_some());
        assert!(
            !connected.load(Ordering::SeqCst),
            "the ec2 connection was awaited"
        );
    }

    #[tokio::test]
    async fn a_local_fleet_that_cannot_be_opened_names_its_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, "").expect("write");
        let err = match open_cloud(&settings(CloudKind::Local), &file, NO_EC2).await {
            Err(e) => e,
            Ok(_) => panic!("a file is not a state directory"),
        };
        assert!(
            matches!(err, OpenCloudError::Local { ref dir, .. } if *dir == file),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn ec2_uses_the_given_connection_or_says_it_is_not_built() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ec2 = settings(CloudKind::Ec2);
        let fleet = LocalCloud::open(dir.path().join("other")).expect("fleet");
        let opened = open_cloud(&ec2, dir.path(), Some(async { Ok::<_, Infallible>(fleet) }))
            .await
            .expect("connected");
        assert!(
            opened.local.is_none(),
            "only the local cloud is returned on its own"
        );

        let err = open_cloud(
            &ec2,
            dir.path(),
            Some(async { Err::<LocalCloud, _>(NoCredentials) }),
        )
        .await
        .err()
        .expect("connection failed");
        let source = std::error::Error::source(&err).map(ToString::to_string);
        assert!(matches!(err, OpenCloudError::Ec2(_)), "{err:?}");
        assert_eq!(source.as_deref(), Some("no credentials"));

        let err = open_cloud(&ec2, dir.path(), NO_EC2)
            .await
            .err()
            .expect("not built");
        assert!(matches!(err, OpenCloudError::Ec2NotBuilt), "{err:?}");
    }
}

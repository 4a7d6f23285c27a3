//! Where the configuration comes from (a directory re-read each pass, or one commit of
//! a git repository with the pins that hold its store, cloud and cluster), and what a
//! pass takes from it.

use crate::error::{PassError, PinError};
use crate::pins::{self, PinFlags, Pins};
use gpushare_config::{Diagnostic, Diagnostics, LoadOptions, Severity};
use gpushare_core::model::Desired;
use gpushare_gitsource::{GitSource, HttpCredentials, Limits};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Where the git cache lives by default, inside the controller's directory.
pub const GIT_CACHE_DIR: &str = ".gpushare-git";

/// The configuration source of a controller.
pub struct Source {
    /// The configuration directory; with a git source, the directory the state and
    /// the git cache are kept in (relative store paths are taken from it).
    pub(crate) dir: PathBuf,
    /// How the configuration is loaded (variables).
    pub(crate) load: LoadOptions,
    pub(crate) git: Option<Git>,
}

/// A git source: the repository, the subdirectory of the configuration, the pins.
pub(crate) struct Git {
    pub(crate) src: GitSource,
    pub(crate) path: Option<PathBuf>,
    /// The pins read from the pin file (with the flags over them), if any.
    pub(crate) pins: Option<Pins>,
    pub(crate) flags: PinFlags,
    /// Where the pins are kept (`CACHE/pins.json`).
    pub(crate) pin_file: PathBuf,
}

/// What a git source follows.
#[derive(Debug, Clone, Default)]
pub struct GitOptions {
    pub url: String,
    pub reference: Option<String>,
    /// Subdirectory of the repository holding the configuration.
    pub path: Option<PathBuf>,
    /// The clone's cache (default `DIR/.gpushare-git`).
    pub cache: Option<PathBuf>,
    /// The pins the flags give (store, cloud, cluster).
    pub pins: PinFlags,
    /// The checkout's size limits.
    pub limits: Limits,
    pub credentials: Option<HttpCredentials>,
}

impl Source {
    /// The configuration in `dir`, read again every pass.
    pub fn dir(dir: impl Into<PathBuf>, load: LoadOptions) -> Source {
        Source {
            dir: dir.into(),
            load,
            git: None,
        }
    }

    /// A git repository followed from `dir` (the state and the cache): its pins read
    /// from the cache, and moved where the flags say so.
    pub fn git(
        dir: impl Into<PathBuf>,
        load: LoadOptions,
        g: GitOptions,
    ) -> Result<Source, PinError> {
        let dir = dir.into();
        let cache = g.cache.clone().unwrap_or_else(|| dir.join(GIT_CACHE_DIR));
        let pin_file = cache.join(pins::PIN_FILE);
        let pins = match pins::read(&pin_file)? {
            Some(kept) => {
                let moved = g.pins.over(kept.clone());
                if moved != kept {
                    pins::write(&pin_file, &moved)?;
                }
                Some(moved)
            }
            None => None,
        };
        let src = GitSource::new(g.url, g.reference, cache)
            .with_credentials(g.credentials)
            .with_path(g.path.clone())
            .with_limits(g.limits);
        let git = Git {
            src,
            path: g.path,
            pins,
            flags: g.pins,
            pin_file,
        };
        Ok(Source {
            dir,
            load,
            git: Some(git),
        })
    }

    /// Whether the configuration comes from git.
    pub fn is_git(&self) -> bool {
        self.git.is_some()
    }

    /// The controller's directory (the configuration of a directory source).
    pub fn base(&self) -> &Path {
        &self.dir
    }

    /// The source as the status record names it.
    pub fn describe(&self) -> String {
        match &self.git {
            None => self.dir.display().to_string(),
            Some(g) => format!("{}@{}", g.src.url(), g.src.reference().unwrap_or("HEAD")),
        }
    }
}

/// A configuration taken from the source, ready to reconcile.
#[derive(Clone)]
pub(crate) struct Loaded {
    pub(crate) desired: Desired,
    pub(crate) commit: Option<String>,
    pub(crate) digest: String,
}

/// `desired` with its digest (SHA-256 of its JSON form).
pub(crate) fn loaded(desired: Desired, commit: Option<String>) -> Result<Loaded, PassError> {
    let json = serde_json::to_vec(&desired).map_err(PassError::Digest)?;
    let digest = hex::encode(Sha256::digest(&json));
    Ok(Loaded {
        desired,
        commit,
        digest,
    })
}

/// The configuration in `dir`, loaded and validated, with its warnings; its errors
/// (and warnings) as [`Diagnostics`].
pub(crate) fn load_config(
    dir: &Path,
    opts: &LoadOptions,
) -> Result<(Desired, Diagnostics), Diagnostics> {
    let loaded = gpushare_config::load_dir(dir, opts)?;
    let diags = gpushare_config::validate(&loaded.desired);
    if diags.iter().any(is_error) {
        return Err(Diagnostics(diags));
    }
    Ok((loaded.desired, Diagnostics(diags)))
}

fn is_error(d: &Diagnostic) -> bool {
    matches!(d.severity, Severity::Error)
}

/// The diagnostics with their file names relative to the checkout (so they read
/// `fleet/main.hcl:3:5`, as in the repository).
pub(crate) fn relative_to(mut d: Diagnostics, root: &Path) -> Diagnostics {
    let prefix = format!("{}/", root.display());
    for diag in &mut d.0 {
        if let Some(loc) = &mut diag.loc {
            if let Some(rel) = loc.file.strip_prefix(&prefix) {
                loc.file = rel.to_string();
            }
        }
    }
    d
}

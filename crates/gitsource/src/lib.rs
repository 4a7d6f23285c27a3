//! The GitOps controller's git source: a bare clone of one repository in a cache
//! directory, fetched on every pass with gix (no `git` program in between, except
//! the one gix's `file://` transport starts on the serving side: `git-upload-pack`,
//! as `git clone file://...` does), the commit a reference names resolved, and that
//! one commit's tree written out into a work directory from which the configuration
//! is loaded.
//!
//! Transports: `file://` (and plain paths), `ssh://` / `user@host:path` (the `ssh`
//! program, with the user's keys and agent, as git does) and `https://` (gix's curl
//! client, through the system's libcurl: `http.sslCAInfo` / `GIT_SSL_CAINFO` name a
//! CA bundle; a token from the environment, [`HttpCredentials::from_env`], or else
//! git's configured credential helpers authenticate).
//!
//! Everything here blocks (gix's blocking client); async callers run it on a
//! blocking thread.

use gix::bstr::ByteSlice;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

/// Name of the bare clone inside the cache directory.
const REPO_DIR: &str = "repo.git";
/// Name of the directory holding checked-out commits inside the cache directory.
const CHECKOUTS_DIR: &str = "checkouts";
/// The remote-tracking namespace fetched branches land in.
const REMOTE_REFS: &str = "refs/remotes/origin/";

/// Why the git source could not do what was asked. `Fetch` (and a reference that
/// does not exist yet) may go away by themselves; the others point at the cache,
/// the repository's content or the arguments.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("creating the git cache {}", path.display())]
    Init {
        path: PathBuf,
        #[source]
        source: gix::Error,
    },
    #[error("opening the git cache {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: gix::Error,
    },
    #[error("fetching {url}")]
    Fetch {
        url: String,
        #[source]
        source: gix::Error,
    },
    #[error("{url} has no branch, tag or commit named {reference:?}")]
    UnknownRef { url: String, reference: String },
    #[error("resolving {reference:?} to a commit")]
    Resolve {
        reference: String,
        #[source]
        source: gix::Error,
    },
    #[error("reading the tree of commit {commit}")]
    Tree {
        commit: String,
        #[source]
        source: gix::Error,
    },
    #[error("commit {commit} holds a path that cannot be checked out safely: {path:?}")]
    UnsafePath { commit: String, path: String },
    #[error("{url} has both a branch and a tag named {reference:?}; name one in full (refs/heads/{reference} or refs/tags/{reference})")]
    AmbiguousRef { url: String, reference: String },
    #[error(
        "commit {commit}: the symbolic link {path:?} points outside the repository ({target:?})"
    )]
    SymlinkEscapes {
        commit: String,
        path: String,
        target: String,
    },
    #[error("commit {commit}: the symbolic link {path:?} points at {target:?}, which the commit does not hold")]
    SymlinkDangling {
        commit: String,
        path: String,
        target: String,
    },
    #[error("commit {commit}: the symbolic links at {path:?} form a loop or a chain longer than {MAX_SYMLINK_HOPS}")]
    SymlinkLoop { commit: String, path: String },
    #[error("commit {commit}: {path:?} is a submodule, which the controller does not check out")]
    Submodule { commit: String, path: String },
    #[error("commit {commit} has no directory {path:?}")]
    NoDirectory { commit: String, path: String },
    #[error(
        "commit {commit}: {path:?} is {size} bytes, over the limit of {limit} bytes for one file"
    )]
    FileTooLarge {
        commit: String,
        path: String,
        size: u64,
        limit: u64,
    },
    #[error("commit {commit}: the files checked out are more than the limit of {MAX_FILES} files (at {path:?})")]
    TooManyFiles { commit: String, path: String },
    #[error(
        "commit {commit}: the files checked out add up to more than the limit of {limit} bytes (at {path:?})"
    )]
    CheckoutTooLarge {
        commit: String,
        path: String,
        limit: u64,
    },
    #[error("I/O error on {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl GitError {
    /// Whether trying again later may succeed without anyone changing anything here
    /// (the remote was away, the branch was not pushed yet).
    pub fn is_transient(&self) -> bool {
        matches!(self, GitError::Fetch { .. } | GitError::UnknownRef { .. })
    }

    /// Why a commit's content is refused (its tree cannot be taken as a
    /// configuration), as a short label for metrics; `None` for the other errors.
    pub fn refusal(&self) -> Option<&'static str> {
        Some(match self {
            GitError::UnsafePath { .. } => "unsafe_path",
            GitError::SymlinkEscapes { .. }
            | GitError::SymlinkDangling { .. }
            | GitError::SymlinkLoop { .. } => "symlink",
            GitError::Submodule { .. } => "submodule",
            GitError::NoDirectory { .. } => "no_directory",
            GitError::FileTooLarge { .. }
            | GitError::CheckoutTooLarge { .. }
            | GitError::TooManyFiles { .. } => "too_large",
            _ => return None,
        })
    }
}

fn io_err(path: &Path, source: std::io::Error) -> GitError {
    GitError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One commit's tree written out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkout {
    /// The commit's full hexadecimal id.
    pub commit: String,
    /// The directory holding the commit's files.
    pub dir: PathBuf,
    /// The first line of the commit message.
    pub subject: String,
}

/// The environment variable holding an HTTPS access token for the git source.
pub const TOKEN_ENV: &str = "GPUSHARE_GIT_TOKEN";
/// The environment variable naming the user sent with the token (default
/// [`DEFAULT_TOKEN_USERNAME`]).
pub const USERNAME_ENV: &str = "GPUSHARE_GIT_USERNAME";
/// The user name sent with a token when none is set: what GitHub expects of an app
/// or fine-grained token; GitLab accepts any name (`oauth2` is customary).
pub const DEFAULT_TOKEN_USERNAME: &str = "x-access-token";

/// HTTPS basic credentials for the remote: a user name and an access token. The token
/// is never logged or printed (`Debug` leaves it out), and gix sends credentials over
/// `https://` only.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpCredentials {
    pub username: String,
    token: String,
}

impl std::fmt::Debug for HttpCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpCredentials")
            .field("username", &self.username)
            .field("token", &"(redacted)")
            .finish()
    }
}

impl HttpCredentials {
    pub fn new(username: impl Into<String>, token: impl Into<String>) -> Self {
        HttpCredentials {
            username: username.into(),
            token: token.into(),
        }
    }

    /// From [`TOKEN_ENV`] (and [`USERNAME_ENV`]); `None` when no token is set, so git's
    /// own credential helpers apply.
    pub fn from_env() -> Option<Self> {
        let token = std::env::var(TOKEN_ENV)
            .ok()
            .filter(|t| !t.trim().is_empty())?;
        let username = std::env::var(USERNAME_ENV)
            .ok()
            .filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_TOKEN_USERNAME.to_string());
        Some(Self::new(username, token.trim()))
    }

    /// The credential helper gix asks: always these credentials; nothing to store or erase.
    fn helper(
        &self,
    ) -> impl FnMut(
        gix::credentials::helper::Action,
    ) -> gix::Result<Option<gix::credentials::protocol::Outcome>>
           + use<> {
        let (username, password) = (self.username.clone(), self.token.clone());
        move |action| match action {
            gix::credentials::helper::Action::Get(ctx) => {
                Ok(Some(gix::credentials::protocol::Outcome {
                    credentials: gix::sec::identity::Credentials::UsernamePassword {
                        username: username.clone(),
                        password: password.clone(),
                        oauth_refresh_token: None,
                    },
                    next: ctx.into(),
                }))
            }
            gix::credentials::helper::Action::Store(_)
            | gix::credentials::helper::Action::Erase(_) => Ok(None),
        }
    }
}

/// Bounds on what one checkout may write: a file over `max_file_bytes`, or files
/// adding up to more than `max_total_bytes`, refuse the commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_file_bytes: u64,
    pub max_total_bytes: u64,
}

/// Default [`Limits::max_file_bytes`]: 10 MiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 10 << 20;
/// Default [`Limits::max_total_bytes`]: 100 MiB.
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 100 << 20;
/// Files one checkout may write (empty files cost no bytes but still cost inodes
/// and time).
pub const MAX_FILES: u64 = 10_000;
/// Symbolic links followed while resolving one path (Linux's own bound).
pub const MAX_SYMLINK_HOPS: u32 = 40;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_total_bytes: DEFAULT_MAX_TOTAL_BYTES,
        }
    }
}

/// A repository followed by URL and reference, cloned into a cache directory.
#[derive(Debug, Clone)]
pub struct GitSource {
    url: String,
    reference: Option<String>,
    cache: PathBuf,
    credentials: Option<HttpCredentials>,
    path: Option<PathBuf>,
    limits: Limits,
}

impl GitSource {
    /// Follow `reference` (a branch, a tag or a commit id; `None`: the remote's
    /// default branch) of the repository at `url`, cloned under `cache`.
    pub fn new(
        url: impl Into<String>,
        reference: Option<String>,
        cache: impl Into<PathBuf>,
    ) -> Self {
        GitSource {
            url: url.into(),
            reference,
            cache: cache.into(),
            credentials: None,
            path: None,
            limits: Limits::default(),
        }
    }

    /// Authenticate HTTPS fetches with `credentials` (`None`: git's configured
    /// credential helpers, as git does).
    pub fn with_credentials(mut self, credentials: Option<HttpCredentials>) -> Self {
        self.credentials = credentials;
        self
    }

    /// Check out only `path` (a directory of the repository; `None`: the whole tree).
    pub fn with_path(mut self, path: Option<PathBuf>) -> Self {
        self.path = path;
        self
    }

    /// Bound what a checkout writes.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The reference followed, as given (`None`: the remote's default branch).
    pub fn reference(&self) -> Option<&str> {
        self.reference.as_deref()
    }

    pub fn cache(&self) -> &Path {
        &self.cache
    }

    /// The directory checked out, as given (`None`: the whole tree).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The bare clone, created on first use. The cache is private: 0700
    /// directories, 0600 files (an existing one is tightened).
    fn repo(&self) -> Result<gix::Repository, GitError> {
        let path = self.cache.join(REPO_DIR);
        private_dir(&self.cache)?;
        if path.join("HEAD").exists() {
            return gix::open(&path).map_err(|source| GitError::Open { path, source });
        }
        tracing::info!(path = %path.display(), url = %self.url, "creating the git cache");
        let repo = gix::init_bare(&path).map_err(|source| GitError::Init {
            path: path.clone(),
            source,
        })?;
        make_private(&path)?;
        Ok(repo)
    }

    /// Bring the cache up to date with the remote: every branch (into
    /// `refs/remotes/origin/`), every tag, and the remote's HEAD; branches and
    /// tags the remote no longer has are removed (pruned). Cancelled (an error)
    /// when `interrupt` is set.
    pub fn fetch(&self, interrupt: &AtomicBool) -> Result<(), GitError> {
        let repo = self.repo()?;
        let fetch_err = |source| GitError::Fetch {
            url: self.url.clone(),
            source,
        };
        let remote = repo
            .remote_at(self.url.as_str())
            .and_then(|r| {
                r.with_fetch_tags(gix::remote::fetch::Tags::None)
                    .with_refspecs(
                        [
                            "+refs/heads/*:refs/remotes/origin/*",
                            "+refs/tags/*:refs/tags/*",
                            "+HEAD:refs/remotes/origin/HEAD",
                        ],
                        gix::remote::Direction::Fetch,
                    )
            })
            .map_err(fetch_err)?;
        let connection = remote
            .connect(gix::remote::Direction::Fetch)
            .map_err(fetch_err)?;
        let outcome = match &self.credentials {
            Some(c) => connection
                .with_credentials(c.helper())
                .prepare_fetch(gix::progress::Discard, Default::default())
                .and_then(|p| p.receive(gix::progress::Discard, interrupt)),
            None => connection
                .prepare_fetch(gix::progress::Discard, Default::default())
                .and_then(|p| p.receive(gix::progress::Discard, interrupt)),
        }
        .map_err(fetch_err)?;
        tracing::debug!(url = %self.url, status = ?std::mem::discriminant(&outcome.status), "fetched");
        let advertised: std::collections::HashSet<&gix::bstr::BStr> = outcome
            .ref_map
            .mappings
            .iter()
            .filter_map(|m| m.local.as_ref().map(|l| l.as_bstr()))
            .collect();
        self.prune_refs(&repo, &advertised)?;
        make_private(repo.path())
    }

    /// Remove the fetched branches and tags that the remote did not advertise.
    fn prune_refs(
        &self,
        repo: &gix::Repository,
        advertised: &std::collections::HashSet<&gix::bstr::BStr>,
    ) -> Result<(), GitError> {
        let prune_err = |source| GitError::Fetch {
            url: self.url.clone(),
            source,
        };
        let platform = repo
            .references()
            .map_err(|e| prune_err(gix::Error::from_error(e)))?;
        let mut gone = Vec::new();
        for prefix in [REMOTE_REFS, "refs/tags/"] {
            let iter = platform
                .prefixed(prefix)
                .map_err(|e| prune_err(gix::Error::from_error(e)))?;
            for r in iter {
                let r = r.map_err(|e| prune_err(gix::Error::from_error(e)))?;
                if !advertised.contains(r.name().as_bstr()) {
                    gone.push(r);
                }
            }
        }
        for r in gone {
            tracing::info!(url = %self.url, reference = %r.name().as_bstr(), "pruned: the remote no longer has it");
            r.delete().map_err(prune_err)?;
        }
        Ok(())
    }

    /// The commit the followed reference names in the cache (after
    /// [`fetch`](Self::fetch)): 40 hexadecimal digits are a commit id and nothing
    /// else; `refs/...` is that reference exactly; another name is a branch or a
    /// tag, and refused when it is both.
    pub fn resolve(&self) -> Result<String, GitError> {
        let repo = self.repo()?;
        let reference = self.reference.as_deref().unwrap_or("HEAD");
        let resolve_err = |source| GitError::Resolve {
            reference: reference.to_string(),
            source,
        };
        let unknown = || GitError::UnknownRef {
            url: self.url.clone(),
            reference: reference.to_string(),
        };
        if reference.len() == repo.object_hash().len_in_hex() {
            if let Ok(id) = gix::ObjectId::from_hex(reference.as_bytes()) {
                let object = repo.try_find_object(id).map_err(resolve_err)?;
                let commit = object
                    .ok_or_else(unknown)?
                    .peel_to_commit()
                    .map_err(resolve_err)?;
                return Ok(commit.id.to_string());
            }
        }
        let candidates = match reference.strip_prefix("refs/") {
            Some(rest) => match rest.strip_prefix("heads/") {
                Some(branch) => vec![format!("{REMOTE_REFS}{branch}")],
                None => vec![reference.to_string()],
            },
            None => vec![
                format!("{REMOTE_REFS}{reference}"),
                format!("refs/tags/{reference}"),
            ],
        };
        let mut found = Vec::new();
        for name in &candidates {
            if let Some(r) = repo
                .try_find_reference(name.as_str())
                .map_err(resolve_err)?
            {
                found.push(r);
            }
        }
        match found.as_mut_slice() {
            [] => Err(unknown()),
            [r] => Ok(r.peel_to_commit().map_err(resolve_err)?.id.to_string()),
            _ => Err(GitError::AmbiguousRef {
                url: self.url.clone(),
                reference: reference.to_string(),
            }),
        }
    }

    /// Write `commit`'s files under the followed path into
    /// `<cache>/checkouts/<commit>/<path>/` (once: a complete checkout is reused)
    /// and return it. Only regular files are written (0600, in 0700 directories):
    /// a symbolic link is replaced by what it points at when that stays in the
    /// repository, and the commit is refused when it does not (or points at nothing,
    /// or loops); a submodule, a file over the size limit or a tree over the total
    /// limit refuse the commit too. Other commits' checkouts are removed, except
    /// `keep`'s.
    pub fn checkout(&self, commit: &str, keep: Option<&str>) -> Result<Checkout, GitError> {
        let repo = self.repo()?;
        let tree_err = |source| GitError::Tree {
            commit: commit.to_string(),
            source,
        };
        let id = gix::ObjectId::from_hex(commit.as_bytes())
            .map_err(|e| tree_err(gix::Error::from_error(e)))?;
        let c = repo.find_commit(id).map_err(tree_err)?;
        let subject = c
            .message_raw()
            .map(|m| {
                m.lines()
                    .next()
                    .unwrap_or_default()
                    .to_str_lossy()
                    .into_owned()
            })
            .unwrap_or_default();
        let root = self.cache.join(CHECKOUTS_DIR);
        let dir = root.join(commit);
        let done_marker = root.join(format!("{commit}.done"));
        let scope = self
            .path
            .as_deref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let done = std::fs::read_to_string(&done_marker).ok();
        if dir.is_dir() && done.as_deref() == Some(scope.as_str()) {
            self.prune(&root, commit, keep);
            return Ok(Checkout {
                commit: commit.to_string(),
                dir,
                subject,
            });
        }
        let tmp = root.join(format!("{commit}.tmp"));
        remove_dir_if_present(&tmp)?;
        remove_dir_if_present(&dir)?;
        let _ = std::fs::remove_file(&done_marker);
        private_dir(&tmp)?;
        let tree = c.tree().map_err(tree_err)?;
        let mut writer = TreeWriter {
            repo: &repo,
            commit,
            limits: self.limits,
            out: &tmp,
            written: 0,
            files: 0,
        };
        let scope_path = self.path.as_deref().unwrap_or(Path::new(""));
        let out_rel =
            match self.path.as_deref() {
                None => PathBuf::new(),
                Some(p) => safe_relative_path(p.as_os_str().as_encoded_bytes().as_bstr())
                    .ok_or_else(|| GitError::NoDirectory {
                        commit: commit.to_string(),
                        path: scope.clone(),
                    })?,
            };
        let start = writer.resolve(tree.id, Vec::new(), &scope, path_components(scope_path));
        let real = match start {
            Ok((real, Node::Tree(_))) => real,
            Ok((_, Node::Blob(_))) | Err(GitError::SymlinkDangling { .. }) => {
                return Err(GitError::NoDirectory {
                    commit: commit.to_string(),
                    path: scope,
                })
            }
            Err(e) => return Err(e),
        };
        writer.write_tree(tree.id, real, &out_rel, &mut Vec::new())?;
        let (files, written) = (writer.files, writer.written);
        std::fs::rename(&tmp, &dir).map_err(|e| io_err(&dir, e))?;
        write_private(&done_marker, scope.as_bytes())?;
        tracing::info!(commit, files, bytes = written, dir = %dir.display(), "checked out");
        self.prune(&root, commit, keep);
        Ok(Checkout {
            commit: commit.to_string(),
            dir,
            subject,
        })
    }

    /// Remove checkouts other than `commit`'s and `keep`'s (best effort).
    fn prune(&self, root: &Path, commit: &str, keep: Option<&str>) {
        let Ok(entries) = std::fs::read_dir(root) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let stem = name.split('.').next().unwrap_or_default();
            if stem == commit || Some(stem) == keep {
                continue;
            }
            let p = e.path();
            let r = if p.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
            if let Err(err) = r {
                tracing::warn!(path = %p.display(), error = %err, "could not remove an old checkout");
            }
        }
    }
}

mod tree;
use tree::{
    make_private, path_components, private_dir, remove_dir_if_present, safe_relative_path,
    write_private, Node, TreeWriter,
};

#[cfg(any(test, feature = "test-support"))]
pub mod testing;

#[cfg(test)]
mod tests;

/// Issue 30's repros at the git source: symbolic links, references, sizes and modes.
#[cfg(test)]
mod hardening_tests;

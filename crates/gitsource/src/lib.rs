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
use std::path::{Component, Path, PathBuf};
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

/// What a path of a commit's tree names.
#[derive(Debug, Clone, Copy)]
enum Node {
    Tree(gix::ObjectId),
    Blob(gix::ObjectId),
}

/// Writes one commit's files out, following symbolic links inside the tree.
struct TreeWriter<'a> {
    repo: &'a gix::Repository,
    commit: &'a str,
    limits: Limits,
    out: &'a Path,
    written: u64,
    files: u64,
}

/// The components of a slash-separated path (`.`, `..` kept for the resolver).
fn path_components(p: &Path) -> Vec<String> {
    p.to_string_lossy()
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_string)
        .collect()
}

impl TreeWriter<'_> {
    fn tree_err(&self, source: gix::Error) -> GitError {
        GitError::Tree {
            commit: self.commit.to_string(),
            source,
        }
    }

    /// The entries of the tree `id`: (name, kind, object).
    fn entries(
        &self,
        id: gix::ObjectId,
    ) -> Result<Vec<(String, gix::object::tree::EntryKind, gix::ObjectId)>, GitError> {
        let tree = self
            .repo
            .find_tree(id)
            .map_err(|e| self.tree_err(gix::Error::from_error(e)))?;
        let mut out = Vec::new();
        for e in tree.iter() {
            let e = e.map_err(|e| self.tree_err(gix::Error::from_error(e)))?;
            let name = e.filename().to_str_lossy().into_owned();
            out.push((name, e.mode().kind(), e.oid().to_owned()));
        }
        Ok(out)
    }

    /// Resolve `rest` from the directory `real` (a path of the tree holding no
    /// symbolic links), following symbolic links as the kernel would, without
    /// ever leaving the tree. `link` names the link being resolved, for errors.
    fn resolve(
        &self,
        root: gix::ObjectId,
        real: Vec<String>,
        link: &str,
        rest: Vec<String>,
    ) -> Result<(Vec<String>, Node), GitError> {
        let commit = self.commit.to_string();
        let mut hops = 0u32;
        let mut target_seen = String::from("..");
        let mut pending: std::collections::VecDeque<String> =
            real.into_iter().chain(rest).collect();
        let mut path: Vec<(String, Node)> = Vec::new();
        let dangling = |target: &[String]| GitError::SymlinkDangling {
            commit: commit.clone(),
            path: link.to_string(),
            target: target.join("/"),
        };
        while let Some(c) = pending.pop_front() {
            match c.as_str() {
                "" | "." => continue,
                ".." => {
                    if path.pop().is_none() {
                        return Err(GitError::SymlinkEscapes {
                            commit,
                            path: link.to_string(),
                            target: target_seen,
                        });
                    }
                    continue;
                }
                _ => {}
            }
            let dir = match path.last() {
                None => root,
                Some((_, Node::Tree(t))) => *t,
                Some((_, Node::Blob(_))) => {
                    let mut at: Vec<String> = path.iter().map(|(n, _)| n.clone()).collect();
                    at.push(c);
                    return Err(dangling(&at));
                }
            };
            let entry = self.entries(dir)?.into_iter().find(|(n, _, _)| *n == c);
            let Some((name, kind, oid)) = entry else {
                let mut at: Vec<String> = path.iter().map(|(n, _)| n.clone()).collect();
                at.push(c);
                return Err(dangling(&at));
            };
            use gix::object::tree::EntryKind;
            match kind {
                EntryKind::Tree => path.push((name, Node::Tree(oid))),
                EntryKind::Blob | EntryKind::BlobExecutable => path.push((name, Node::Blob(oid))),
                EntryKind::Commit => {
                    let mut at: Vec<String> = path.iter().map(|(n, _)| n.clone()).collect();
                    at.push(name);
                    return Err(GitError::Submodule {
                        commit,
                        path: at.join("/"),
                    });
                }
                EntryKind::Link => {
                    hops += 1;
                    if hops > MAX_SYMLINK_HOPS {
                        return Err(GitError::SymlinkLoop {
                            commit,
                            path: link.to_string(),
                        });
                    }
                    let blob = self
                        .repo
                        .find_blob(oid)
                        .map_err(|e| self.tree_err(gix::Error::from_error(e)))?;
                    let target = blob.data.to_str_lossy().into_owned();
                    if target.starts_with('/') {
                        return Err(GitError::SymlinkEscapes {
                            commit,
                            path: link.to_string(),
                            target,
                        });
                    }
                    for part in target.split('/').rev() {
                        pending.push_front(part.to_string());
                    }
                    target_seen = target;
                }
            }
        }
        let node = path.last().map(|(_, n)| *n).unwrap_or(Node::Tree(root));
        Ok((path.into_iter().map(|(n, _)| n).collect(), node))
    }

    /// Write the tree at `real` (a link-free path of the commit's tree) into
    /// `out_rel` under the output directory. `walking` holds the trees being
    /// written, so a link back into one of them is a loop.
    fn write_tree(
        &mut self,
        root: gix::ObjectId,
        real: Vec<String>,
        out_rel: &Path,
        walking: &mut Vec<Vec<String>>,
    ) -> Result<(), GitError> {
        if walking.contains(&real) {
            return Err(GitError::SymlinkLoop {
                commit: self.commit.to_string(),
                path: out_rel.display().to_string(),
            });
        }
        let id = match self.resolve(root, Vec::new(), "", real.clone())? {
            (_, Node::Tree(id)) => id,
            (_, Node::Blob(_)) => unreachable_tree(self.commit, &real)?,
        };
        let dir = self.out.join(out_rel);
        private_dir(&dir)?;
        walking.push(real.clone());
        for (name, kind, oid) in self.entries(id)? {
            let rel = out_rel.join(&name);
            let shown = rel.display().to_string();
            if safe_relative_path(shown.as_str().into()).is_none() {
                return Err(GitError::UnsafePath {
                    commit: self.commit.to_string(),
                    path: shown,
                });
            }
            let mut child = real.clone();
            child.push(name);
            use gix::object::tree::EntryKind;
            match kind {
                EntryKind::Blob | EntryKind::BlobExecutable => self.write_blob(oid, &rel)?,
                EntryKind::Tree => self.write_tree(root, child, &rel, walking)?,
                EntryKind::Commit => {
                    return Err(GitError::Submodule {
                        commit: self.commit.to_string(),
                        path: shown,
                    })
                }
                EntryKind::Link => match self.resolve(root, Vec::new(), &shown, child)? {
                    (_, Node::Blob(blob)) => self.write_blob(blob, &rel)?,
                    (target, Node::Tree(_)) => self.write_tree(root, target, &rel, walking)?,
                },
            }
        }
        walking.pop();
        Ok(())
    }

    /// Write one blob at `rel`, within the limits.
    fn write_blob(&mut self, oid: gix::ObjectId, rel: &Path) -> Result<(), GitError> {
        let shown = || rel.display().to_string();
        let size = self
            .repo
            .find_header(oid)
            .map_err(|e| self.tree_err(gix::Error::from_error(e)))?
            .size();
        if size > self.limits.max_file_bytes {
            return Err(GitError::FileTooLarge {
                commit: self.commit.to_string(),
                path: shown(),
                size,
                limit: self.limits.max_file_bytes,
            });
        }
        if self.files >= MAX_FILES {
            return Err(GitError::TooManyFiles {
                commit: self.commit.to_string(),
                path: shown(),
            });
        }
        self.written = self.written.saturating_add(size);
        if self.written > self.limits.max_total_bytes {
            return Err(GitError::CheckoutTooLarge {
                commit: self.commit.to_string(),
                path: shown(),
                limit: self.limits.max_total_bytes,
            });
        }
        let blob = self
            .repo
            .find_blob(oid)
            .map_err(|e| self.tree_err(gix::Error::from_error(e)))?;
        write_private(&self.out.join(rel), &blob.data)?;
        self.files += 1;
        Ok(())
    }
}

/// A path the resolver called a tree that is not one (cannot happen: the resolver
/// is deterministic); an error rather than a panic.
fn unreachable_tree(commit: &str, real: &[String]) -> Result<gix::ObjectId, GitError> {
    Err(GitError::NoDirectory {
        commit: commit.to_string(),
        path: real.join("/"),
    })
}

/// Create `dir` (and its parents) 0700, or tighten an existing one to 0700.
fn private_dir(dir: &Path) -> Result<(), GitError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR_MODE)
        .create(dir)
        .map_err(|e| io_err(dir, e))?;
    let meta = std::fs::symlink_metadata(dir).map_err(|e| io_err(dir, e))?;
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(PRIVATE_DIR_MODE))
            .map_err(|e| io_err(dir, e))?;
    }
    Ok(())
}

/// Write a new file 0600.
fn write_private(path: &Path, data: &[u8]) -> Result<(), GitError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(PRIVATE_FILE_MODE)
        .open(path)
        .map_err(|e| io_err(path, e))?;
    f.write_all(data).map_err(|e| io_err(path, e))
}

/// Take group and other permissions away from everything under `dir` (gix writes
/// with the process's umask): directories 0700, files 0600.
fn make_private(dir: &Path) -> Result<(), GitError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::symlink_metadata(dir).map_err(|e| io_err(dir, e))?;
    let mode = meta.permissions().mode();
    let want = if meta.is_dir() {
        PRIVATE_DIR_MODE
    } else if meta.is_file() {
        PRIVATE_FILE_MODE
    } else {
        return Ok(());
    };
    if mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(want))
            .map_err(|e| io_err(dir, e))?;
    }
    if meta.is_dir() {
        for e in std::fs::read_dir(dir).map_err(|e| io_err(dir, e))? {
            let e = e.map_err(|e| io_err(dir, e))?;
            make_private(&e.path())?;
        }
    }
    Ok(())
}

/// Mode of the cache's directories.
const PRIVATE_DIR_MODE: u32 = 0o700;
/// Mode of the cache's files.
const PRIVATE_FILE_MODE: u32 = 0o600;

fn remove_dir_if_present(p: &Path) -> Result<(), GitError> {
    match std::fs::remove_dir_all(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(p, e)),
    }
}

/// A tree path as a relative path of normal components (no `..`, no root, no
/// `.git`), or `None`.
fn safe_relative_path(p: &gix::bstr::BStr) -> Option<PathBuf> {
    let s = p.to_str().ok()?;
    let path = Path::new(s);
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(n) if n != ".git" => out.push(n),
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// Helpers for tests: a bare repository made and committed to with gix (no `git`
/// program), as a forge would hold it.
#[cfg(any(test, feature = "test-support"))]
pub mod testing {
    use gix::object::tree::EntryKind;
    use gix::refs::transaction::PreviousValue;
    use std::path::Path;

    /// One entry of a committed tree.
    pub enum Entry<'a> {
        File(&'a [u8]),
        /// A symbolic link to this target.
        Link(&'a str),
        /// A submodule at this commit id.
        Submodule(&'a str),
    }

    /// Asserts that every directory under `dir` (and `dir`) is 0700 and every file
    /// 0600; returns how many entries were looked at.
    pub fn assert_private(dir: &Path) -> usize {
        use std::os::unix::fs::PermissionsExt;
        let mut seen = 0;
        let mut stack = vec![dir.to_path_buf()];
        while let Some(p) = stack.pop() {
            let m = std::fs::symlink_metadata(&p).expect("stat");
            let mode = m.permissions().mode() & 0o777;
            if m.is_dir() {
                assert_eq!(mode, 0o700, "{}", p.display());
                stack.extend(
                    std::fs::read_dir(&p)
                        .expect("ls")
                        .map(|e| e.expect("entry").path()),
                );
            } else {
                assert_eq!(mode, 0o600, "{}", p.display());
            }
            seen += 1;
        }
        seen
    }

    /// A bare repository at `path` to push commits into.
    pub struct Upstream {
        repo: gix::Repository,
    }

    impl Upstream {
        pub fn init(path: &Path) -> Upstream {
            let repo = gix::init_bare(path).expect("init a bare repository");
            Upstream { repo }
        }

        /// The bare repository's directory.
        pub fn path(&self) -> &Path {
            self.repo.path()
        }

        /// The repository's `file://` URL.
        pub fn url(&self) -> String {
            format!("file://{}", self.repo.path().display())
        }

        /// Commit `files` (path, content) as the whole tree on `branch` (its
        /// parent: the branch's current commit); returns the new commit's id.
        pub fn commit(&self, branch: &str, message: &str, files: &[(&str, &str)]) -> String {
            let entries: Vec<(&str, Entry)> = files
                .iter()
                .map(|(p, c)| (*p, Entry::File(c.as_bytes())))
                .collect();
            self.commit_entries(branch, message, &entries)
        }

        /// Commit `entries` (path, file, symbolic link or submodule) as the whole
        /// tree on `branch`; returns the new commit's id.
        pub fn commit_entries(
            &self,
            branch: &str,
            message: &str,
            entries: &[(&str, Entry)],
        ) -> String {
            let repo = &self.repo;
            let empty = gix::ObjectId::empty_tree(repo.object_hash());
            // The empty tree is not stored until written.
            repo.write_object(gix::objs::Tree::empty())
                .expect("write the empty tree");
            let mut editor = repo.edit_tree(empty).expect("tree editor");
            for (path, entry) in entries {
                let (kind, id) = match entry {
                    Entry::File(content) => (
                        EntryKind::Blob,
                        repo.write_blob(content).expect("write blob").detach(),
                    ),
                    Entry::Link(target) => (
                        EntryKind::Link,
                        repo.write_blob(target.as_bytes())
                            .expect("write blob")
                            .detach(),
                    ),
                    Entry::Submodule(commit) => (
                        EntryKind::Commit,
                        gix::ObjectId::from_hex(commit.as_bytes()).expect("a commit id"),
                    ),
                };
                editor.upsert(*path, kind, id).expect("add to tree");
            }
            let tree = editor.write().expect("write tree");
            let refname = format!("refs/heads/{branch}");
            let parent = repo
                .try_find_reference(refname.as_str())
                .expect("look up the branch")
                .map(|mut r| r.peel_to_id().expect("peel").detach());
            let sig = gix::actor::Signature {
                name: "gpushare test".into(),
                email: "test@example.invalid".into(),
                time: gix::date::Time::new(1_700_000_000, 0),
            };
            let mut time = gix::date::parse::TimeBuf::default();
            let sig_ref = sig.to_ref(&mut time);
            repo.commit_as(sig_ref, sig_ref, refname.as_str(), message, tree, parent)
                .expect("commit")
                .to_string()
        }

        /// Point the reference `name` (in full: `refs/heads/x`, `refs/tags/v1`) at `commit`.
        pub fn set_ref(&self, name: &str, commit: &str) {
            let id = gix::ObjectId::from_hex(commit.as_bytes()).expect("a commit id");
            self.repo
                .reference(name, id, PreviousValue::Any, "test")
                .expect("set the reference");
        }

        /// Delete the reference `name` (in full).
        pub fn delete_ref(&self, name: &str) {
            self.repo
                .find_reference(name)
                .expect("the reference exists")
                .delete()
                .expect("delete the reference");
        }

        /// Point HEAD at `branch` (the remote's default branch).
        pub fn set_head(&self, branch: &str) {
            std::fs::write(
                self.repo.path().join("HEAD"),
                format!("ref: refs/heads/{branch}\n"),
            )
            .expect("write HEAD");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::Upstream;
    use super::*;

    fn no_interrupt() -> AtomicBool {
        AtomicBool::new(false)
    }

    #[test]
    fn clones_fetches_and_checks_out_the_followed_branch() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let up = Upstream::init(&tmp.path().join("up.git"));
        up.set_head("main");
        let c1 = up.commit(
            "main",
            "first\n\nbody",
            &[("fleet/main.hcl", "one"), ("README", "r")],
        );
        let src = GitSource::new(up.url(), None, tmp.path().join("cache"));
        src.fetch(&no_interrupt()).expect("fetch");
        assert_eq!(src.resolve().expect("resolve"), c1);
        let co = src.checkout(&c1, None).expect("checkout");
        assert_eq!(co.subject, "first");
        assert_eq!(
            std::fs::read_to_string(co.dir.join("fleet/main.hcl")).expect("read"),
            "one"
        );

        let c2 = up.commit("main", "second", &[("fleet/main.hcl", "two")]);
        assert_eq!(src.resolve().expect("resolve"), c1, "not fetched yet");
        src.fetch(&no_interrupt()).expect("fetch again");
        assert_eq!(src.resolve().expect("resolve"), c2);
        let co2 = src.checkout(&c2, Some(&c1)).expect("checkout");
        assert_eq!(
            std::fs::read_to_string(co2.dir.join("fleet/main.hcl")).expect("read"),
            "two"
        );
        assert!(
            !co2.dir.join("README").exists(),
            "exactly the commit's tree"
        );
        assert!(co.dir.exists(), "the kept checkout stays");
        let c3 = up.commit("main", "third", &[("fleet/main.hcl", "three")]);
        src.fetch(&no_interrupt()).expect("fetch");
        src.checkout(&c3, Some(&c2)).expect("checkout");
        assert!(!co.dir.exists(), "older checkouts are removed");

        // A branch, a full commit id, and an unknown name.
        let other = up.commit("other", "on other", &[("x.hcl", "x")]);
        src.fetch(&no_interrupt()).expect("fetch");
        let by_branch = GitSource::new(up.url(), Some("other".into()), tmp.path().join("cache"));
        assert_eq!(by_branch.resolve().expect("resolve"), other);
        let by_sha = GitSource::new(up.url(), Some(c1.clone()), tmp.path().join("cache"));
        assert_eq!(by_sha.resolve().expect("resolve"), c1);
        let unknown = GitSource::new(up.url(), Some("nope".into()), tmp.path().join("cache"));
        let e = unknown.resolve().expect_err("unknown");
        assert!(
            matches!(e, GitError::UnknownRef { .. }) && e.is_transient(),
            "{e:?}"
        );
    }

    #[test]
    fn a_fetch_from_nowhere_is_a_transient_error_naming_the_url() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let url = format!("file://{}", tmp.path().join("missing.git").display());
        let src = GitSource::new(url.clone(), None, tmp.path().join("cache"));
        let e = src.fetch(&no_interrupt()).expect_err("no repository there");
        assert!(e.is_transient(), "{e:?}");
        assert!(e.to_string().contains(&url), "{e}");
    }

    #[test]
    fn unsafe_tree_paths_are_refused() {
        for bad in ["../x", "/etc/passwd", ".git/config", "a/../../b", ""] {
            assert_eq!(safe_relative_path(bad.into()), None, "{bad:?}");
        }
        assert_eq!(
            safe_relative_path("fleet/main.hcl".into()),
            Some(PathBuf::from("fleet/main.hcl"))
        );
    }

    #[test]
    fn credentials_never_show_their_token() {
        let c = HttpCredentials::new("fleet-bot", "ghp_secret123");
        let shown = format!(
            "{c:?} {:?}",
            GitSource::new("https://h/r.git", None, "/tmp/c").with_credentials(Some(c.clone()))
        );
        assert!(
            shown.contains("fleet-bot") && !shown.contains("ghp_secret123"),
            "{shown}"
        );
    }
}

/// Issue 30's repros at the git source: symbolic links, references, sizes and modes.
#[cfg(test)]
mod hardening_tests {
    use super::testing::{Entry, Upstream};
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn fetched(
        up: &Upstream,
        dir: &Path,
        reference: Option<&str>,
        path: Option<&str>,
    ) -> GitSource {
        let src = GitSource::new(up.url(), reference.map(str::to_string), dir.join("cache"))
            .with_path(path.map(PathBuf::from));
        src.fetch(&AtomicBool::new(false)).expect("fetch");
        src
    }

    /// Repro 8: `fleet/services.hcl -> ../shared/services.hcl` is checked out as
    /// the file it points at, never skipped; a directory link is followed too.
    #[test]
    fn a_symlink_inside_the_repository_is_checked_out_as_its_target() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let up = Upstream::init(&tmp.path().join("up.git"));
        up.set_head("main");
        let c = up.commit_entries(
            "main",
            "linked",
            &[
                ("fleet/main.hcl", Entry::File(b"main")),
                ("fleet/services.hcl", Entry::Link("../shared/services.hcl")),
                ("fleet/mods", Entry::Link("../shared/mods")),
                ("shared/services.hcl", Entry::File(b"services")),
                ("shared/mods/a.hcl", Entry::File(b"a")),
                ("other/big.bin", Entry::File(b"not checked out")),
            ],
        );
        let src = fetched(&up, tmp.path(), None, Some("fleet"));
        let co = src.checkout(&c, None).expect("checkout");
        let read = |p: &str| std::fs::read_to_string(co.dir.join(p)).expect(p);
        assert_eq!(read("fleet/services.hcl"), "services");
        assert_eq!(read("fleet/mods/a.hcl"), "a");
        assert!(
            !std::fs::symlink_metadata(co.dir.join("fleet/services.hcl"))
                .expect("stat")
                .file_type()
                .is_symlink(),
            "a copy, not a link"
        );
        assert!(!co.dir.join("other").exists(), "only --path is checked out");
        assert!(
            !co.dir.join("shared").exists(),
            "only --path is checked out"
        );

        // --path itself a link.
        let c2 = up.commit_entries(
            "main",
            "path is a link",
            &[
                ("prod", Entry::Link("envs/prod")),
                ("envs/prod/main.hcl", Entry::File(b"prod")),
            ],
        );
        let src = fetched(&up, tmp.path(), None, Some("prod"));
        let co = src.checkout(&c2, None).expect("checkout");
        assert_eq!(
            std::fs::read_to_string(co.dir.join("prod/main.hcl")).expect("read"),
            "prod"
        );
    }

    /// Links out of the repository, to nothing, in a loop, and submodules refuse
    /// the commit (never read as a deletion).
    #[test]
    fn a_symlink_out_of_the_repository_dangling_or_looping_refuses_the_commit() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let up = Upstream::init(&tmp.path().join("up.git"));
        up.set_head("main");
        let cases: Vec<(Vec<(&str, Entry)>, &str)> = vec![
            (
                vec![("fleet/s.hcl", Entry::Link("../../etc/passwd"))],
                "SymlinkEscapes",
            ),
            (
                vec![("fleet/s.hcl", Entry::Link("/etc/passwd"))],
                "SymlinkEscapes",
            ),
            // In the repository lexically, out of it once `p/q/x` is followed.
            (
                vec![
                    ("fleet/q/x", Entry::Link("../../a")),
                    ("a", Entry::File(b"a")),
                    ("fleet/q/y", Entry::Link("x/../..")),
                ],
                "SymlinkEscapes",
            ),
            (
                vec![("fleet/s.hcl", Entry::Link("../shared/gone.hcl"))],
                "SymlinkDangling",
            ),
            (vec![("fleet/loop", Entry::Link("."))], "SymlinkLoop"),
            (
                vec![("fleet/a", Entry::Link("b")), ("fleet/b", Entry::Link("a"))],
                "SymlinkLoop",
            ),
            (
                vec![(
                    "fleet/sub",
                    Entry::Submodule("0123456789012345678901234567890123456789"),
                )],
                "Submodule",
            ),
            (
                vec![("elsewhere/main.hcl", Entry::File(b"x"))],
                "NoDirectory",
            ),
        ];
        for (entries, want) in cases {
            let c = up.commit_entries("main", want, &entries);
            let src = fetched(&up, tmp.path(), None, Some("fleet"));
            let e = src.checkout(&c, None).expect_err(want);
            assert!(format!("{e:?}").starts_with(want), "{want}: {e:?}");
            assert!(e.refusal().is_some() && !e.is_transient(), "{e:?}");
            assert!(e.to_string().contains(&c), "names the commit: {e}");
        }
    }

    /// Repro 10: a file over the per-file limit, or files over the total, refuse
    /// the commit before anything big is read.
    #[test]
    fn checkouts_are_bounded_per_file_and_in_total() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let up = Upstream::init(&tmp.path().join("up.git"));
        up.set_head("main");
        let big = vec![b'x'; 2000];
        let c = up.commit_entries(
            "main",
            "big",
            &[
                ("fleet/main.hcl", Entry::File(b"m")),
                ("fleet/big.bin", Entry::File(&big)),
            ],
        );
        let limits = |file, total| Limits {
            max_file_bytes: file,
            max_total_bytes: total,
        };
        let src = fetched(&up, tmp.path(), None, Some("fleet"));
        let e = src
            .clone()
            .with_limits(limits(1000, 10_000))
            .checkout(&c, None)
            .expect_err("file over the limit");
        assert!(
            matches!(
                e,
                GitError::FileTooLarge {
                    size: 2000,
                    limit: 1000,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("fleet/big.bin"), "{e}");
        let e = src
            .clone()
            .with_limits(limits(5000, 1500))
            .checkout(&c, None)
            .expect_err("total over the limit");
        assert!(
            matches!(e, GitError::CheckoutTooLarge { limit: 1500, .. }),
            "{e:?}"
        );
        // Many empty files.
        let names: Vec<String> = (0..=MAX_FILES).map(|i| format!("fleet/e{i}")).collect();
        let empties: Vec<(&str, Entry)> = names
            .iter()
            .map(|n| (n.as_str(), Entry::File(b"")))
            .collect();
        let many = up.commit_entries("main", "many", &empties);
        let src = fetched(&up, tmp.path(), None, Some("fleet"));
        let e = src.checkout(&many, None).expect_err("too many files");
        assert!(matches!(e, GitError::TooManyFiles { .. }), "{e:?}");
        // Outside --path, a big file costs nothing.
        let c2 = up.commit_entries(
            "main",
            "big elsewhere",
            &[
                ("fleet/main.hcl", Entry::File(b"m")),
                ("data/big.bin", Entry::File(&big)),
            ],
        );
        let src = fetched(&up, tmp.path(), None, Some("fleet")).with_limits(limits(1000, 1000));
        src.checkout(&c2, None).expect("within the limits");
    }

    /// Repro 9: a 40-hex reference is a commit id only; a name that is a branch and
    /// a tag is refused; deleted branches are pruned.
    #[test]
    fn refs_are_exact_ambiguous_names_refused_and_deleted_branches_pruned() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let up = Upstream::init(&tmp.path().join("up.git"));
        up.set_head("main");
        let pinned = up.commit("main", "pinned", &[("fleet/main.hcl", "pinned")]);
        let hijack = up.commit("hijack", "hijack", &[("fleet/main.hcl", "hijack")]);
        up.set_ref(&format!("refs/heads/{pinned}"), &hijack);
        let by_sha = fetched(&up, tmp.path(), Some(&pinned), None);
        assert_eq!(
            by_sha.resolve().expect("resolve"),
            pinned,
            "the commit, not the branch"
        );

        up.set_ref("refs/heads/v1", &hijack);
        up.set_ref("refs/tags/v1", &pinned);
        let v1 = fetched(&up, tmp.path(), Some("v1"), None);
        let e = v1.resolve().expect_err("ambiguous");
        assert!(
            matches!(e, GitError::AmbiguousRef { .. }) && !e.is_transient(),
            "{e:?}"
        );
        let tag = GitSource::new(
            up.url(),
            Some("refs/tags/v1".into()),
            tmp.path().join("cache"),
        );
        assert_eq!(tag.resolve().expect("the tag in full"), pinned);
        let branch = GitSource::new(
            up.url(),
            Some("refs/heads/v1".into()),
            tmp.path().join("cache"),
        );
        assert_eq!(branch.resolve().expect("the branch in full"), hijack);

        let feature = up.commit("feature", "f", &[("fleet/main.hcl", "f")]);
        let src = fetched(&up, tmp.path(), Some("feature"), None);
        assert_eq!(src.resolve().expect("resolve"), feature);
        up.delete_ref("refs/heads/feature");
        up.delete_ref("refs/tags/v1");
        src.fetch(&AtomicBool::new(false)).expect("fetch");
        let e = src.resolve().expect_err("the branch is gone");
        assert!(matches!(e, GitError::UnknownRef { .. }), "{e:?}");
        assert_eq!(v1.resolve().expect("only the branch now"), hijack);
    }

    /// Repro 13: the cache is 0700 directories and 0600 files, even under a umask
    /// of 022 and over an existing world-readable cache.
    #[test]
    fn the_git_cache_is_private() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let up = Upstream::init(&tmp.path().join("up.git"));
        up.set_head("main");
        let c = up.commit("main", "one", &[("fleet/main.hcl", "x")]);
        let cache = tmp.path().join("cache");
        std::fs::create_dir_all(&cache).expect("mkdir");
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let src = fetched(&up, tmp.path(), None, Some("fleet"));
        src.checkout(&c, None).expect("checkout");
        let seen = super::testing::assert_private(&cache);
        assert!(seen > 10, "the clone and the checkout were walked: {seen}");
    }
}

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

/// A repository followed by URL and reference, cloned into a cache directory.
#[derive(Debug, Clone)]
pub struct GitSource {
    url: String,
    reference: Option<String>,
    cache: PathBuf,
    credentials: Option<HttpCredentials>,
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
        }
    }

    /// Authenticate HTTPS fetches with `credentials` (`None`: git's configured
    /// credential helpers, as git does).
    pub fn with_credentials(mut self, credentials: Option<HttpCredentials>) -> Self {
        self.credentials = credentials;
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

    /// The bare clone, created on first use.
    fn repo(&self) -> Result<gix::Repository, GitError> {
        let path = self.cache.join(REPO_DIR);
        if path.join("HEAD").exists() {
            return gix::open(&path).map_err(|source| GitError::Open { path, source });
        }
        std::fs::create_dir_all(&self.cache).map_err(|e| io_err(&self.cache, e))?;
        tracing::info!(path = %path.display(), url = %self.url, "creating the git cache");
        gix::init_bare(&path).map_err(|source| GitError::Init { path, source })
    }

    /// Bring the cache up to date with the remote: every branch (into
    /// `refs/remotes/origin/`), every tag, and the remote's HEAD. Cancelled (an
    /// error) when `interrupt` is set.
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
        Ok(())
    }

    /// The commit the followed reference names in the cache (after [`fetch`](Self::fetch)).
    pub fn resolve(&self) -> Result<String, GitError> {
        let repo = self.repo()?;
        let reference = self.reference.as_deref().unwrap_or("HEAD");
        let resolve_err = |source| GitError::Resolve {
            reference: reference.to_string(),
            source,
        };
        let mut candidates = vec![
            format!("{REMOTE_REFS}{reference}"),
            format!("refs/tags/{reference}"),
        ];
        if let Some(full) = reference.strip_prefix("refs/") {
            candidates.insert(0, format!("refs/{full}"));
        }
        for name in &candidates {
            if let Some(mut r) = repo
                .try_find_reference(name.as_str())
                .map_err(resolve_err)?
            {
                let commit = r.peel_to_commit().map_err(resolve_err)?;
                return Ok(commit.id.to_string());
            }
        }
        // A full commit id among the fetched objects.
        if let Ok(id) = gix::ObjectId::from_hex(reference.as_bytes()) {
            if let Some(object) = repo.try_find_object(id).map_err(resolve_err)? {
                let commit = object.peel_to_commit().map_err(resolve_err)?;
                return Ok(commit.id.to_string());
            }
        }
        Err(GitError::UnknownRef {
            url: self.url.clone(),
            reference: reference.to_string(),
        })
    }

    /// Write the tree of `commit` into `<cache>/checkouts/<commit>/` (once: a
    /// complete checkout is reused) and return it. Only regular and executable
    /// files are written; symbolic links and submodules are skipped (a
    /// configuration is plain files). Other commits' checkouts are removed, except
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
        if dir.is_dir() && done_marker.exists() {
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
        std::fs::create_dir_all(&tmp).map_err(|e| io_err(&tmp, e))?;
        let tree = c.tree().map_err(tree_err)?;
        let entries = tree.traverse().breadthfirst.files().map_err(tree_err)?;
        let mut written = 0usize;
        for entry in entries {
            if !entry.mode.is_blob() {
                if !entry.mode.is_tree() {
                    tracing::debug!(commit, path = %entry.filepath, "skipping a symbolic link or submodule");
                }
                continue;
            }
            let rel = safe_relative_path(entry.filepath.as_bstr()).ok_or_else(|| {
                GitError::UnsafePath {
                    commit: commit.to_string(),
                    path: entry.filepath.to_str_lossy().into_owned(),
                }
            })?;
            let blob = repo.find_blob(entry.oid).map_err(tree_err)?;
            let path = tmp.join(&rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| io_err(parent, e))?;
            }
            std::fs::write(&path, &blob.data).map_err(|e| io_err(&path, e))?;
            written += 1;
        }
        std::fs::rename(&tmp, &dir).map_err(|e| io_err(&dir, e))?;
        std::fs::write(&done_marker, b"").map_err(|e| io_err(&done_marker, e))?;
        tracing::info!(commit, files = written, dir = %dir.display(), "checked out");
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
    use std::path::Path;

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
            let repo = &self.repo;
            let empty = gix::ObjectId::empty_tree(repo.object_hash());
            // The empty tree is not stored until written.
            repo.write_object(gix::objs::Tree::empty())
                .expect("write the empty tree");
            let mut editor = repo.edit_tree(empty).expect("tree editor");
            for (path, content) in files {
                let blob = repo.write_blob(content.as_bytes()).expect("write blob");
                editor
                    .upsert(*path, gix::object::tree::EntryKind::Blob, blob)
                    .expect("add to tree");
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

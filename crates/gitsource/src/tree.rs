//! Writing one commit's `--path` out: symbolic links resolved inside the tree, the
//! size caps, and the private modes of what is written.

use super::{io_err, GitError, Limits, MAX_FILES, MAX_SYMLINK_HOPS};
use gix::bstr::ByteSlice;
use std::path::{Component, Path, PathBuf};

/// What a path of a commit's tree names.
#[derive(Debug, Clone, Copy)]
pub(super) enum Node {
    Tree(gix::ObjectId),
    Blob(gix::ObjectId),
}

/// Writes one commit's files out, following symbolic links inside the tree.
pub(super) struct TreeWriter<'a> {
    pub(super) repo: &'a gix::Repository,
    pub(super) commit: &'a str,
    pub(super) limits: Limits,
    pub(super) out: &'a Path,
    pub(super) written: u64,
    pub(super) files: u64,
}

/// The components of a slash-separated path (`.`, `..` kept for the resolver).
pub(super) fn path_components(p: &Path) -> Vec<String> {
    p.to_string_lossy()
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_string)
        .collect()
}

impl TreeWriter<'_> {
    pub(super) fn tree_err(&self, source: gix::Error) -> GitError {
        GitError::Tree {
            commit: self.commit.to_string(),
            source,
        }
    }

    /// The entries of the tree `id`: (name, kind, object).
    pub(super) fn entries(
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
    pub(super) fn resolve(
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
    pub(super) fn write_tree(
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
    pub(super) fn write_blob(&mut self, oid: gix::ObjectId, rel: &Path) -> Result<(), GitError> {
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
pub(super) fn unreachable_tree(commit: &str, real: &[String]) -> Result<gix::ObjectId, GitError> {
    Err(GitError::NoDirectory {
        commit: commit.to_string(),
        path: real.join("/"),
    })
}

/// Create `dir` (and its parents) 0700, or tighten an existing one to 0700.
pub(super) fn private_dir(dir: &Path) -> Result<(), GitError> {
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
pub(super) fn write_private(path: &Path, data: &[u8]) -> Result<(), GitError> {
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
pub(super) fn make_private(dir: &Path) -> Result<(), GitError> {
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

pub(super) fn remove_dir_if_present(p: &Path) -> Result<(), GitError> {
    match std::fs::remove_dir_all(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(p, e)),
    }
}

/// A tree path as a relative path of normal components (no `..`, no root, no
/// `.git`), or `None`.
pub(super) fn safe_relative_path(p: &gix::bstr::BStr) -> Option<PathBuf> {
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

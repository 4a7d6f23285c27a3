//! Helpers for tests: a bare repository made and committed to with gix (no `git`
//! program), as a forge would hold it.

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
    pub fn commit_entries(&self, branch: &str, message: &str, entries: &[(&str, Entry)]) -> String {
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

use super::testing::{Entry, Upstream};
use super::*;
use std::os::unix::fs::PermissionsExt;

fn fetched(up: &Upstream, dir: &Path, reference: Option<&str>, path: Option<&str>) -> GitSource {
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

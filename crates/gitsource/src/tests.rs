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

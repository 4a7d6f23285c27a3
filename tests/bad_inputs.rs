//! The bad-input corpus (tests/fixtures/bad/<case>/main.hcl + expected.txt, written
//! with the loader): through the real binary every case exits 1 with the located
//! error, and leaves an applied fleet's state directory byte-for-byte unchanged.

use gpushare_tests::{applied, gp, replace_config, snapshot, workspace_root};

#[test]
fn every_bad_input_exits_1_with_a_located_error_and_changes_nothing() {
    let corpus = workspace_root().join("tests").join("fixtures").join("bad");
    let mut cases: Vec<_> = std::fs::read_dir(&corpus)
        .unwrap_or_else(|e| panic!("reading {}: {e}", corpus.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("main.hcl").is_file() && p.join("expected.txt").is_file())
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 15,
        "the corpus has only {} cases",
        cases.len()
    );

    let d = applied("quickstart");
    let state = d.path().join(".gpushare");
    let before = snapshot(&state);
    assert!(!before.is_empty());

    for case in cases {
        let name = case
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(case.join("main.hcl")).expect("main.hcl");
        let expected = std::fs::read_to_string(case.join("expected.txt")).expect("expected.txt");
        replace_config(d.path(), &text);
        for args in [
            &["validate"][..],
            &["plan"],
            &["apply", "--auto-approve"],
            &["destroy", "--auto-approve"],
        ] {
            let r = gp(d.path(), args).run();
            assert_eq!(
                r.code,
                1,
                "{name}: `gpushare {}` exited {}:\n{}{}",
                args.join(" "),
                r.code,
                r.stdout,
                r.stderr
            );
            for want in expected.lines().map(str::trim).filter(|l| !l.is_empty()) {
                assert!(
                    r.stderr.contains(want),
                    "{name}: `gpushare {}` stderr lacks {want:?}:\n{}",
                    args.join(" "),
                    r.stderr
                );
            }
        }
        assert!(
            snapshot(&state) == before,
            "{name}: the state directory changed"
        );
    }
}

//! `gpushare fmt`: --check exits 3 (as terraform fmt -check does) and lists the
//! files, changing nothing; without --check it rewrites them.

use gpushare_tests::{example, example_names, gp};

const UNFORMATTED: &str = "gpushare {\n cluster=\"c\"\n}\ncapacity_provider \"l4\" {\ninstance_type = \"g6.xlarge\"\n    max_size= 2\n}\n";

#[test]
fn check_exits_3_and_changes_nothing_then_fmt_rewrites() {
    let d = tempfile::tempdir().expect("tempdir");
    let f = d.path().join("main.hcl");
    std::fs::write(&f, UNFORMATTED).expect("write");
    let r = gp(d.path(), &["fmt", "--check"]).run();
    r.expect_code(3);
    assert!(r.stdout.contains("main.hcl"), "{}", r.stdout);
    assert_eq!(
        std::fs::read_to_string(&f).expect("read"),
        UNFORMATTED,
        "--check changed the file"
    );

    gp(d.path(), &["fmt"]).run().expect_code(0);
    let formatted = std::fs::read_to_string(&f).expect("read");
    assert_ne!(formatted, UNFORMATTED);
    assert!(formatted.contains("max_size"), "{formatted}");
    gp(d.path(), &["fmt", "--check"]).run().expect_code(0);
    // The formatted file still means the same thing.
    gp(d.path(), &["validate"]).run().expect_code(0);
}

#[test]
fn the_examples_are_formatted() {
    for name in example_names() {
        let d = example(&name);
        let r = gp(d.path(), &["fmt", "--check"]).run();
        assert_eq!(
            r.code, 0,
            "examples/{name} needs `gpushare fmt`: {}{}",
            r.stdout, r.stderr
        );
    }
}

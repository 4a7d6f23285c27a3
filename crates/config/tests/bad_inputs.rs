//! The bad-input corpus (`tests/fixtures/bad/<case>/main.hcl` + `expected.txt`):
//! every case must fail `load_dir` + `validate` with output containing each
//! line of its `expected.txt` (which includes the `main.hcl:LINE:COL` location).

use gpushare_config::{load_dir, validate, Diagnostics, LoadOptions};
use std::path::{Path, PathBuf};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/bad")
}

/// What `gpushare validate` prints for a directory: load errors, or validation errors.
fn errors_of(dir: &Path) -> Diagnostics {
    match load_dir(dir, &LoadOptions::default()) {
        Err(d) => d,
        Ok(l) => Diagnostics(
            validate(&l.desired)
                .into_iter()
                .filter(|d| d.is_error())
                .collect(),
        ),
    }
}

#[test]
fn every_bad_input_gives_its_located_error() {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(corpus())
        .expect("corpus dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    assert!(cases.len() >= 15, "the corpus has {} cases", cases.len());
    let mut failures = vec![];
    for case in &cases {
        let name = case
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("?")
            .to_string();
        let out = errors_of(case);
        let text = out.to_string();
        if std::env::var_os("SHOW_CORPUS").is_some() {
            println!("=== {name}\n{text}\n");
        }
        if !out.has_errors() {
            failures.push(format!("{name}: no error reported"));
            continue;
        }
        let expected = std::fs::read_to_string(case.join("expected.txt")).unwrap_or_default();
        let lines: Vec<&str> = expected
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        if !lines.iter().any(|l| l.contains("main.hcl:")) {
            failures.push(format!(
                "{name}: expected.txt names no main.hcl:LINE:COL location"
            ));
        }
        for want in lines {
            if !text.contains(want) {
                failures.push(format!("{name}: missing {want:?} in:\n{text}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

// Hostile inputs (issue 15): each ends with a located error, never a panic, a stack
// overflow or an exhausted machine. Timings are measured by `benches/load.rs`, not here.

use gpushare_config::{format_source, load_sources, Diagnostic, Source};

fn main_hcl(text: String) -> Source {
    Source {
        name: "main.hcl".into(),
        text,
    }
}

/// The first error of loading `text` as main.hcl, with its location as `main.hcl:L:C`.
fn first_error(text: String) -> (Diagnostic, String) {
    let d = load_sources(&[main_hcl(text)], &LoadOptions::default()).expect_err("refused");
    let e = d.errors().next().expect("an error").clone();
    let at = e.loc.as_ref().map(ToString::to_string).unwrap_or_default();
    (e, at)
}

fn said(d: &Diagnostic) -> String {
    format!("{} {}", d.summary, d.detail.as_deref().unwrap_or(""))
}

#[test]
fn division_and_remainder_by_zero_are_located_errors() {
    for (op, what) in [("%", "remainder by zero"), ("/", "division by zero")] {
        let (e, at) = first_error(format!("locals {{\n  a = 5 {op} 0\n}}\n"));
        assert_eq!(at, "main.hcl:2:9", "{e}");
        assert!(said(&e).contains(what), "{e}");
        // A zero computed from other values is caught too.
        let (e, at) = first_error(format!(
            "locals {{\n  z = 1 - 1\n  a = [7 {op} (local.z * 3)]\n}}\n"
        ));
        assert_eq!(at, "main.hcl:3:10", "{e}");
        assert!(said(&e).contains(what), "{e}");
    }
    let (e, _) = first_error("locals {\n  a = 9223372036854775807 + 1\n}\n".into());
    assert!(said(&e).contains("out of the range"), "{e}");
}

#[test]
fn deep_nesting_is_refused_before_parsing() {
    // The locals block is level 1: the value's 32nd opener is one too many; the
    // value starts at column 7.
    let cases = [
        ("[", "]", 2000, 7 + 31),
        ("(", ")", 5000, 7 + 31),
        ("{k = ", "}", 2000, 7 + 31 * 5),
        ("\"${", "}\"", 2000, 8 + 31 * 3),
    ];
    for (open, close, n, col) in cases {
        let text = format!(
            "locals {{\n  a = {}1{}\n}}\n",
            open.repeat(n),
            close.repeat(n)
        );
        let (e, at) = first_error(text.clone());
        assert_eq!(at, format!("main.hcl:2:{col}"), "{e}");
        assert!(e.summary.contains("nesting too deep"), "{e}");
        let f = format_source(&main_hcl(text)).expect_err("fmt refuses it too");
        assert!(f.to_string().contains(&format!("main.hcl:2:{col}")), "{f}");
    }
    let blocks = format!("{}{}", "a {\n".repeat(2000), "}\n".repeat(2000));
    let (e, at) = first_error(blocks);
    assert_eq!(at, "main.hcl:33:3", "{e}");
    for chain in [
        format!("locals {{\n  a = 1{}\n}}\n", " + 1".repeat(100_000)),
        format!("locals {{\n  a = {}true\n}}\n", "!".repeat(5000)),
        format!("locals {{\n  a = {}1\n}}\n", "true ? 1 : ".repeat(5000)),
    ] {
        let (e, at) = first_error(chain);
        assert!(at.starts_with("main.hcl:2:"), "{e}");
        assert!(e.summary.contains("expression too long"), "{e}");
    }
}

#[test]
fn doubling_values_hit_the_size_limit() {
    let mut strings = String::from("locals {\n  l0 = \"abcdefghij\"\n");
    let mut lists = String::from("locals {\n  l0 = [1, 2, 3]\n");
    for i in 1..=24 {
        strings.push_str(&format!(
            "  l{i} = \"${{local.l{}}}${{local.l{}}}\"\n",
            i - 1,
            i - 1
        ));
        lists.push_str(&format!(
            "  l{i} = concat(local.l{}, local.l{})\n",
            i - 1,
            i - 1
        ));
    }
    strings.push_str("}\n");
    lists.push_str("}\n");
    for (text, what) in [(strings, "string"), (lists, "elements")] {
        let d = load_sources(&[main_hcl(text)], &LoadOptions::default()).expect_err("refused");
        let errors: Vec<&Diagnostic> = d.errors().collect();
        assert_eq!(
            errors.len(),
            1,
            "dependants of the failed value stay quiet: {d}"
        );
        let e = errors[0];
        assert_eq!(e.summary, "evaluation limit reached", "{e}");
        assert!(said(e).contains(what), "{e}");
        assert!(e.loc.as_ref().is_some_and(|l| l.file == "main.hcl"), "{e}");
    }
}

#[test]
fn evaluation_work_is_bounded() {
    // 3 nested for expressions over 1,000 elements: 10^9 steps asked, the budget stops it.
    let items = vec!["1"; 1000].join(", ");
    let text = format!(
        "locals {{\n  l = [{items}]\n  x = [for a in local.l : [for b in local.l : [for c in local.l : a + b + c]]]\n}}\n"
    );
    let (e, at) = first_error(text);
    assert!(at.starts_with("main.hcl:3:"), "{e}");
    assert_eq!(e.summary, "evaluation limit reached", "{e}");
}

#[test]
fn long_chains_of_locals_evaluate_once_each() {
    let mut t = String::from("locals {\n  l0 = 0\n");
    for i in 1..2000 {
        t.push_str(&format!("  l{i} = local.l{} + 1\n", i - 1));
    }
    t.push_str("  last = local.l1999 / 0\n}\n");
    let (e, at) = first_error(t);
    assert_eq!(at, "main.hcl:2002:22", "located at the operator: {e}");
    assert!(
        said(&e).contains("`1999 / 0`"),
        "the chain was evaluated: {e}"
    );
}

#[test]
fn invalid_string_escapes_are_located_errors() {
    let (e, at) = first_error("locals {\n  r = \"re\\qr\"\n}\n".into());
    assert_eq!(at, "main.hcl:2:10", "{e}");
    assert!(e.summary.contains("invalid escape sequence `\\q`"), "{e}");
    let (e, at) = first_error("locals {\n  r = \"a${1}\\u12\"\n}\n".into());
    assert_eq!(at, "main.hcl:2:13", "{e}");
    assert!(e.summary.contains("unicode escape"), "{e}");
}

#[test]
fn nesting_just_within_the_limits_fits_the_default_test_stack() {
    // 31 template levels inside the locals block and 64 operators at the innermost:
    // the costliest shape the prescan lets through parses and evaluates here, in a
    // test thread's 2 MiB stack, in a debug build.
    let sum = vec!["1"; 65].join(" + ");
    let text = format!(
        "locals {{\n  a = {}{sum}{}\n}}\n",
        "\"${".repeat(31),
        "}\"".repeat(31)
    );
    assert!(load_sources(&[main_hcl(text.clone())], &LoadOptions::default()).is_ok());
    assert!(format_source(&main_hcl(text)).is_ok());
}

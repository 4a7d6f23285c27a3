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

//! The built binary answers `--version` and `--help`.
//!
//! Also the reason `cargo test --workspace` builds the real `gpushare` binary
//! before any test runs (cargo builds a package's binaries for its integration
//! tests); the end-to-end tests in `tests/` use that binary (see
//! `gpushare_testkit::gpushare_bin`).

use std::process::Command;

#[test]
fn version_and_help_name_the_program() {
    let bin = env!("CARGO_BIN_EXE_gpushare");
    let out = Command::new(bin).arg("--version").output().expect("runs");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("gpushare "), "{text}");
    assert!(text.contains(env!("CARGO_PKG_VERSION")), "{text}");

    // The subcommands `--help` lists are checked in tests/cli_usage.rs.
    let out = Command::new(bin).arg("--help").output().expect("runs");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Usage: gpushare"), "{help}");
}

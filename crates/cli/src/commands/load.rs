//! Loading and validating a configuration (`validate`, `fmt`, and the loader every command uses).

use crate::cli::VarArgs;
use crate::planfile;
use crate::setup::{is_error, load_all};
use anyhow::Context;
use gpushare_config::{Diagnostic, Diagnostics, Source};
use gpushare_core::FORMAT_VERSION;
use serde_json::json;
use std::path::Path;

pub(crate) fn validate(dir: &Path, json: bool, vars: &VarArgs) -> anyhow::Result<u8> {
    let (desired, diags) = load_all(dir, vars)?;
    let errors = diags.iter().filter(|d| is_error(d)).count();
    let valid = desired.is_some() && errors == 0;
    if json {
        let out = json!({
            "format_version": FORMAT_VERSION,
            "valid": valid,
            "error_count": errors,
            "warning_count": diags.len() - errors,
            "diagnostics": diags.iter().map(diagnostic_json).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else if valid {
        if !diags.is_empty() {
            eprint!("{}", Diagnostics(diags));
        }
        println!("Success! The configuration is valid.");
    } else {
        eprint!("{}", Diagnostics(diags));
    }
    Ok(if valid { 0 } else { 1 })
}

pub(crate) fn diagnostic_json(d: &Diagnostic) -> serde_json::Value {
    json!({
        "severity": if is_error(d) { "error" } else { "warning" },
        "summary": d.summary,
        "detail": d.detail,
        "hint": d.hint,
        "path": d.path,
        "range": d.loc.as_ref().map(|l| json!({
            "filename": l.file,
            "start": { "line": l.line, "column": l.col },
        })),
    })
}

pub(crate) fn fmt(dir: &Path, check: bool) -> anyhow::Result<u8> {
    let mut unformatted = 0;
    let mut problems = Vec::new();
    for file in planfile::config_files(dir)? {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        let name = file
            .strip_prefix(dir)
            .unwrap_or(&file)
            .display()
            .to_string();
        let formatted = match gpushare_config::format_source(&Source {
            name: name.clone(),
            text: text.clone(),
        }) {
            Ok(f) => f,
            Err(Diagnostics(d)) => {
                problems.extend(d);
                continue;
            }
        };
        if formatted != text {
            unformatted += 1;
            println!("{name}");
            if !check {
                write_atomically(&file, &formatted)?;
            }
        }
    }
    if !problems.is_empty() {
        return Err(Diagnostics(problems).into());
    }
    Ok(if check && unformatted > 0 { 3 } else { 0 })
}

/// Replaces a configuration file keeping its mode (a 0600 file stays 0600).
pub(crate) fn write_atomically(path: &Path, text: &str) -> anyhow::Result<()> {
    gpushare_engine::fsutil::write_atomic_keeping_mode(path, text.as_bytes())
        .with_context(|| format!("replacing {}", path.display()))
}

//! Loading: prescan every file (`crate::limits`: nesting, escapes), parse it
//! (hcl-edit, which keeps spans), collect the
//! declarations, evaluate variables, locals and references, then build each
//! resource as JSON checked against its schema and deserialise it into the
//! typed model.
//!
//! Modules, by phase (each imports only those listed before it):
//! - `parse`: the file and its line index, syntax-error hints;
//! - `decl`: declarations as collected, the `Loader` state, `declared_again`;
//! - `scope`: values known so far;
//! - `eval`: bounded evaluation of one expression (checked arithmetic, the
//!   limits of `crate::limits`);
//! - `expr`: references in expressions, `check_refs`, `eval` with diagnostics;
//! - `collect`: top-level blocks of every file, the settings block;
//! - `vars`: variables, locals and Terraform resource names;
//! - `sensitive`: which variables and locals are sensitive, where they may go;
//! - `build`: one block body as schema-checked JSON, unknown keys;
//! - `run`: the pass over all of it, deserialising each resource;
//! - `tfvars`: variable definition files (`*.tfvars`, `*.tfvars.json`) and their precedence.

mod build;
mod collect;
mod decl;
mod eval;
mod expr;
mod parse;
mod run;
mod scope;
mod sensitive;
mod tfvars;
mod vars;

pub use tfvars::auto_files as auto_var_files;

use crate::diag::{Diagnostic, Diagnostics, LineIndex};
use crate::{LoadOptions, Loaded, Source};
use decl::Loader;
use gpushare_core::{Desired, SourceLoc};
#[cfg(test)]
use parse::unclosed_brace;
use parse::{syntax_hint, File};
use std::path::{Path, PathBuf};

/// Loads every `*.hcl` and `*.tf` file of `dir` (not recursive), in file-name order.
pub fn load_dir(dir: &Path, opts: &LoadOptions) -> Result<Loaded, Diagnostics> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        Diagnostics(vec![Diagnostic::error(format!(
            "cannot read the configuration directory {}",
            dir.display()
        ))
        .detail(e.to_string())
        .hint("pass the directory holding your *.hcl files")])
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            // Like Terraform: editor and hidden files (`.x.hcl`, `#x.hcl#`, `x.hcl~`) are skipped.
            let hidden = p
                .file_name()
                .and_then(|n| n.to_str())
                .is_none_or(|n| n.starts_with(['.', '#']));
            p.is_file()
                && !hidden
                && matches!(p.extension().and_then(|e| e.to_str()), Some("hcl" | "tf"))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Diagnostics(vec![Diagnostic::error(format!(
            "no configuration files in {}",
            dir.display()
        ))
        .detail("expected at least one *.hcl (or *.tf) file")
        .hint(
            "run gpushare in the directory holding your configuration, or pass it as DIR",
        )]));
    }
    let mut sources = Vec::with_capacity(files.len());
    let mut diags = vec![];
    for f in &files {
        match std::fs::read_to_string(f) {
            Ok(text) => sources.push(Source {
                name: f.display().to_string(),
                // A UTF-8 byte-order mark (some Windows editors write one) is not HCL.
                text: text
                    .strip_prefix('\u{feff}')
                    .map_or(text.clone(), str::to_string),
            }),
            Err(e) => diags.push(
                Diagnostic::error(format!("cannot read {}", f.display())).detail(e.to_string()),
            ),
        }
    }
    if !diags.is_empty() {
        return Err(Diagnostics(diags));
    }
    let (desired, warnings) = load_inner(&sources, Some(dir), opts)?;
    tracing::debug!(files = files.len(), "configuration loaded");
    Ok(Loaded {
        desired,
        files,
        warnings,
    })
}

/// Loads configuration texts (a name ending in `.tf` is read as Terraform).
pub fn load_sources(sources: &[Source], opts: &LoadOptions) -> Result<Desired, Diagnostics> {
    load_inner(sources, None, opts).map(|(d, _)| d)
}

fn load_inner(
    sources: &[Source],
    dir: Option<&Path>,
    opts: &LoadOptions,
) -> Result<(Desired, Vec<Diagnostic>), Diagnostics> {
    let mut files = Vec::with_capacity(sources.len());
    let mut diags = vec![];
    let assigned = match tfvars::collect(dir, opts) {
        Ok(a) => a,
        Err(d) => {
            diags.extend(d);
            vec![]
        }
    };
    for s in sources {
        let file = File {
            name: s.name.clone(),
            text: s.text.clone(),
            lines: LineIndex::new(&s.text),
            tf: s.name.ends_with(".tf"),
        };
        if let Err(r) = crate::limits::prescan(&s.text) {
            let (line, col) = file.lines.locate(&s.text, r.offset);
            diags.push(
                Diagnostic::error(r.summary)
                    .at(Some(SourceLoc {
                        file: s.name.clone(),
                        line,
                        col,
                    }))
                    .detail(r.detail)
                    .hint(r.hint),
            );
            continue;
        }
        match hcl::edit::parser::parse_body(&s.text) {
            Ok(body) => files.push((file, body)),
            Err(e) => {
                let loc = SourceLoc {
                    file: s.name.clone(),
                    line: e.location().line() as u32,
                    col: e.location().column() as u32,
                };
                diags.push(
                    Diagnostic::error("syntax error")
                        .at(Some(loc))
                        .detail(format!("{}\n{}", e.message(), e.line().trim_end()))
                        .hint(syntax_hint(e.message(), &s.text)),
                );
            }
        }
    }
    if !diags.is_empty() {
        return Err(Diagnostics(diags));
    }
    let mut l = Loader {
        files: &files,
        diags: vec![],
        data: vec![],
        opts,
        assigned,
        work: Default::default(),
    };
    let desired = l.run();
    if l.diags.iter().any(Diagnostic::is_error) {
        return Err(Diagnostics(l.diags));
    }
    Ok((desired, l.diags))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unclosed_brace_finds_the_block_left_open() {
        let t = "a {\n  b = \"}\" # }\n  c {\n  }\n\nd {\n}\n";
        assert_eq!(
            unclosed_brace(t),
            Some(2),
            "a's brace, found when d starts at column 1"
        );
        let t = "a {\n}\nb {\n  c {\n";
        assert_eq!(unclosed_brace(t), Some(t.find("b {").map_or(0, |i| i + 2)));
        assert_eq!(unclosed_brace("a {\n /* { */ }\n"), None);
    }

    #[test]
    fn second_declarations_name_the_first() {
        let src = |name: &str, text: &str| Source {
            name: name.into(),
            text: text.into(),
        };
        let a = src(
            "a.hcl",
            "gpushare {\n}\nvariable \"v\" {\n  default = 1\n}\nlocals {\n  l = 1\n}\n",
        );
        let b = src(
            "b.hcl",
            "locals {\n  l = 2\n}\nvariable \"v\" {\n}\ngpushare {\n}\n",
        );
        let diags = load_sources(&[a, b], &LoadOptions::default()).expect_err("duplicates");
        let found = |summary: &str| {
            diags
                .0
                .iter()
                .find(|d| d.summary == summary)
                .unwrap_or_else(|| panic!("no {summary:?} in {diags}"))
                .clone()
        };
        for (summary, at, first) in [
            ("duplicate variable \"v\"", "b.hcl:4:1", "a.hcl:3:1"),
            ("duplicate local value \"l\"", "b.hcl:2:3", "a.hcl:7:3"),
            ("duplicate gpushare block", "b.hcl:6:1", "a.hcl:1:1"),
        ] {
            let d = found(summary);
            let what = summary.trim_start_matches("duplicate ");
            assert_eq!(
                d.loc.as_ref().map(|l| l.to_string()).as_deref(),
                Some(at),
                "{d:?}"
            );
            assert_eq!(
                d.detail.as_deref(),
                Some(format!("{what} is also declared at {first}").as_str()),
                "{d:?}"
            );
        }
    }
}

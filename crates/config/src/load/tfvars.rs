//! Variable definition files, as Terraform reads them: `*.tfvars` (HCL: one
//! `name = value` attribute per variable, constant values only) and
//! `*.tfvars.json` (one JSON object, one key per variable).
//!
//! Precedence, lowest first (a later layer wins):
//! 1. the variable's `default`;
//! 2. `GPUSHARE_VAR_<name>` in the environment;
//! 3. `terraform.tfvars`, then `terraform.tfvars.json` of the configuration directory;
//! 4. `*.auto.tfvars` / `*.auto.tfvars.json` of the directory, in lexical order of
//!    their names;
//! 5. each `-var-file`, in command-line order;
//! 6. each `-var`, in command-line order.
//!
//! Layers 3 and 4 are read when [`LoadOptions::auto_var_files`](crate::LoadOptions)
//! is set (the CLI sets it; Terraform always reads them). Unlike Terraform, which
//! takes `-var` and `-var-file` in their command-line order, a `-var` always wins
//! over a `-var-file` here.
//!
//! The files are read before the variables are declared, so which values are
//! sensitive is not known yet; variable files are where secrets are kept, so no
//! error about one quotes its text or values (issue 46 item 6): a syntax error
//! gives its location without the line, an evaluation error `(sensitive)` in
//! place of the values, and an unquoted word is not named.

use super::eval::{Eval, Fail, Work};
use super::parse::File;
use super::scope::Scope;
use crate::diag::{Diagnostic, LineIndex};
use crate::LoadOptions;
use gpushare_core::SourceLoc;
use hcl::edit::structure::Structure;
use hcl::edit::Span;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One variable value read from a definitions file.
#[derive(Debug, Clone)]
pub(super) struct Assigned {
    pub(super) name: String,
    pub(super) value: Value,
    /// The file it came from (for messages: `-var-file x.tfvars`).
    pub(super) origin: String,
    pub(super) loc: Option<SourceLoc>,
}

/// The definition files `dir` provides automatically, in the order they apply:
/// `terraform.tfvars`, `terraform.tfvars.json`, then `*.auto.tfvars(.json)` sorted.
pub fn auto_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut auto = vec![];
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if p.is_file()
            && !name.starts_with('.')
            && (name.ends_with(".auto.tfvars") || name.ends_with(".auto.tfvars.json"))
        {
            auto.push(p);
        }
    }
    auto.sort();
    let mut out: Vec<PathBuf> = ["terraform.tfvars", "terraform.tfvars.json"]
        .iter()
        .map(|n| dir.join(n))
        .filter(|p| p.is_file())
        .collect();
    out.extend(auto);
    Ok(out)
}

/// Every value the definition files of this load give, lowest precedence first.
pub(super) fn collect(
    dir: Option<&Path>,
    opts: &LoadOptions,
) -> Result<Vec<Assigned>, Vec<Diagnostic>> {
    let mut files: Vec<PathBuf> = vec![];
    if let (Some(dir), true) = (dir, opts.auto_var_files) {
        files = auto_files(dir).map_err(|e| {
            vec![Diagnostic::error(format!(
                "cannot list the variable files of {}",
                dir.display()
            ))
            .detail(e.to_string())]
        })?;
    }
    files.extend(opts.var_files.iter().cloned());
    let mut out = vec![];
    let mut diags = vec![];
    for f in &files {
        match read_file(f) {
            Ok(v) => out.extend(v),
            Err(d) => diags.extend(d),
        }
    }
    if diags.is_empty() {
        Ok(out)
    } else {
        Err(diags)
    }
}

/// Read one definitions file: JSON when its name ends in `.json`, else HCL.
pub(super) fn read_file(path: &Path) -> Result<Vec<Assigned>, Vec<Diagnostic>> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        vec![
            Diagnostic::error(format!("cannot read the variable file {name}"))
                .detail(e.to_string())
                .hint("-var-file takes the path of a *.tfvars or *.tfvars.json file"),
        ]
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text).to_string();
    if name.ends_with(".json") {
        parse_json(&name, &text)
    } else {
        parse_hcl(&name, &text)
    }
}

pub(super) fn parse_json(name: &str, text: &str) -> Result<Vec<Assigned>, Vec<Diagnostic>> {
    let at = |line: usize, col: usize| {
        Some(SourceLoc {
            file: name.to_string(),
            line: line as u32,
            col: col as u32,
        })
    };
    let value: Value = serde_json::from_str(text).map_err(|e| {
        vec![Diagnostic::error("invalid JSON in a variable file")
            .at(at(e.line(), e.column()))
            .detail(e.to_string())
            .hint("a *.tfvars.json file is one JSON object: {\"name\": value, ...}")]
    })?;
    let Value::Object(map) = value else {
        return Err(vec![Diagnostic::error(
            "a variable file must hold one JSON object",
        )
        .at(at(1, 1))
        .hint("write {\"name\": value, ...}")]);
    };
    Ok(map
        .into_iter()
        .map(|(k, v)| Assigned {
            loc: json_key_loc(name, text, &k),
            name: k,
            value: v,
            origin: format!("-var-file {name}"),
        })
        .collect())
}

/// Where `"key":` first appears in a JSON text (good enough for a message).
fn json_key_loc(name: &str, text: &str, key: &str) -> Option<SourceLoc> {
    let quoted = serde_json::to_string(key).ok()?;
    let off = text.find(&quoted)?;
    let (line, col) = LineIndex::new(text).locate(text, off);
    Some(SourceLoc {
        file: name.to_string(),
        line,
        col,
    })
}

pub(super) fn parse_hcl(name: &str, text: &str) -> Result<Vec<Assigned>, Vec<Diagnostic>> {
    let file = File {
        name: name.to_string(),
        text: text.to_string(),
        lines: LineIndex::new(text),
        tf: false,
    };
    if let Err(r) = crate::limits::prescan(text) {
        let (line, col) = file.lines.locate(text, r.offset);
        return Err(vec![Diagnostic::error(r.summary)
            .at(Some(SourceLoc {
                file: name.to_string(),
                line,
                col,
            }))
            .detail(r.detail)
            .hint(r.hint)]);
    }
    let body = hcl::edit::parser::parse_body(text).map_err(|e| {
        vec![Diagnostic::error("syntax error in a variable file")
            .at(Some(SourceLoc {
                file: name.to_string(),
                line: e.location().line() as u32,
                col: e.location().column() as u32,
            }))
            .detail(e.message().to_string())
            .hint("a *.tfvars file holds `name = value` lines, one per variable")]
    })?;
    let scope = Scope::default();
    let mut work = Work::default();
    let mut out = vec![];
    let mut diags = vec![];
    for st in body.iter() {
        match st {
            Structure::Attribute(a) => {
                let loc = file.loc(a.key.span());
                match Eval::new(&scope, &mut work)
                    .all_sensitive(true)
                    .eval(&a.value)
                {
                    Ok(v) => out.push(Assigned {
                        name: a.key.as_str().to_string(),
                        value: v,
                        origin: format!("-var-file {name}"),
                        loc,
                    }),
                    Err(e) => diags.push(
                        Diagnostic::error(format!(
                            "invalid value for variable \"{}\" in a variable file",
                            a.key.as_str()
                        ))
                        .at(file.loc(e.span.or_else(|| a.value.span())))
                        .detail(match e.fail {
                            // Its message names the word, which may be an unquoted secret.
                            Fail::UndefinedVar | Fail::UndefinedFunc => {
                                "the value refers to a name; a string is written in quotes".to_string()
                            }
                            _ => e.msg,
                        })
                        .hint("a variable file holds constant values only: no var., local. or resource references"),
                    ),
                }
            }
            Structure::Block(b) => diags.push(
                Diagnostic::error(format!(
                    "unexpected block `{}` in a variable file",
                    b.ident.as_str()
                ))
                .at(file.loc(b.ident.span()))
                .hint("a *.tfvars file holds `name = value` attributes only"),
            ),
        }
    }
    if diags.is_empty() {
        Ok(out)
    } else {
        Err(diags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hcl_values_are_typed_constants() {
        let got = parse_hcl(
            "x.tfvars",
            "size = 3\nname = \"a\"\nnets = [\"s-1\", \"s-2\"]\ntags = { team = \"ml\" }\nsum = 1 + 2\n",
        )
        .expect("parses");
        let m: Vec<(String, Value)> = got.into_iter().map(|a| (a.name, a.value)).collect();
        assert_eq!(
            m,
            vec![
                ("size".into(), serde_json::json!(3)),
                ("name".into(), serde_json::json!("a")),
                ("nets".into(), serde_json::json!(["s-1", "s-2"])),
                ("tags".into(), serde_json::json!({"team": "ml"})),
                ("sum".into(), serde_json::json!(3)),
            ]
        );
    }

    #[test]
    fn hcl_errors_are_located() {
        let e = parse_hcl("bad.tfvars", "a = 1\nb = var.a\n").expect_err("a reference");
        assert_eq!(e.len(), 1);
        assert_eq!(
            e[0].loc.as_ref().map(ToString::to_string).as_deref(),
            Some("bad.tfvars:2:5"),
            "{e:?}"
        );
        let e = parse_hcl("bad.tfvars", "a = 1\nblock {\n}\n").expect_err("a block");
        assert_eq!(
            e[0].loc.as_ref().map(ToString::to_string).as_deref(),
            Some("bad.tfvars:2:1")
        );
        let e = parse_hcl("bad.tfvars", "a = \n").expect_err("syntax");
        assert!(e[0].loc.as_ref().is_some_and(|l| l.file == "bad.tfvars"));
    }

    /// Issue 46 item 6: which variables are sensitive is not known when a variable
    /// file is read; none of its errors quotes what is written in it.
    #[test]
    fn variable_file_errors_do_not_quote_the_values() {
        for text in [
            "token = hunter2-SECRET\n",
            "token = \"hunter2-SECRET\" + 1\n",
            "token = \"hunter2-SECRET\n",
            "token = [\"hunter2-SECRET\"][3]\n",
        ] {
            let e = parse_hcl("secret.tfvars", text).expect_err("invalid");
            let shown: Vec<String> = e.iter().map(ToString::to_string).collect();
            let shown = shown.join("\n");
            assert!(!shown.contains("hunter2"), "{text}: {shown}");
            assert!(shown.contains("secret.tfvars:1:"), "{text}: {shown}");
        }
    }

    #[test]
    fn json_values_and_errors() {
        let got = parse_json(
            "x.tfvars.json",
            "{\n  \"size\": 4,\n  \"nets\": [\"a\"]\n}\n",
        )
        .expect("parses");
        assert_eq!(got[0].name, "size");
        assert_eq!(got[0].value, serde_json::json!(4));
        assert_eq!(
            got[1].loc.as_ref().map(ToString::to_string).as_deref(),
            Some("x.tfvars.json:3:3")
        );
        let e = parse_json("x.tfvars.json", "{\n  \"size\": ,\n}").expect_err("bad JSON");
        assert_eq!(e[0].loc.as_ref().map(|l| l.line), Some(2));
        assert!(parse_json("x.tfvars.json", "[1]").is_err());
    }

    #[test]
    fn auto_files_come_in_terraform_order() {
        let d = tempfile::tempdir().expect("tempdir");
        for n in [
            "b.auto.tfvars",
            "a.auto.tfvars.json",
            "terraform.tfvars.json",
            "terraform.tfvars",
            "other.tfvars",
            ".hidden.auto.tfvars",
        ] {
            std::fs::write(d.path().join(n), "").expect("write");
        }
        let names: Vec<String> = auto_files(d.path())
            .expect("lists")
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        assert_eq!(
            names,
            [
                "terraform.tfvars",
                "terraform.tfvars.json",
                "a.auto.tfvars.json",
                "b.auto.tfvars"
            ]
        );
    }
}

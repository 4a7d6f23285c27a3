//! Canonical formatting for `gpushare fmt`, in the style of `terraform fmt`:
//! two-space indentation, `=` aligned within runs of consecutive one-line
//! attributes, one space around `=`, at most one blank line in a row,
//! multi-line lists and objects re-indented one item per line, comments kept.
//! Idempotent.

use crate::diag::{Diagnostic, Diagnostics};
use crate::Source;
use gpushare_core::SourceLoc;
use hcl::edit::expr::Expression;
use hcl::edit::structure::{Body, Structure};
use hcl::edit::{Decorate, Span};

/// The canonical form of a configuration text. Errors (located) on syntax errors.
pub fn format_source(src: &Source) -> Result<String, Diagnostics> {
    if let Err(r) = crate::limits::prescan(&src.text) {
        let (line, col) = crate::diag::LineIndex::new(&src.text).locate(&src.text, r.offset);
        return Err(Diagnostics(vec![Diagnostic::error(r.summary)
            .at(Some(SourceLoc {
                file: src.name.clone(),
                line,
                col,
            }))
            .detail(r.detail)
            .hint(r.hint)]));
    }
    let body = hcl::edit::parser::parse_body(&src.text).map_err(|e| {
        let loc = SourceLoc {
            file: src.name.clone(),
            line: e.location().line() as u32,
            col: e.location().column() as u32,
        };
        Diagnostics(vec![Diagnostic::error("syntax error")
            .at(Some(loc))
            .detail(format!("{}\n{}", e.message(), e.line().trim_end()))
            .hint("fix the syntax error first; fmt only formats valid files")])
    })?;
    let f = Formatter { text: &src.text };
    let mut out = String::new();
    f.body(&body, 0, &mut out);
    if let Some(suffix) = body.decor().suffix() {
        f.comments(suffix, 0, !out.is_empty(), &mut out);
    }
    let trimmed = out.trim_end_matches('\n');
    if trimmed.is_empty() {
        return Ok(String::new());
    }
    Ok(format!("{}\n", trimmed.trim_start_matches('\n')))
}

struct Formatter<'a> {
    text: &'a str,
}

fn pad(indent: usize) -> String {
    "  ".repeat(indent)
}

impl<'a> Formatter<'a> {
    fn raw(&self, span: Option<std::ops::Range<usize>>) -> &'a str {
        span.and_then(|s| self.text.get(s)).unwrap_or("")
    }

    /// Writes the comment lines of a decor prefix/suffix, re-indented; returns whether a
    /// blank line was seen (before any comment, or pending after the last).
    fn comments(&self, raw: &str, indent: usize, allow_blank: bool, out: &mut String) -> bool {
        let mut lines: Vec<&str> = raw.split('\n').collect();
        // The last piece is the indentation before the structure (or nothing).
        if lines.last().is_some_and(|l| l.trim().is_empty()) {
            lines.pop();
        }
        let mut blank = false;
        let mut wrote_any = false;
        for line in lines {
            let t = line.trim();
            if t.is_empty() {
                blank = true;
                continue;
            }
            if blank && (allow_blank || wrote_any) {
                out.push('\n');
            }
            blank = false;
            out.push_str(&pad(indent));
            out.push_str(t);
            out.push('\n');
            wrote_any = true;
        }
        blank
    }

    fn body(&self, body: &Body, indent: usize, out: &mut String) {
        let items: Vec<&Structure> = body.iter().collect();
        let mut i = 0;
        let mut first = true;
        while i < items.len() {
            // A run of one-line attributes, unbroken by blank lines or comments, aligns its `=`.
            let mut j = i;
            let mut width = 0;
            while j < items.len() {
                let Some(a) = items[j].as_attribute() else {
                    break;
                };
                if j > i && self.breaks_run(items[j]) {
                    break;
                }
                let value = self.expr(&a.value, indent);
                if value.contains('\n') {
                    if j == i {
                        j += 1;
                    }
                    break;
                }
                width = width.max(a.key.as_str().len());
                j += 1;
            }
            if j == i {
                j = i + 1; // a block
            }
            for st in &items[i..j] {
                let prefix = st
                    .decor()
                    .prefix()
                    .map(|p| p.to_string())
                    .unwrap_or_default();
                let mut head = String::new();
                let blank = self.comments(&prefix, indent, !first, &mut head);
                out.push_str(&head);
                if blank && (!first || !head.is_empty()) {
                    out.push('\n');
                }
                first = false;
                let suffix = st
                    .decor()
                    .suffix()
                    .map(|s| s.trim().to_string())
                    .unwrap_or_default();
                match st {
                    Structure::Attribute(a) => {
                        let key = a.key.as_str();
                        let value = self.expr(&a.value, indent);
                        let w = if value.contains('\n') {
                            key.len()
                        } else {
                            width.max(key.len())
                        };
                        out.push_str(&format!("{}{key:<w$} = {value}", pad(indent)));
                    }
                    Structure::Block(b) => {
                        out.push_str(&pad(indent));
                        out.push_str(b.ident.as_str());
                        for l in &b.labels {
                            out.push(' ');
                            out.push_str(self.raw(l.span()).trim());
                        }
                        let open = b
                            .body
                            .decor()
                            .prefix()
                            .map(|p| p.trim().to_string())
                            .unwrap_or_default();
                        let close = b
                            .body
                            .decor()
                            .suffix()
                            .map(|p| p.to_string())
                            .unwrap_or_default();
                        if b.body.is_empty() && open.is_empty() && close.trim().is_empty() {
                            out.push_str(" {}");
                        } else {
                            out.push_str(" {");
                            if !open.is_empty() {
                                out.push(' ');
                                out.push_str(&open);
                            }
                            out.push('\n');
                            self.body(&b.body, indent + 1, out);
                            self.comments(&close, indent + 1, false, out);
                            out.push_str(&pad(indent));
                            out.push('}');
                        }
                    }
                }
                if !suffix.is_empty() {
                    out.push(' ');
                    out.push_str(&suffix);
                }
                out.push('\n');
            }
            i = j;
        }
    }

    /// A blank line or a comment before the structure ends an alignment run.
    fn breaks_run(&self, st: &Structure) -> bool {
        let prefix = st
            .decor()
            .prefix()
            .map(|p| p.to_string())
            .unwrap_or_default();
        prefix.contains("\n\n") || prefix.starts_with('\n') || !prefix.trim().is_empty()
    }

    /// An expression's canonical text: multi-line lists and objects one item per line,
    /// everything else as written.
    fn expr(&self, e: &Expression, indent: usize) -> String {
        let raw = self.raw(e.span()).trim();
        if !raw.contains('\n') || raw.contains('#') || raw.contains("//") || raw.contains("/*") {
            return raw.to_string();
        }
        match e {
            Expression::Array(arr) => {
                let mut s = String::from("[\n");
                for item in arr.iter() {
                    s.push_str(&format!(
                        "{}{},\n",
                        pad(indent + 1),
                        self.expr(item, indent + 1)
                    ));
                }
                s.push_str(&pad(indent));
                s.push(']');
                s
            }
            Expression::Object(obj) => {
                let items: Vec<(String, String)> = obj
                    .iter()
                    .map(|(k, v)| {
                        (
                            self.raw(k.span()).trim().to_string(),
                            self.expr(v.expr(), indent + 1),
                        )
                    })
                    .collect();
                let width = items
                    .iter()
                    .filter(|(_, v)| !v.contains('\n'))
                    .map(|(k, _)| k.len())
                    .max()
                    .unwrap_or(0);
                let mut s = String::from("{\n");
                for (k, v) in items {
                    let w = if v.contains('\n') { k.len() } else { width };
                    s.push_str(&format!("{}{k:<w$} = {v}\n", pad(indent + 1)));
                }
                s.push_str(&pad(indent));
                s.push('}');
                s
            }
            _ => raw.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(t: &str) -> String {
        format_source(&Source {
            name: "main.hcl".into(),
            text: t.into(),
        })
        .expect("formats")
    }

    #[test]
    fn aligns_indents_and_keeps_comments() {
        let input = "# head\n\n\n\ncapacity_provider \"l4\" {   # the pool\n      instance_type=\"g6.12xlarge\"\n  min_size = 0 # none idle\n    max_size      =    4\n\n\n  tags = {\n      team = \"ml\"\n    cost_center = \"42\"\n  }\n     # before mps\n  mps {\n enabled = true\n  }\n  metadata_options {}\n}\n# end\n";
        let want = "# head\n\ncapacity_provider \"l4\" { # the pool\n  instance_type = \"g6.12xlarge\"\n  min_size      = 0 # none idle\n  max_size      = 4\n\n  tags = {\n    team        = \"ml\"\n    cost_center = \"42\"\n  }\n  # before mps\n  mps {\n    enabled = true\n  }\n  metadata_options {}\n}\n# end\n";
        assert_eq!(fmt(input), want);
        assert_eq!(fmt(want), want, "idempotent");
    }

    #[test]
    fn multi_line_lists_and_heredocs() {
        let input = "x {\n  command = [\"a\",\n  \"b\"]\n  script = <<EOT\n  keep   this\nEOT\n  y = 1\n}\n";
        let out = fmt(input);
        assert_eq!(out, "x {\n  command = [\n    \"a\",\n    \"b\",\n  ]\n  script = <<EOT\n  keep   this\nEOT\n  y = 1\n}\n");
        assert_eq!(fmt(&out), out);
    }

    #[test]
    fn edge_cases_are_stable() {
        let cases = [
            "x { a = 1 }",
            "x {\n\n  a = 1\n\n}\n",
            "x {\n  a = { b = 1, c = 2 }\n  // tail\n}",
            "x \"l\" {\r\n  a = 1\r\n  bb = 2\r\n}\r\n",
            "a = 1\n/* block\n   comment */\nb = 2\n",
            "x {\n  m = {\n    # note\n    k = 1\n  }\n}\n",
            "",
            "# only a comment",
        ];
        for c in cases {
            let once = fmt(c);
            assert_eq!(fmt(&once), once, "not idempotent for {c:?}: {once:?}");
            assert!(!once.contains('\r'), "{once:?}");
            if !c.trim().is_empty() {
                assert!(once.ends_with('\n'), "{once:?}");
            }
            for comment in [
                "// tail",
                "# note",
                "/* block",
                "comment */",
                "# only a comment",
            ] {
                assert_eq!(
                    c.contains(comment),
                    once.contains(comment),
                    "{comment:?} lost from {c:?}: {once:?}"
                );
            }
        }
        assert_eq!(fmt("x { a = 1 }"), "x {\n  a = 1\n}\n");
        assert_eq!(fmt("x {\n\n  a = 1\n\n}\n"), "x {\n  a = 1\n}\n");
        assert_eq!(
            fmt("x \"l\" {\r\n  a = 1\r\n  bb = 2\r\n}\r\n"),
            "x \"l\" {\n  a  = 1\n  bb = 2\n}\n"
        );
        assert_eq!(fmt("# only a comment"), "# only a comment\n");
    }

    #[test]
    fn syntax_errors_are_located() {
        let e = format_source(&Source {
            name: "a.hcl".into(),
            text: "x {\n  y = \n".into(),
        })
        .expect_err("fails");
        assert!(e.to_string().contains("a.hcl:"), "{e}");
    }
}

//! Files and parsing: the per-file line index and location lookup, and the
//! hints given for syntax errors.

use crate::diag::LineIndex;
use gpushare_core::SourceLoc;
use std::ops::Range;

pub(super) fn syntax_hint(message: &str, text: &str) -> String {
    if message.contains("`}`") {
        match unclosed_brace(text) {
            Some(off) => {
                let (line, _) = LineIndex::new(text).locate(text, off);
                let opener = text[..off].rsplit('\n').next().unwrap_or("").trim();
                format!("the block opened on line {line} (`{opener} {{`) has no matching `}}`")
            }
            None => "check that every `{` has a matching `}`".into(),
        }
    } else if message.contains("expected") {
        "attributes are written `name = value`, blocks `type \"label\" { ... }`".into()
    } else {
        "see the HCL syntax: attributes `name = value`, blocks `type \"label\" { ... }`".into()
    }
}

/// The byte offset of the `{` most likely left unclosed: the innermost open block
/// when a new block starts at column 1 (top-level blocks start there), else the
/// outermost one still open at the end. Skips strings and comments (not heredocs).
pub(super) fn unclosed_brace(text: &str) -> Option<usize> {
    let b = text.as_bytes();
    let mut stack: Vec<usize> = vec![];
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' && b[i] != b'\n' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 1;
            }
            b'{' => stack.push(i),
            b'}' => {
                stack.pop();
            }
            c if c.is_ascii_alphabetic() && (i == 0 || b[i - 1] == b'\n') && !stack.is_empty() => {
                return stack.last().copied();
            }
            _ => {}
        }
        i += 1;
    }
    stack.first().copied()
}

pub(super) struct File {
    pub(super) name: String,
    pub(super) text: String,
    pub(super) lines: LineIndex,
    pub(super) tf: bool,
}

impl File {
    pub(super) fn loc(&self, span: Option<Range<usize>>) -> Option<SourceLoc> {
        let span = span?;
        let (line, col) = self.lines.locate(&self.text, span.start);
        Some(SourceLoc {
            file: self.name.clone(),
            line,
            col,
        })
    }
}

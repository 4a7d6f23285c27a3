//! Diagnostics: what went wrong, where, and what to do about it.

use gpushare_core::catalog::edit_distance;
use gpushare_core::SourceLoc;
use serde::Serialize;
use std::fmt;

/// What a diagnostic says in place of a sensitive value (issue 46 item 6): one
/// computed from a variable declared `sensitive = true`, or set in an attribute the
/// schema marks sensitive (`secret_env`).
pub(crate) const SENSITIVE: &str = "(sensitive)";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Error,
    Warning,
}

/// One finding about the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    pub summary: String,
    /// What was found and what was expected.
    pub detail: Option<String>,
    pub loc: Option<SourceLoc>,
    /// The attribute path, e.g. `task_definition.llm.container.server.gpu.mps.memory`.
    pub path: Option<String>,
    pub hint: Option<String>,
}

impl Diagnostic {
    pub fn error(summary: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            summary: summary.into(),
            detail: None,
            loc: None,
            path: None,
            hint: None,
        }
    }
    pub fn warning(summary: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(summary)
        }
    }
    pub fn detail(mut self, d: impl Into<String>) -> Self {
        self.detail = Some(d.into());
        self
    }
    pub fn at(mut self, loc: Option<SourceLoc>) -> Self {
        self.loc = loc;
        self
    }
    pub fn path(mut self, p: impl Into<String>) -> Self {
        self.path = Some(p.into());
        self
    }
    pub fn hint(mut self, h: impl Into<String>) -> Self {
        self.hint = Some(h.into());
        self
    }
    pub fn maybe_hint(mut self, h: Option<String>) -> Self {
        if h.is_some() {
            self.hint = h;
        }
        self
    }
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{sev}: {}", self.summary)?;
        match (&self.loc, &self.path) {
            (Some(loc), Some(p)) => write!(f, "\n  --> {loc} ({p})")?,
            (Some(loc), None) => write!(f, "\n  --> {loc}")?,
            (None, Some(p)) => write!(f, "\n  --> {p}")?,
            (None, None) => {}
        }
        if let Some(d) = &self.detail {
            for line in d.lines() {
                write!(f, "\n  {line}")?;
            }
        }
        if let Some(h) = &self.hint {
            write!(f, "\n  = hint: {h}")?;
        }
        Ok(())
    }
}

/// A list of diagnostics; the `Err` of a failed load. Holds at least one error
/// when returned as an error.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn has_errors(&self) -> bool {
        self.0.iter().any(Diagnostic::is_error)
    }
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter().filter(|d| d.is_error())
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n\n")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

impl From<Vec<Diagnostic>> for Diagnostics {
    fn from(v: Vec<Diagnostic>) -> Self {
        Diagnostics(v)
    }
}

/// "did you mean ..." for the candidate nearest to `word`, when near enough.
pub fn suggest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    nearest(word, candidates).map(|c| format!("did you mean `{c}`?"))
}

/// The candidate nearest to `word` by edit distance, when near enough to be a typo.
pub fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(2);
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, c)| c)
}

/// Byte offset to line and column (both 1-based; columns count characters).
pub struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { starts }
    }
    pub fn locate(&self, text: &str, offset: usize) -> (u32, u32) {
        let line = match self.starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        let start = self.starts[line];
        let col = text
            .get(start..offset.min(text.len()))
            .map_or(offset - start, |s| s.chars().count())
            + 1;
        (line as u32 + 1, col as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_index_locates_offsets() {
        let t = "ab\ncdé\nf";
        let li = LineIndex::new(t);
        assert_eq!(li.locate(t, 0), (1, 1));
        assert_eq!(li.locate(t, 3), (2, 1));
        assert_eq!(li.locate(t, 5), (2, 3));
        assert_eq!(li.locate(t, t.len() - 1), (3, 1));
    }

    #[test]
    fn suggestions_only_for_near_names() {
        assert_eq!(
            nearest("max_sise", ["min_size", "max_size"]),
            Some("max_size")
        );
        assert_eq!(nearest("zzzzzzzz", ["min_size", "max_size"]), None);
    }

    #[test]
    fn display_has_location_detail_and_hint() {
        let d = Diagnostic::error("unknown attribute `max_sise`")
            .at(Some(SourceLoc {
                file: "main.hcl".into(),
                line: 3,
                col: 5,
            }))
            .detail("capacity_provider takes: instance_type, max_size")
            .hint("did you mean `max_size`?");
        assert_eq!(
            d.to_string(),
            "error: unknown attribute `max_sise`\n  --> main.hcl:3:5\n  capacity_provider takes: instance_type, max_size\n  = hint: did you mean `max_size`?"
        );
    }
}

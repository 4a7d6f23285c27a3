//! Diagnostics of the protocol-free core, with attribute paths.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

/// One step of an attribute path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathStep {
    Attr(String),
    Index(i64),
    Key(String),
}

pub type AttrPath = Vec<PathStep>;

/// Renders a path as Terraform prints it: `container[0].gpu.count`.
pub fn path_string(path: &[PathStep]) -> String {
    let mut s = String::new();
    for step in path {
        match step {
            PathStep::Attr(a) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(a);
            }
            PathStep::Index(i) => s.push_str(&format!("[{i}]")),
            PathStep::Key(k) => s.push_str(&format!("[{k:?}]")),
        }
    }
    s
}

#[derive(Debug, Clone, PartialEq)]
pub struct Diag {
    pub severity: Severity,
    pub summary: String,
    pub detail: String,
    pub path: Option<AttrPath>,
}

impl Diag {
    pub fn error(summary: impl Into<String>, detail: impl Into<String>) -> Diag {
        Diag {
            severity: Severity::Error,
            summary: summary.into(),
            detail: detail.into(),
            path: None,
        }
    }
    pub fn warning(summary: impl Into<String>, detail: impl Into<String>) -> Diag {
        Diag {
            severity: Severity::Warning,
            summary: summary.into(),
            detail: detail.into(),
            path: None,
        }
    }
    pub fn at(mut self, path: AttrPath) -> Diag {
        self.path = Some(path);
        self
    }
    /// An error from a Rust error value, its whole cause chain in the detail.
    pub fn from_error(summary: impl Into<String>, err: &(dyn std::error::Error + 'static)) -> Diag {
        Diag::error(summary, gpushare_core::util::error_chain(err))
    }
}

pub fn has_errors(diags: &[Diag]) -> bool {
    diags.iter().any(|d| d.severity == Severity::Error)
}

/// `attr` as a one-step path.
pub fn attr_path(names: &[&str]) -> AttrPath {
    names
        .iter()
        .map(|n| PathStep::Attr((*n).to_string()))
        .collect()
}

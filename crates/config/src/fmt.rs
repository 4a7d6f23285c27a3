//! Canonical formatting for `gpushare fmt`.

use crate::diag::{Diagnostic, Diagnostics};
use crate::Source;

/// The canonical form of a configuration text (idempotent). Errors on syntax errors.
pub fn format_source(src: &Source) -> Result<String, Diagnostics> {
    match hcl::edit::parser::parse_body(&src.text) {
        Ok(body) => Ok(body.to_string()),
        Err(e) => Err(Diagnostics(vec![
            Diagnostic::error("syntax error").detail(e.to_string())
        ])),
    }
}

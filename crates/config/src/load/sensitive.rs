//! `sensitive = true` on a variable: which variables and locals carry a sensitive
//! value, and the rule that such a value may only be used in a container's
//! `secret_env` (where it is kept for the agent and shown as `(sensitive)`); used
//! anywhere else it would be printed by `plan`, so it is refused there.
//!
//! What reads a sensitive value, and how messages show one (`(sensitive)`), is
//! decided in `eval` (`eval/hidden.rs`), since evaluation's own errors need it.

use super::decl::{Loader, LocalDecl, VarDecl};
use super::eval::{first_sensitive, names_in, reads_sensitive, Name};
use super::scope::Scope;
use crate::diag::Diagnostic;
use hcl::edit::expr::Expression;
use hcl::edit::structure::Structure;
use hcl::edit::Span;
use std::collections::BTreeMap;

/// The one attribute a sensitive value may flow into.
pub(super) const SECRET_ATTRIBUTE: &str = "secret_env";

/// Whether a variable block says `sensitive = true`.
pub(super) fn declared_sensitive(decl: &VarDecl<'_>) -> bool {
    decl.block.body.iter().any(|st| match st {
        Structure::Attribute(a) => a.key.as_str() == "sensitive" && a.value.as_bool() == Some(true),
        Structure::Block(_) => false,
    })
}

/// What a diagnostic about a sensitive variable's value says in place of the detail,
/// which could quote the value (issue 46 item 6).
pub(super) const SENSITIVE_DETAIL: &str =
    "the value is sensitive and not shown; check it against the variable's type";

impl<'a> Loader<'a> {
    /// Fills `scope.sensitive` with `var.NAME` of every variable declared
    /// `sensitive = true` and `local.NAME` of every local whose expression refers to
    /// one of them, directly or through other locals (or reads `var` or `local`
    /// whole). Before locals are evaluated, so that their errors hide the values.
    pub(super) fn mark_sensitive(
        &mut self,
        vars: &BTreeMap<String, VarDecl<'a>>,
        locals: &BTreeMap<String, LocalDecl<'a>>,
        scope: &mut Scope,
    ) {
        for (name, decl) in vars {
            if declared_sensitive(decl) {
                scope.sensitive.insert(("var".into(), name.clone()));
            }
        }
        if scope.sensitive.is_empty() {
            return;
        }
        // Which locals each local reads; then spread the mark until nothing changes
        // (each round marks at least one more local, so at most one round per local).
        let reads: Vec<(&String, Vec<Name>)> = locals
            .iter()
            .map(|(name, l)| (name, names_in(l.expr)))
            .collect();
        let no_bound = |_: &str| None;
        loop {
            let newly: Vec<String> = reads
                .iter()
                .filter(|(name, _)| !scope.sensitive.contains(&("local".into(), (*name).clone())))
                .filter(|(_, names)| {
                    names
                        .iter()
                        .any(|n| reads_sensitive(&n.root, n.attr.as_deref(), scope, &no_bound))
                })
                .map(|(name, _)| (*name).clone())
                .collect();
            if newly.is_empty() {
                break;
            }
            for n in newly {
                scope.sensitive.insert(("local".into(), n));
            }
        }
    }

    /// Reports a sensitive value used in attribute `key` at `path` (anything but
    /// `secret_env`). True when the attribute may be used.
    pub(super) fn check_sensitive(
        &mut self,
        fi: usize,
        key: &str,
        expr: &Expression,
        path: &str,
        scope: &Scope,
    ) -> bool {
        if key == SECRET_ATTRIBUTE || scope.sensitive.is_empty() {
            return true;
        }
        let file = self.file(fi);
        if let Some(r) = first_sensitive(expr, scope) {
            let (what, why) = match (r.root.as_str(), &r.attr) {
                ("var", Some(first)) => (
                    format!("var.{first}"),
                    format!("variable \"{first}\" is declared sensitive = true"),
                ),
                (_, Some(first)) => (
                    format!("local.{first}"),
                    format!(
                        "local `{first}` is computed from a variable declared sensitive = true"
                    ),
                ),
                (root, None) => (
                    root.to_string(),
                    format!("`{root}` read whole holds a value declared sensitive = true"),
                ),
            };
            let hint = if key == "env" {
                "move the variable from env to secret_env (given to the container the same way, shown as (sensitive))".to_string()
            } else {
                format!("a sensitive value can be used only in a container's {SECRET_ATTRIBUTE}; remove sensitive = true if `{key}` is not secret")
            };
            self.err(
                Diagnostic::error(format!(
                    "`{what}` is sensitive and cannot be used in `{key}`"
                ))
                .at(file.loc(r.span.clone()).or_else(|| file.loc(expr.span())))
                .path(format!("{path}.{key}"))
                .detail(format!("{why}; `{key}` is shown by plan and show"))
                .hint(hint),
            );
            return false;
        }
        true
    }
}

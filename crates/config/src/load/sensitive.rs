//! `sensitive = true` on a variable: which variables and locals carry a sensitive
//! value, and the rule that such a value may only be used in a container's
//! `secret_env` (where it is kept for the agent and shown as `(sensitive)`); used
//! anywhere else it would be printed by `plan`, so it is refused there.

use super::decl::{Loader, LocalDecl, VarDecl};
use super::expr::refs_of;
use super::scope::Scope;
use crate::diag::Diagnostic;
use hcl::edit::expr::Expression;
use hcl::edit::structure::Structure;
use hcl::edit::Span;
use std::collections::{BTreeMap, BTreeSet};

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
    /// one of them, directly or through other locals.
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
        let reads: Vec<(&String, BTreeSet<(String, String)>)> = locals
            .iter()
            .map(|(name, l)| (name, deps(l.expr)))
            .collect();
        loop {
            let newly: Vec<String> = reads
                .iter()
                .filter(|(name, _)| !scope.sensitive.contains(&("local".into(), (*name).clone())))
                .filter(|(_, deps)| deps.iter().any(|d| scope.sensitive.contains(d)))
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
        for r in refs_of(expr) {
            let Some(first) = r.attrs.first() else {
                continue;
            };
            if !scope.sensitive.contains(&(r.root.clone(), first.clone())) {
                continue;
            }
            let what = format!("{}.{first}", r.root);
            let why = if r.root == "var" {
                format!("variable \"{first}\" is declared sensitive = true")
            } else {
                format!("local `{first}` is computed from a variable declared sensitive = true")
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

fn deps(expr: &Expression) -> BTreeSet<(String, String)> {
    refs_of(expr)
        .into_iter()
        .filter_map(|r| r.attrs.first().map(|a| (r.root.clone(), a.clone())))
        .collect()
}

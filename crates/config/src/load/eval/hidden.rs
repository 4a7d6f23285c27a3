//! Which values are sensitive (issue 46 item 6): one computed from a variable
//! declared `sensitive = true`, from a local computed from one, or from a
//! for-expression variable running over one. A message about such a value says
//! `(sensitive)` in its place; the rest of the message and its location stay.
//!
//! Sensitivity is decided by what an expression refers to, not by the value it
//! makes: `upper(var.token)`, `"${var.token}-x"` and `var.secrets["db"]` are all
//! sensitive. `var` or `local` read whole (`all = var`) is sensitive when any
//! of its variables or locals is.

use super::{short, Eval};
use crate::diag::SENSITIVE;
use crate::load::scope::Scope;
use hcl::edit::expr::{Expression, Traversal, TraversalOperator};
use hcl::edit::visit::{self, Visit};
use hcl::edit::Span;
use serde_json::Value;
use std::ops::Range;

/// A name an expression reads: its root (`var`, `local`, a for-expression
/// variable, ...) and the attribute right after it, if any (`var.NAME`).
pub(in crate::load) struct Name {
    pub(in crate::load) root: String,
    pub(in crate::load) attr: Option<String>,
    pub(in crate::load) span: Option<Range<usize>>,
}

#[derive(Default)]
struct Names {
    found: Vec<Name>,
}

impl Visit for Names {
    fn visit_expr(&mut self, node: &Expression) {
        match node {
            Expression::Variable(v) => self.found.push(Name {
                root: v.as_str().to_string(),
                attr: None,
                span: node.span(),
            }),
            Expression::Traversal(t) => self.traversal(t),
            other => visit::visit_expr(self, other),
        }
    }
}

impl Names {
    fn traversal(&mut self, t: &Traversal) {
        let Expression::Variable(root) = &t.expr else {
            return visit::visit_traversal(self, t);
        };
        self.found.push(Name {
            root: root.as_str().to_string(),
            attr: first_attr(t).map(str::to_string),
            span: t.span(),
        });
        for op in &t.operators {
            self.visit_traversal_operator(op);
        }
    }
}

/// The attribute right after a traversal's root (`NAME` in `var.NAME[0]`).
fn first_attr(t: &Traversal) -> Option<&str> {
    match t.operators.first().map(|op| op.value()) {
        Some(TraversalOperator::GetAttr(a)) => Some(a.as_str()),
        _ => None,
    }
}

/// Every name `expr` reads, in source order.
pub(in crate::load) fn names_in(expr: &Expression) -> Vec<Name> {
    let mut n = Names::default();
    n.visit_expr(expr);
    n.found
}

/// Whether reading `root.attr` (`attr`: the attribute right after the root, if
/// any) reads a sensitive value. `bound`: whether a for-expression variable of
/// that name is bound, and to a sensitive value.
pub(in crate::load) fn reads_sensitive(
    root: &str,
    attr: Option<&str>,
    scope: &Scope,
    bound: &dyn Fn(&str) -> Option<bool>,
) -> bool {
    if let Some(b) = bound(root) {
        return b;
    }
    if root != "var" && root != "local" {
        return false;
    }
    scope
        .sensitive
        .iter()
        .any(|(r, n)| r == root && attr.is_none_or(|a| a == n))
}

/// The first sensitive name `expr` reads (outside any for expression).
pub(in crate::load) fn first_sensitive(expr: &Expression, scope: &Scope) -> Option<Name> {
    if scope.sensitive.is_empty() {
        return None;
    }
    names_in(expr)
        .into_iter()
        .find(|n| reads_sensitive(&n.root, n.attr.as_deref(), scope, &|_| None))
}

/// `v` as a message shows it (`short`), or `(sensitive)`.
pub(super) fn shown(v: &Value, hidden: bool) -> String {
    if hidden {
        SENSITIVE.to_string()
    } else {
        short(v)
    }
}

/// A key as a message quotes it (`` `db` ``), or `(sensitive)`.
pub(super) fn quoted(k: &impl std::fmt::Display, hidden: bool) -> String {
    if hidden {
        SENSITIVE.to_string()
    } else {
        format!("`{k}`")
    }
}

/// `v` written out whole (`4242`), or `(sensitive)`.
pub(super) fn written(v: &impl std::fmt::Display, hidden: bool) -> String {
    if hidden {
        SENSITIVE.to_string()
    } else {
        v.to_string()
    }
}

impl Eval<'_> {
    /// Whether nothing evaluated here can be sensitive (the common case, decided
    /// without looking at the expression).
    fn nothing_hidden(&self) -> bool {
        !self.hide_all && self.scope.sensitive.is_empty() && !self.bound.iter().any(|b| b.sensitive)
    }

    /// Whether the value read by `root.attr` is sensitive here.
    fn reads(&self, root: &str, attr: Option<&str>) -> bool {
        let bound = |name: &str| {
            self.bound
                .iter()
                .rev()
                .find(|b| b.name == name)
                .map(|b| b.sensitive)
        };
        self.hide_all || reads_sensitive(root, attr, self.scope, &bound)
    }

    /// Whether the value of `e` is sensitive here.
    pub(super) fn hides(&self, e: &Expression) -> bool {
        if self.nothing_hidden() {
            return false;
        }
        self.hide_all
            || names_in(e)
                .iter()
                .any(|n| self.reads(&n.root, n.attr.as_deref()))
    }

    /// Whether the value a traversal starts from (`var.NAME`, `f(x)` in
    /// `f(x)[0]`) is sensitive here; its keys and indices are not looked at.
    pub(super) fn hides_root(&self, t: &Traversal) -> bool {
        if self.nothing_hidden() {
            return false;
        }
        let Expression::Variable(root) = &t.expr else {
            return self.hides(&t.expr);
        };
        self.reads(root.as_str(), first_attr(t))
    }

    /// The value of `e` as a message shows it: [`shown`].
    pub(super) fn show(&self, e: &Expression, v: &Value) -> String {
        shown(v, self.hides(e))
    }
}

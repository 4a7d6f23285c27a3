//! References found in expressions, checked against what is declared, and
//! evaluation with located diagnostics.

use super::decl::{Loader, INSTANCE_TYPE_DATA};
use super::eval::{Eval, Fail};
use super::scope::Scope;
use crate::diag::{nearest, suggest, Diagnostic};
use crate::funcs;
use gpushare_core::{ResourceKind, SourceLoc};
use hcl::edit::expr::{Expression, Traversal, TraversalOperator};
use hcl::edit::visit::{self, Visit};
use hcl::edit::Span;
use serde_json::Value;
use std::collections::BTreeSet;
use std::ops::Range;

/// A reference found in an expression: root variable and the attribute names after it.
pub(super) struct Ref {
    pub(super) root: String,
    pub(super) attrs: Vec<String>,
    pub(super) span: Option<Range<usize>>,
}

#[derive(Default)]
struct RefCollector {
    refs: Vec<Ref>,
}

impl Visit for RefCollector {
    fn visit_traversal(&mut self, node: &Traversal) {
        if let Expression::Variable(v) = &node.expr {
            let mut attrs = vec![];
            for op in &node.operators {
                match &**op {
                    TraversalOperator::GetAttr(a) => attrs.push(a.as_str().to_string()),
                    _ => break,
                }
            }
            self.refs.push(Ref {
                root: v.as_str().to_string(),
                attrs,
                span: node.span(),
            });
        }
        visit::visit_traversal(self, node);
    }
}

/// The names of a kind nothing is declared of.
static NO_NAMES: BTreeSet<String> = BTreeSet::new();

pub(super) fn refs_of(expr: &Expression) -> Vec<Ref> {
    let mut c = RefCollector::default();
    c.visit_expr(expr);
    c.refs
}

impl<'a> Loader<'a> {
    /// Checks the references of `expr` against what is declared; reports bad ones.
    pub(super) fn check_refs(&mut self, fi: usize, expr: &Expression, scope: &Scope) -> bool {
        let file = self.file(fi);
        let mut ok = true;
        for r in refs_of(expr) {
            let loc = file.loc(r.span.clone());
            if r.root == "data" {
                ok &= self.check_data_ref(&r, loc, scope);
                continue;
            }
            let Some((what, known)) = self.ref_target(&r, &loc, scope, &mut ok) else {
                continue;
            };
            ok &= self.check_ref_name(&r, &what, &known, loc);
        }
        ok
    }

    /// `data.TYPE.LABEL`: only `data.gpushare_instance_type` blocks declared here.
    fn check_data_ref(&mut self, r: &Ref, loc: Option<SourceLoc>, scope: &Scope) -> bool {
        let ty = r.attrs.first().map(String::as_str).unwrap_or("");
        let label = r.attrs.get(1).map(String::as_str).unwrap_or("");
        if ty != INSTANCE_TYPE_DATA {
            self.err(
                Diagnostic::error(format!("data source `data.{ty}` cannot be read here"))
                    .at(loc)
                    .detail(format!("gpushare reads only data.{INSTANCE_TYPE_DATA} (the built-in catalogue) outside Terraform"))
                    .hint("use a literal or a variable instead"),
            );
            return false;
        }
        if !scope.data_labels.contains(label) {
            self.err(
                Diagnostic::error(format!(
                    "bad reference `data.{ty}.{label}`: no such data block"
                ))
                .at(loc)
                .maybe_hint(suggest(label, scope.data_labels.iter().map(String::as_str))),
            );
            return false;
        }
        true
    }

    /// What the root of `r` names (`variable`, `local value`, a resource kind)
    /// and the sets of names it may be followed by (borrowed: configurations can
    /// hold thousands); `None` where there is nothing to check further (reported,
    /// or left to evaluation). A bad reference clears `ok`.
    fn ref_target<'s>(
        &mut self,
        r: &Ref,
        loc: &Option<SourceLoc>,
        scope: &'s Scope,
        ok: &mut bool,
    ) -> Option<(String, Vec<&'s BTreeSet<String>>)> {
        match r.root.as_str() {
            "var" => Some(("variable".into(), vec![&scope.declared_vars])),
            "local" => Some(("local value".into(), vec![&scope.declared_locals])),
            root => {
                if let Some(kind) = ResourceKind::parse(root) {
                    // Resolved Terraform names are in `names` too.
                    let names = vec![scope.names.get(&kind).unwrap_or(&NO_NAMES)];
                    if let Some(extra) = r.attrs.get(1) {
                        *ok = false;
                        self.err(
                            Diagnostic::error(format!("unsupported reference `{root}.{}.{extra}`", r.attrs[0]))
                                .at(loc.clone())
                                .detail(format!("`{root}.{}` evaluates to the resource's name; its attributes cannot be referenced", r.attrs[0]))
                                .hint(format!("write `{root}.{}`", r.attrs[0])),
                        );
                        return None;
                    }
                    Some((kind.as_str().to_string(), names))
                } else if let Some(kind) =
                    root.strip_prefix("gpushare_").and_then(ResourceKind::parse)
                {
                    Some(self.tf_resource_target(r, kind, loc, scope, ok))
                } else if root.starts_with("gpushare_") {
                    *ok = false;
                    let known: Vec<String> = ResourceKind::ALL
                        .iter()
                        .map(|k| k.terraform_type())
                        .collect();
                    self.err(
                        Diagnostic::error(format!("unknown resource type `{root}`"))
                            .at(loc.clone())
                            .maybe_hint(suggest(root, known.iter().map(String::as_str))),
                    );
                    None
                } else {
                    *ok &= self.check_unknown_root(r, loc);
                    None // left to evaluation (e.g. for-expression variables)
                }
            }
        }
    }

    /// A Terraform `gpushare_KIND.LABEL[.name|.id]` reference: what it names
    /// (labels, or names). Another attribute clears `ok`.
    fn tf_resource_target<'s>(
        &mut self,
        r: &Ref,
        kind: ResourceKind,
        loc: &Option<SourceLoc>,
        scope: &'s Scope,
        ok: &mut bool,
    ) -> (String, Vec<&'s BTreeSet<String>>) {
        let root = r.root.as_str();
        let labels = vec![
            scope.tf_labels.get(&kind).unwrap_or(&NO_NAMES),
            scope.names.get(&kind).unwrap_or(&NO_NAMES),
        ];
        if let (Some(_), Some(attr)) = (r.attrs.first(), r.attrs.get(1)) {
            if attr != "name" && attr != "id" {
                *ok = false;
                self.err(
                    Diagnostic::error(format!("unsupported reference `{root}.{}.{attr}`", r.attrs[0]))
                        .at(loc.clone())
                        .detail("only the `name` and `id` of a gpushare resource can be referenced in configuration")
                        .hint(format!("use `{root}.{}.name`", r.attrs[0])),
                );
            }
        }
        (kind.terraform_type(), labels)
    }

    /// A reference whose root is no variable, local or resource kind: an error
    /// only where it looks like a misspelt one (`vr.x`); others are left to
    /// evaluation.
    fn check_unknown_root(&mut self, r: &Ref, loc: &Option<SourceLoc>) -> bool {
        let root = r.root.as_str();
        let roots = [
            "var",
            "local",
            "capacity_provider",
            "gpu_instance",
            "task_definition",
            "service",
        ];
        if r.attrs.is_empty() {
            return true;
        }
        let Some(n) = nearest(root, roots) else {
            return true;
        };
        self.err(
            Diagnostic::error(format!("unknown reference `{root}.{}`", r.attrs.join(".")))
                .at(loc.clone())
                .detail(format!(
                    "`{root}` is not a variable, local value or resource kind"
                ))
                .hint(format!("did you mean `{n}.{}`?", r.attrs.join("."))),
        );
        false
    }

    /// The name after the root of `r` (`var.NAME`): present and among `known`.
    fn check_ref_name(
        &mut self,
        r: &Ref,
        what: &str,
        known: &[&BTreeSet<String>],
        loc: Option<SourceLoc>,
    ) -> bool {
        let Some(first) = r.attrs.first().map(String::as_str) else {
            self.err(
                Diagnostic::error(format!("incomplete reference `{}`", r.root))
                    .at(loc)
                    .hint(format!("refer to one {what}: `{}.NAME`", r.root)),
            );
            return false;
        };
        if known.iter().any(|set| set.contains(first)) {
            return true;
        }
        let known: BTreeSet<&str> = known
            .iter()
            .flat_map(|set| set.iter().map(String::as_str))
            .collect();
        let (summary, hint) = if r.root == "var" {
            (
                format!("undefined variable `var.{first}`"),
                format!("declare it: variable \"{first}\" {{ default = ... }}"),
            )
        } else if r.root == "local" {
            (
                format!("undefined local value `local.{first}`"),
                format!("define it in a locals block: locals {{ {first} = ... }}"),
            )
        } else {
            (
                format!(
                    "bad reference `{}.{first}`: no {what} named \"{first}\"",
                    r.root
                ),
                format!("declare {what} \"{first}\" or refer to an existing one"),
            )
        };
        let detail = if known.is_empty() {
            format!("no {what} is declared")
        } else {
            let shown: Vec<&str> = known.iter().copied().take(12).collect();
            let more = known.len() - shown.len();
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            format!("declared: {}{more}", shown.join(", "))
        };
        let h = suggest(first, known.iter().copied()).unwrap_or(hint);
        self.err(Diagnostic::error(summary).at(loc).detail(detail).hint(h));
        false
    }

    /// Evaluates an expression (bounded: see `crate::limits`); reports a failure at
    /// the innermost expression at fault. `None`: failed (reported, or a failure
    /// of something it depends on that was reported before).
    pub(super) fn eval(&mut self, fi: usize, expr: &Expression, scope: &Scope) -> Option<Value> {
        self.eval_as(fi, expr, scope, false)
    }

    /// [`Loader::eval`]; `sensitive`: the value is sensitive as a whole (a
    /// sensitive variable's default), none of it is shown in the messages.
    pub(super) fn eval_as(
        &mut self,
        fi: usize,
        expr: &Expression,
        scope: &Scope,
        sensitive: bool,
    ) -> Option<Value> {
        let mut work = std::mem::take(&mut self.work);
        let r = Eval::new(scope, &mut work)
            .all_sensitive(sensitive)
            .eval(expr);
        self.work = work;
        let e = match r {
            Ok(v) => return Some(v),
            Err(e) => e,
        };
        let file = self.file(fi);
        let hint = match e.fail {
            Fail::Spent | Fail::Poisoned => return None,
            Fail::UndefinedFunc => format!("available functions: {}", funcs::NAMES.join(", ")),
            Fail::UndefinedVar => match expr {
                Expression::Variable(v) => {
                    let v = v.as_str();
                    format!("to write a string, quote it: \"{v}\"; to refer to a resource, write KIND.{v} (e.g. task_definition.{v})")
                }
                _ => "refer to values as var.NAME, local.NAME or KIND.NAME (e.g. task_definition.embedder)".to_string(),
            },
            Fail::Limit => "configurations are bounded (see gpushare_config::limits); compute smaller values".to_string(),
            Fail::Plain => "check the expression's operands and types".to_string(),
        };
        let summary = if e.fail == Fail::Limit {
            "evaluation limit reached"
        } else {
            "cannot evaluate expression"
        };
        self.err(
            Diagnostic::error(summary)
                .at(file.loc(e.span.or_else(|| expr.span())))
                .detail(e.msg)
                .hint(hint),
        );
        None
    }
}

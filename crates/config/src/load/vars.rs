//! Variables, locals and the `name` of Terraform resources.

use super::decl::{Decl, Loader, LocalDecl, VarDecl, INSTANCE_TYPE_DATA};
use super::eval::Eval;
use super::expr::refs_of;
use super::scope::Scope;
use super::tfvars::Assigned;
use crate::check::{self, Quote};
use crate::diag::{suggest, Diagnostic};
use gpushare_core::catalog;
use gpushare_core::schema::AttrType;
use gpushare_core::ResourceKind;
use hcl::edit::expr::Expression;
use hcl::edit::structure::Structure;
use hcl::edit::Span;
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};

/// A value evaluated in dependency order with the others.
enum Item<'b> {
    Local(&'b str),
    TfName(ResourceKind, &'b str),
    Data(&'b str),
}

/// An item still to evaluate: its expression and the `(root, attribute)` pairs it refers to.
struct Pending<'b> {
    item: Item<'b>,
    file: usize,
    expr: &'b Expression,
    deps: Vec<(String, String)>,
}

/// The `(root, first attribute)` pairs `expr` refers to.
fn deps_of(expr: &Expression) -> Vec<(String, String)> {
    refs_of(expr)
        .into_iter()
        .filter_map(|r| r.attrs.first().map(|a| (r.root.clone(), a.clone())))
        .collect()
}

/// What a reference to `item` is written as: `(root, first attribute)`.
fn key_of(item: &Item<'_>) -> (String, String) {
    match item {
        Item::Local(n) => ("local".into(), n.to_string()),
        Item::TfName(k, l) => (k.terraform_type(), l.to_string()),
        Item::Data(_) => ("data".into(), INSTANCE_TYPE_DATA.into()),
    }
}

/// The order to evaluate `pending` in (Kahn's algorithm): each item after
/// everything it refers to. Those left out are in or behind a cycle.
fn dependency_order(pending: &[Pending<'_>]) -> Vec<usize> {
    let mut providers: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for (i, p) in pending.iter().enumerate() {
        providers.entry(key_of(&p.item)).or_default().push(i);
    }
    let mut waiting_on = vec![0usize; pending.len()];
    let mut dependants: Vec<Vec<usize>> = vec![vec![]; pending.len()];
    for (i, p) in pending.iter().enumerate() {
        let mut deps: Vec<usize> = p
            .deps
            .iter()
            .filter_map(|d| providers.get(d))
            .flatten()
            .copied()
            .collect();
        deps.sort_unstable();
        deps.dedup();
        waiting_on[i] = deps.len();
        for d in deps {
            dependants[d].push(i);
        }
    }
    let mut ready: VecDeque<usize> = (0..pending.len()).filter(|&i| waiting_on[i] == 0).collect();
    let mut order = vec![];
    while let Some(i) = ready.pop_front() {
        order.push(i);
        for &d in &dependants[i] {
            waiting_on[d] -= 1;
            if waiting_on[d] == 0 {
                ready.push_back(d);
            }
        }
    }
    order
}

/// Whether a variable's value is a list or map (by its type, or else its
/// default), so that a value given as text is parsed as HCL.
fn is_complex(ty: &Option<AttrType>, default: Option<&Value>) -> bool {
    match ty {
        Some(AttrType::List(_) | AttrType::Map(_)) => true,
        Some(_) => false,
        None => matches!(default, Some(Value::Array(_) | Value::Object(_))),
    }
}

impl<'a> Loader<'a> {
    /// Evaluates every declared variable into `scope.vars`: from `-var`, else a
    /// variable definition file, else `GPUSHARE_VAR_<name>`, else its default;
    /// converted to its declared type.
    pub(super) fn eval_variables(
        &mut self,
        vars: &BTreeMap<String, VarDecl<'a>>,
        scope: &mut Scope,
    ) {
        let overrides = self.var_overrides(vars);
        let assigned = std::mem::take(&mut self.assigned);
        let from_files = self.var_file_values(vars, &assigned);
        for (name, decl) in vars {
            if let Some(value) = self.eval_variable(name, decl, &overrides, &from_files, scope) {
                scope.vars.insert(name.clone(), value);
            }
        }
        self.assigned = assigned;
    }

    /// The `-var` values by variable (a later one wins); one for an undeclared
    /// variable is an error.
    fn var_overrides(
        &mut self,
        vars: &BTreeMap<String, VarDecl<'a>>,
    ) -> BTreeMap<&'a str, &'a str> {
        let mut overrides = BTreeMap::new();
        let opts = self.opts;
        for (k, v) in &opts.vars {
            if !vars.contains_key(k.as_str()) {
                // A near name is the likelier fix; else, declaring it (issue 45 item 5:
                // the did-you-mean was overwritten by the second hint).
                let hint = suggest(k, vars.keys().map(String::as_str))
                    .unwrap_or_else(|| format!("declare it: variable \"{k}\" {{}}"));
                self.err(
                    Diagnostic::error(format!("-var sets an undeclared variable `{k}`"))
                        .path(format!("-var {k}"))
                        .detail("a -var value needs a `variable` block of the same name")
                        .hint(hint),
                );
                continue;
            }
            overrides.insert(k.as_str(), v.as_str());
        }
        overrides
    }

    /// The values of variable definition files by variable, lowest precedence
    /// first (a later one wins); one for an undeclared variable is a warning.
    fn var_file_values<'v>(
        &mut self,
        vars: &BTreeMap<String, VarDecl<'a>>,
        assigned: &'v [Assigned],
    ) -> BTreeMap<&'v str, &'v Assigned> {
        let mut from_files = BTreeMap::new();
        for a in assigned {
            if !vars.contains_key(a.name.as_str()) {
                // As Terraform: a warning, since one file often serves several configurations.
                self.err(
                    Diagnostic::warning(format!(
                        "a variable file sets an undeclared variable `{}`",
                        a.name
                    ))
                    .at(a.loc.clone())
                    .path(a.origin.clone())
                    .detail("the value is ignored: no `variable` block of that name")
                    .maybe_hint(suggest(&a.name, vars.keys().map(String::as_str))),
                );
                continue;
            }
            from_files.insert(a.name.as_str(), a);
        }
        from_files
    }

    /// One variable's value, or `None` (reported).
    fn eval_variable(
        &mut self,
        name: &str,
        decl: &VarDecl<'a>,
        overrides: &BTreeMap<&str, &str>,
        from_files: &BTreeMap<&str, &Assigned>,
        scope: &Scope,
    ) -> Option<Value> {
        let sensitive = super::sensitive::declared_sensitive(decl);
        let (default, ty) = self.var_attributes(name, decl);
        let default_value = match default {
            Some(expr) => Some(self.var_default(name, decl, expr, scope, sensitive)?),
            None => None,
        };
        let env_value = if self.opts.read_env {
            std::env::var(format!("GPUSHARE_VAR_{name}")).ok()
        } else {
            None
        };
        let from_file = from_files.get(name).copied();
        let (raw, origin) = match (overrides.get(name), from_file, env_value) {
            (Some(v), _, _) => (Some(v.to_string()), format!("-var {name}")),
            (None, Some(a), _) => (None, a.origin.clone()),
            (None, None, Some(v)) => (Some(v), format!("GPUSHARE_VAR_{name}")),
            (None, None, None) => (None, String::new()),
        };
        // A value from a file is typed already; only its conversion is checked below.
        let file_value = from_file.filter(|_| raw.is_none()).map(|a| a.value.clone());
        let value_loc = match from_file {
            Some(a) if raw.is_none() => a.loc.clone(),
            _ => decl.loc.clone(),
        };
        let value = match raw {
            Some(text) if is_complex(&ty, default_value.as_ref()) => {
                self.parse_var_value(name, &text, &origin, scope, sensitive)?
            }
            Some(text) => Value::String(text),
            None if file_value.is_some() => file_value.unwrap_or(Value::Null),
            None => match default_value {
                Some(v) => v,
                None => {
                    self.err(
                        Diagnostic::error(format!("no value for variable \"{name}\""))
                            .at(decl.loc.clone())
                            .detail("the variable has no default and was not set")
                            .hint(format!("set it with -var {name}=VALUE or GPUSHARE_VAR_{name}, or give it a default")),
                    );
                    return None;
                }
            },
        };
        let Some(t) = &ty else {
            return Some(value);
        };
        match check::convert(&value, t, Quote::sensitive_if(sensitive)) {
            Ok(v) => Some(v),
            Err(e) => {
                self.err(
                    Diagnostic::error(format!("invalid value for variable \"{name}\""))
                        .at(value_loc)
                        .detail(e)
                        .hint(format!(
                            "the variable is declared with type = {t}{}",
                            if origin.is_empty() {
                                String::new()
                            } else {
                                format!(" (value from {origin})")
                            }
                        )),
                );
                None
            }
        }
    }

    /// A variable block's `default` and `type` (`None` for `any`, and in .tf
    /// files for object and tuple types); unknown attributes and blocks are
    /// reported in gpushare HCL.
    fn var_attributes(
        &mut self,
        name: &str,
        decl: &VarDecl<'a>,
    ) -> (Option<&'a Expression>, Option<AttrType>) {
        let file = self.file(decl.file);
        let mut default: Option<&'a Expression> = None;
        let mut ty: Option<AttrType> = None;
        for st in decl.block.body.iter() {
            match st {
                Structure::Attribute(a) => match a.key.as_str() {
                    "default" => default = Some(&a.value),
                    "type" => {
                        let text = a
                            .value
                            .span()
                            .and_then(|s| file.text.get(s))
                            .unwrap_or("")
                            .trim();
                        if text == "any" {
                            continue;
                        }
                        // set(T) holds what list(T) holds once converted.
                        let text = text
                            .strip_prefix("set(")
                            .map_or_else(|| text.to_string(), |r| format!("list({r}"));
                        match AttrType::parse(&text) {
                            Some(t) => ty = Some(t),
                            // Terraform's object and tuple types: taken as `any` in .tf files.
                            None if file.tf => {}
                            None => self.err(
                                Diagnostic::error(format!(
                                    "unsupported type `{text}` for variable \"{name}\""
                                ))
                                .at(file.loc(a.value.span()))
                                .hint("use string, number, bool, list(string), map(string) or any"),
                            ),
                        }
                    }
                    "description" | "sensitive" | "nullable" => {}
                    other if !file.tf => self.err(
                        Diagnostic::error(format!(
                            "unknown attribute `{other}` in variable \"{name}\""
                        ))
                        .at(file.loc(a.key.span()))
                        .detail("a variable takes: default, type, description, sensitive, nullable")
                        .maybe_hint(suggest(
                            other,
                            ["default", "type", "description", "sensitive", "nullable"],
                        )),
                    ),
                    _ => {}
                },
                Structure::Block(b) if !file.tf => self.err(
                    Diagnostic::error(format!(
                        "unexpected block `{}` in variable \"{name}\"",
                        b.ident.as_str()
                    ))
                    .at(file.loc(b.ident.span()))
                    .hint("a variable takes the attributes default, type and description"),
                ),
                Structure::Block(_) => {}
            }
        }
        (default, ty)
    }

    /// A variable's default, a constant: `None` (reported) where it refers to
    /// anything or fails to evaluate.
    fn var_default(
        &mut self,
        name: &str,
        decl: &VarDecl<'a>,
        expr: &Expression,
        scope: &Scope,
        sensitive: bool,
    ) -> Option<Value> {
        let file = self.file(decl.file);
        if let Some(r) = refs_of(expr).first() {
            self.err(
                Diagnostic::error(format!("the default of variable \"{name}\" refers to `{}`", r.root))
                    .at(file.loc(r.span.clone()))
                    .hint("a variable default must be a constant; use a `locals` value to compute from other values"),
            );
            return None;
        }
        self.eval_as(decl.file, expr, scope, sensitive)
    }

    /// A list or map value given as text (`-var`, `GPUSHARE_VAR_<name>`), read
    /// as an HCL expression; `None` (reported) where it is not one.
    fn parse_var_value(
        &mut self,
        name: &str,
        text: &str,
        origin: &str,
        scope: &Scope,
        sensitive: bool,
    ) -> Option<Value> {
        let shown = |detail: String| {
            if sensitive {
                super::sensitive::SENSITIVE_DETAIL.to_string()
            } else {
                detail
            }
        };
        if let Err(r) = crate::limits::prescan(text) {
            self.err(
                Diagnostic::error(format!("invalid value for variable \"{name}\""))
                    .path(origin)
                    .detail(shown(format!("{}: {}", r.summary, r.detail)))
                    .hint(r.hint),
            );
            return None;
        }
        match hcl::edit::parser::parse_expr(text) {
            Ok(e) => {
                let mut work = std::mem::take(&mut self.work);
                let r = Eval::new(scope, &mut work)
                    .all_sensitive(sensitive)
                    .eval(&e);
                self.work = work;
                match r {
                    Ok(v) => Some(v),
                    Err(err) => {
                        self.err(
                            Diagnostic::error(format!("invalid value for variable \"{name}\""))
                                .path(origin)
                                .detail(err.msg),
                        );
                        None
                    }
                }
            }
            Err(err) => {
                self.err(
                    Diagnostic::error(format!("invalid value for variable \"{name}\""))
                        .path(origin)
                        .detail(shown(err.message().to_string()))
                        .hint("a list or map value is written in HCL syntax, e.g. [\"a\", \"b\"] or {k = \"v\"}"),
                );
                None
            }
        }
    }

    /// Locals and the `name` of Terraform resources may depend on each other: evaluate
    /// in dependency order, each after everything it refers to; what is left is
    /// reported as a cycle.
    pub(super) fn eval_locals_and_tf_names<'b>(
        &mut self,
        locals: &'b BTreeMap<String, LocalDecl<'a>>,
        decls: &'b [Decl<'a>],
        scope: &mut Scope,
    ) {
        let pending = self.pending_values(locals, decls);
        let mut done = vec![false; pending.len()];
        for i in dependency_order(&pending) {
            done[i] = true;
            let p = &pending[i];
            let v = if self.check_name_sensitive(p, scope) && self.check_refs(p.file, p.expr, scope)
            {
                self.eval(p.file, p.expr, scope)
            } else {
                None
            };
            self.record_value(p, v.as_ref(), scope);
        }
        for p in pending
            .iter()
            .zip(&done)
            .filter(|(_, d)| !**d)
            .map(|(p, _)| p)
        {
            let what = match p.item {
                Item::Local(n) => format!("local.{n}"),
                Item::TfName(k, l) => format!("{}.{l}.name", k.terraform_type()),
                Item::Data(l) => format!("data.{INSTANCE_TYPE_DATA}.{l}.name"),
            };
            self.err(
                Diagnostic::error(format!("{what} depends on itself"))
                    .at(self.file(p.file).loc(p.expr.span()))
                    .detail("the values form a cycle of references")
                    .hint("break the cycle: compute one of the values from constants or variables"),
            );
        }
    }

    /// A Terraform resource's or data lookup's `name` is shown by plan: like any
    /// attribute but `secret_env`, it may not hold a sensitive value (reported).
    fn check_name_sensitive(&mut self, p: &Pending<'_>, scope: &Scope) -> bool {
        let path = match p.item {
            Item::Local(_) => return true,
            Item::TfName(k, l) => format!("{}.{l}", k.terraform_type()),
            Item::Data(l) => format!("data.{INSTANCE_TYPE_DATA}.{l}"),
        };
        self.check_sensitive(p.file, "name", p.expr, &path, scope)
    }

    /// Every local, Terraform resource `name` and data lookup to evaluate, with
    /// what each refers to.
    fn pending_values<'b>(
        &self,
        locals: &'b BTreeMap<String, LocalDecl<'a>>,
        decls: &'b [Decl<'a>],
    ) -> Vec<Pending<'b>> {
        let mut pending: Vec<Pending<'b>> = vec![];
        for (name, l) in locals {
            pending.push(Pending {
                item: Item::Local(name),
                file: l.file,
                expr: l.expr,
                deps: deps_of(l.expr),
            });
        }
        for d in decls {
            if let Some(e) = d.name_expr {
                pending.push(Pending {
                    item: Item::TfName(d.kind, &d.label),
                    file: d.file,
                    expr: e,
                    deps: deps_of(e),
                });
            }
        }
        for d in self.data.iter().copied() {
            pending.push(Pending {
                item: Item::Data(d.label),
                file: d.file,
                expr: d.name_expr,
                deps: deps_of(d.name_expr),
            });
        }
        pending
    }

    /// Records the value of `p` (`None`: its evaluation failed, reported) in `scope`.
    fn record_value(&mut self, p: &Pending<'_>, v: Option<&Value>, scope: &mut Scope) {
        match (&p.item, v) {
            (Item::Local(n), Some(v)) => {
                scope.locals.insert(n.to_string(), v.clone());
            }
            (Item::TfName(k, label), Some(v)) => match v.as_str() {
                Some(s) => {
                    scope
                        .tf_names
                        .entry(*k)
                        .or_default()
                        .insert(label.to_string(), s.to_string());
                    scope.names.entry(*k).or_default().insert(s.to_string());
                }
                None => self.err(
                    Diagnostic::error(format!(
                        "invalid value for `name` of {}.{label}",
                        k.terraform_type()
                    ))
                    .at(self.file(p.file).loc(p.expr.span()))
                    .detail(format!("expected a string, got {}", check::describe(v)))
                    .hint("the name is a string, e.g. name = \"embedder\""),
                ),
            },
            // A failed evaluation was reported; mark it resolved so dependants report their own errors.
            (Item::Local(n), None) => {
                scope.failed_locals.insert(n.to_string());
            }
            (Item::Data(label), Some(v)) => self.record_instance_type(p, label, v, scope),
            (Item::TfName(..) | Item::Data(_), None) => {}
        }
    }

    /// `data.gpushare_instance_type.LABEL`: the catalogue entry named `v`.
    fn record_instance_type(&mut self, p: &Pending<'_>, label: &str, v: &Value, scope: &mut Scope) {
        match catalog::require(&v.as_str().map_or_else(|| v.to_string(), str::to_string)) {
            Ok(t) => {
                let mut attrs = serde_json::to_value(t).unwrap_or(Value::Null);
                if let Value::Object(m) = &mut attrs {
                    m.insert("id".into(), Value::String(t.name.to_string()));
                }
                scope.data_instance_types.insert(label.to_string(), attrs);
            }
            Err(catalog::UnknownInstanceType { name, close }) => {
                self.err(
                    Diagnostic::error(format!("unknown instance type `{name}`"))
                        .at(self.file(p.file).loc(p.expr.span()))
                        .path(format!("data.{INSTANCE_TYPE_DATA}.{label}.name"))
                        .detail(format!("close matches: {}", close.join(", ")))
                        .hint("use an EC2 NVIDIA GPU instance type from the built-in catalogue"),
                );
            }
        }
    }
}

//! Bounded evaluation of expressions (as parsed by hcl-edit, spans kept) into
//! JSON values: checked arithmetic, and the limits of `crate::limits` on depth,
//! value size and the work of one load. hcl-rs's evaluator is not used: its
//! number code panics on `5 % 0` and overflows, and nothing bounds its values.
//!
//! Here: the evaluator, its errors and the dispatch over expression kinds. Along
//! its seams:
//! - `budget`: the work budget of one load and the size limits on values;
//! - `arith`: unary and binary operators, checked;
//! - `refs`: variables, locals, data sources and resource names, and traversals;
//! - `call`: function calls;
//! - `for_expr`: for expressions;
//! - `template`: string templates and heredocs, with their strip markers;
//! - `hidden`: which values are sensitive, shown as `(sensitive)` in messages.

use super::scope::Scope;
use crate::limits::{MAX_ELEMENTS, MAX_EVAL_DEPTH};
use hcl::edit::expr::{Expression, ObjectKey};
use hcl::edit::Span;
use serde_json::{Map, Number, Value};
use std::ops::Range;

mod arith;
mod budget;
mod call;
mod for_expr;
mod hidden;
mod refs;
mod template;

/// What kind of failure, for the hint and for whether it is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fail {
    Plain,
    UndefinedFunc,
    UndefinedVar,
    /// A limit of `crate::limits` was reached.
    Limit,
    /// The work budget of the load was spent earlier (reported then).
    Spent,
    /// A value it depends on failed (reported then).
    Poisoned,
}

#[derive(Debug)]
pub(super) struct EvalError {
    pub(super) fail: Fail,
    pub(super) msg: String,
    /// The innermost expression at fault, where known.
    pub(super) span: Option<Range<usize>>,
}

/// Evaluation work done in one load.
#[derive(Debug, Default)]
pub(super) struct Work {
    pub(super) used: u64,
}

type R<T> = Result<T, EvalError>;

fn err(fail: Fail, msg: impl Into<String>, span: Option<Range<usize>>) -> EvalError {
    EvalError {
        fail,
        msg: msg.into(),
        span,
    }
}

pub(super) use hidden::{first_sensitive, names_in, reads_sensitive, Name};

/// A for-expression variable and its value.
struct Bound {
    name: String,
    value: Value,
    /// It runs over a sensitive collection.
    sensitive: bool,
}

pub(super) struct Eval<'s> {
    scope: &'s Scope,
    work: &'s mut Work,
    /// For-expression variables, innermost last.
    bound: Vec<Bound>,
    depth: usize,
    /// Every value is sensitive: see `all_sensitive`.
    hide_all: bool,
}

impl<'s> Eval<'s> {
    pub(super) fn new(scope: &'s Scope, work: &'s mut Work) -> Self {
        Eval {
            scope,
            work,
            bound: vec![],
            depth: 0,
            hide_all: false,
        }
    }

    /// `all`: every value of this evaluation is sensitive (a sensitive
    /// variable's default or given text, a variable file's values); messages
    /// show none.
    pub(super) fn all_sensitive(mut self, all: bool) -> Self {
        self.hide_all = all;
        self
    }

    pub(super) fn eval(&mut self, expr: &Expression) -> R<Value> {
        let span = expr.span();
        self.charge(1, &span)?;
        if self.depth >= MAX_EVAL_DEPTH {
            return Err(err(
                Fail::Limit,
                format!("expressions nest more than {MAX_EVAL_DEPTH} levels deep"),
                span,
            ));
        }
        self.depth += 1;
        let r = self.eval_inner(expr, &span);
        self.depth -= 1;
        r
    }

    fn eval_inner(&mut self, expr: &Expression, span: &Option<Range<usize>>) -> R<Value> {
        match expr {
            Expression::Null(_) => Ok(Value::Null),
            Expression::Bool(b) => Ok(Value::Bool(*b.value())),
            Expression::Number(n) => {
                let n = n.value();
                let v = if let Some(i) = n.as_i64() {
                    Value::from(i)
                } else if let Some(u) = n.as_u64() {
                    Value::from(u)
                } else {
                    n.as_f64()
                        .and_then(Number::from_f64)
                        .map_or(Value::Null, Value::Number)
                };
                Ok(v)
            }
            Expression::String(s) => self.string(s.value().clone(), span),
            Expression::Array(a) => {
                let mut out = Vec::with_capacity(a.len().min(MAX_ELEMENTS));
                for e in a.iter() {
                    out.push(self.eval(e)?);
                }
                self.admit(Value::Array(out), span)
            }
            Expression::Object(o) => {
                let mut out = Map::new();
                for (k, v) in o.iter() {
                    let key = match k {
                        ObjectKey::Ident(i) => i.as_str().to_string(),
                        ObjectKey::Expression(e) => self.key(e)?,
                    };
                    let v = self.eval(v.expr())?;
                    out.insert(key, v);
                }
                self.admit(Value::Object(out), span)
            }
            Expression::StringTemplate(t) => self.template_value(t, span),
            Expression::HeredocTemplate(h) => self.template_value(&h.template, span),
            Expression::Parenthesis(p) => self.eval(p.inner()),
            Expression::Variable(v) => self.lookup(v.as_str(), &[], false, span),
            Expression::Traversal(t) => self.traversal(t, span),
            Expression::Conditional(c) => {
                if self.boolean(&c.cond_expr)? {
                    self.eval(&c.true_expr)
                } else {
                    self.eval(&c.false_expr)
                }
            }
            Expression::FuncCall(f) => self.call(f, span),
            Expression::UnaryOp(u) => self.unary(u, span),
            Expression::BinaryOp(_) => self.binary_chain(expr),
            Expression::ForExpr(f) => self.for_expr(f, span),
        }
    }

    fn boolean(&mut self, e: &Expression) -> R<bool> {
        match self.eval(e)? {
            Value::Bool(b) => Ok(b),
            other => Err(err(
                Fail::Plain,
                format!("expected a boolean, got {}", self.show(e, &other)),
                e.span(),
            )),
        }
    }

    fn key(&mut self, e: &Expression) -> R<String> {
        // An unquoted single word in key position is the key itself.
        if let Expression::Variable(v) = e {
            return Ok(v.as_str().to_string());
        }
        match self.eval(e)? {
            Value::String(s) => Ok(s),
            Value::Bool(b) => Ok(b.to_string()),
            Value::Number(n) => Ok(n.to_string()),
            other => Err(err(
                Fail::Plain,
                format!("a key must be a string, got {}", self.show(e, &other)),
                e.span(),
            )),
        }
    }
}

/// A value as shown in messages, cut short.
fn short(v: &Value) -> String {
    let s = match v {
        Value::Array(a) => return format!("a list of {}", a.len()),
        Value::Object(o) => return format!("a map of {}", o.len()),
        other => other.to_string(),
    };
    if s.len() > 40 {
        let cut: String = s.chars().take(37).collect();
        format!("`{cut}...`")
    } else {
        format!("`{s}`")
    }
}

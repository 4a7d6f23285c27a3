//! Bounded evaluation of expressions (as parsed by hcl-edit, spans kept) into
//! JSON values: checked arithmetic, and the limits of `crate::limits` on depth,
//! value size and the work of one load. hcl-rs's evaluator is not used: its
//! number code panics on `5 % 0` and overflows, and nothing bounds its values.

use super::decl::INSTANCE_TYPE_DATA;
use super::scope::Scope;
use crate::funcs;
use crate::limits::{
    MAX_ELEMENTS, MAX_EVAL_DEPTH, MAX_EVAL_WORK, MAX_STRING_BYTES, MAX_VALUE_BYTES, MAX_VALUE_DEPTH,
};
use gpushare_core::ResourceKind;
use hcl::edit::expr::{BinaryOperator, Expression, ObjectKey, TraversalOperator, UnaryOperator};
use hcl::edit::template::{Directive, Element, Strip, Template};
use hcl::edit::Span;
use serde_json::{Map, Number, Value};
use std::ops::Range;

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

/// Elements, bytes and depth of a value (depth counted to `MAX_VALUE_DEPTH + 1` at most).
fn measure(v: &Value, depth: usize, acc: &mut (usize, usize, usize)) {
    acc.0 += 1;
    acc.2 = acc.2.max(depth);
    if depth > MAX_VALUE_DEPTH {
        return;
    }
    match v {
        Value::String(s) => acc.1 += s.len(),
        Value::Array(a) => a.iter().for_each(|x| measure(x, depth + 1, acc)),
        Value::Object(o) => o.iter().for_each(|(k, x)| {
            acc.1 += k.len();
            measure(x, depth + 1, acc)
        }),
        _ => {}
    }
}

pub(super) struct Eval<'s> {
    scope: &'s Scope,
    work: &'s mut Work,
    /// For-expression variables, innermost last.
    bound: Vec<(String, Value)>,
    depth: usize,
}

impl<'s> Eval<'s> {
    pub(super) fn new(scope: &'s Scope, work: &'s mut Work) -> Self {
        Eval {
            scope,
            work,
            bound: vec![],
            depth: 0,
        }
    }

    fn charge(&mut self, steps: u64, span: &Option<Range<usize>>) -> R<()> {
        if self.work.used > MAX_EVAL_WORK {
            return Err(err(Fail::Spent, "evaluation budget spent", span.clone()));
        }
        self.work.used += steps;
        if self.work.used > MAX_EVAL_WORK {
            return Err(err(
                Fail::Limit,
                format!("the configuration takes more than {MAX_EVAL_WORK} evaluation steps"),
                span.clone(),
            ));
        }
        Ok(())
    }

    /// Checks a value against the size limits and charges for it.
    fn admit(&mut self, v: Value, span: &Option<Range<usize>>) -> R<Value> {
        let mut m = (0, 0, 0);
        measure(&v, 0, &mut m);
        let (elements, bytes, depth) = m;
        self.charge((elements + bytes / 64) as u64, span)?;
        let limit = |msg: String| Err(err(Fail::Limit, msg, span.clone()));
        if let Value::String(s) = &v {
            if s.len() > MAX_STRING_BYTES {
                return limit(format!(
                    "a string of {} bytes is longer than the limit of {MAX_STRING_BYTES} bytes",
                    s.len()
                ));
            }
        }
        if elements > MAX_ELEMENTS {
            return limit(format!(
                "a value of {elements} elements is larger than the limit of {MAX_ELEMENTS}"
            ));
        }
        if bytes > MAX_VALUE_BYTES {
            return limit(format!(
                "a value holding {bytes} bytes of strings is larger than the limit of {MAX_VALUE_BYTES}"
            ));
        }
        if depth > MAX_VALUE_DEPTH {
            return limit(format!(
                "a value nests lists or maps more than {MAX_VALUE_DEPTH} levels deep"
            ));
        }
        Ok(v)
    }

    fn string(&mut self, s: String, span: &Option<Range<usize>>) -> R<Value> {
        self.charge(1 + s.len() as u64 / 64, span)?;
        if s.len() > MAX_STRING_BYTES {
            return Err(err(
                Fail::Limit,
                format!(
                    "a string of {} bytes is longer than the limit of {MAX_STRING_BYTES} bytes",
                    s.len()
                ),
                span.clone(),
            ));
        }
        Ok(Value::String(s))
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
            Expression::Variable(v) => self.lookup(v.as_str(), &[], span),
            Expression::Traversal(t) => {
                let mut rest = &t.operators[..];
                let mut v = if let Expression::Variable(root) = &t.expr {
                    let mut attrs = vec![];
                    while let Some((op, tail)) = rest.split_first() {
                        match op.value() {
                            TraversalOperator::GetAttr(a) => attrs.push(a.as_str()),
                            _ => break,
                        }
                        rest = tail;
                    }
                    self.lookup(root.as_str(), &attrs, span)?
                } else {
                    self.eval(&t.expr)?
                };
                for (i, op) in rest.iter().enumerate() {
                    v = match op.value() {
                        TraversalOperator::GetAttr(a) => get_attr(v, a.as_str(), span)?,
                        TraversalOperator::LegacyIndex(n) => index(v, *n.value(), span)?,
                        TraversalOperator::Index(e) => match self.eval(e)? {
                            Value::String(k) => get_attr(v, &k, span)?,
                            Value::Number(n) => match n.as_u64() {
                                Some(n) => index(v, n, span)?,
                                None => {
                                    return Err(err(
                                        Fail::Plain,
                                        format!("index {n} is not a whole number of 0 or more"),
                                        e.span(),
                                    ))
                                }
                            },
                            other => {
                                return Err(err(
                                    Fail::Plain,
                                    format!("cannot index with {}", short(&other)),
                                    e.span(),
                                ))
                            }
                        },
                        TraversalOperator::AttrSplat(_) | TraversalOperator::FullSplat(_) => {
                            let items = match v {
                                Value::Array(a) => a,
                                Value::Null => vec![],
                                other => vec![other],
                            };
                            let tail = &rest[i + 1..];
                            let mut out = Vec::with_capacity(items.len());
                            for item in items {
                                let mut x = item;
                                for op in tail {
                                    x = match op.value() {
                                        TraversalOperator::GetAttr(a) => {
                                            get_attr(x, a.as_str(), span)?
                                        }
                                        TraversalOperator::LegacyIndex(n) => {
                                            index(x, *n.value(), span)?
                                        }
                                        _ => {
                                            return Err(err(
                                                Fail::Plain,
                                                "only attribute access may follow a splat",
                                                span.clone(),
                                            ))
                                        }
                                    };
                                }
                                out.push(x);
                            }
                            return self.admit(Value::Array(out), span);
                        }
                    };
                }
                Ok(v)
            }
            Expression::Conditional(c) => {
                if self.boolean(&c.cond_expr)? {
                    self.eval(&c.true_expr)
                } else {
                    self.eval(&c.false_expr)
                }
            }
            Expression::FuncCall(f) => {
                let name = f.name.name.as_str();
                if !f.name.namespace.is_empty() || !funcs::NAMES.contains(&name) {
                    let full = f
                        .name
                        .namespace
                        .iter()
                        .map(|n| n.as_str())
                        .chain([name])
                        .collect::<Vec<_>>()
                        .join("::");
                    return Err(err(
                        Fail::UndefinedFunc,
                        format!("undefined function `{full}`"),
                        span.clone(),
                    ));
                }
                let n = f.args.len();
                let mut args = Vec::with_capacity(n);
                for (i, a) in f.args.iter().enumerate() {
                    let v = self.eval(a)?;
                    if f.args.expand_final() && i + 1 == n {
                        match v {
                            Value::Array(items) => args.extend(items),
                            other => {
                                return Err(err(
                                    Fail::Plain,
                                    format!("`...` expands a list, got {}", short(&other)),
                                    a.span(),
                                ))
                            }
                        }
                    } else {
                        args.push(v);
                    }
                }
                // Arguments are admitted values: a result is at most their sum (plus a
                // format string), so the work of the call is bounded by the admit below.
                let v = funcs::call(name, args, MAX_STRING_BYTES).map_err(|m| {
                    err(
                        Fail::Plain,
                        format!("error calling function `{name}`: {m}"),
                        span.clone(),
                    )
                })?;
                self.admit(v, span)
            }
            Expression::UnaryOp(u) => {
                let v = self.eval(&u.expr)?;
                match (u.operator.value(), v) {
                    (UnaryOperator::Not, Value::Bool(b)) => Ok(Value::Bool(!b)),
                    (UnaryOperator::Neg, Value::Number(n)) => {
                        let r = match n.as_i64() {
                            Some(i) => i.checked_neg().map(Num::Int),
                            None => n.as_f64().map(|f| Num::Float(-f)),
                        };
                        r.and_then(Num::value).ok_or_else(|| {
                            err(Fail::Plain, format!("cannot negate {n}"), span.clone())
                        })
                    }
                    (op, v) => Err(err(
                        Fail::Plain,
                        format!(
                            "unary operator `{}` is not applicable to {}",
                            op.as_str(),
                            short(&v)
                        ),
                        span.clone(),
                    )),
                }
            }
            Expression::BinaryOp(_) => self.binary_chain(expr),
            Expression::ForExpr(f) => {
                let coll = self.eval(&f.intro.collection_expr)?;
                let pairs = pairs_of(coll, f.intro.collection_expr.span())?;
                let key_var = f.intro.key_var.as_ref().map(|k| k.as_str().to_string());
                let value_var = f.intro.value_var.as_str().to_string();
                let mut list = vec![];
                let mut map = Map::new();
                for (k, v) in pairs {
                    self.charge(1, span)?;
                    let mark = self.bound.len();
                    if let Some(kv) = &key_var {
                        self.bound.push((kv.clone(), k));
                    }
                    self.bound.push((value_var.clone(), v));
                    let r = self.for_item(f, &mut list, &mut map);
                    self.bound.truncate(mark);
                    r?;
                    if list.len() + map.len() > MAX_ELEMENTS {
                        return Err(err(
                            Fail::Limit,
                            format!("a for expression makes more than {MAX_ELEMENTS} elements"),
                            span.clone(),
                        ));
                    }
                }
                let v = if f.key_expr.is_some() {
                    Value::Object(map)
                } else {
                    Value::Array(list)
                };
                self.admit(v, span)
            }
        }
    }

    fn for_item(
        &mut self,
        f: &hcl::edit::expr::ForExpr,
        list: &mut Vec<Value>,
        map: &mut Map<String, Value>,
    ) -> R<()> {
        if let Some(c) = &f.cond {
            if !self.boolean(&c.expr)? {
                return Ok(());
            }
        }
        match &f.key_expr {
            Some(ke) => {
                let key = self.key(ke)?;
                let v = self.eval(&f.value_expr)?;
                if f.grouping {
                    if let Value::Array(a) = map.entry(key).or_insert_with(|| Value::Array(vec![]))
                    {
                        a.push(v);
                    }
                } else if map.contains_key(&key) {
                    return Err(err(
                        Fail::Plain,
                        format!("key `{key}` already exists (use `...` to group values by key)"),
                        ke.span(),
                    ));
                } else {
                    map.insert(key, v);
                }
            }
            None => list.push(self.eval(&f.value_expr)?),
        }
        Ok(())
    }

    fn boolean(&mut self, e: &Expression) -> R<bool> {
        match self.eval(e)? {
            Value::Bool(b) => Ok(b),
            other => Err(err(
                Fail::Plain,
                format!("expected a boolean, got {}", short(&other)),
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
                format!("a key must be a string, got {}", short(&other)),
                e.span(),
            )),
        }
    }

    /// `a op b op c ...`: hcl-edit nests the chain to the right without precedence;
    /// evaluated here without recursion over its length, by precedence climbing.
    fn binary_chain(&mut self, expr: &Expression) -> R<Value> {
        let mut operands: Vec<&Expression> = vec![];
        let mut ops: Vec<(BinaryOperator, Option<Range<usize>>)> = vec![];
        let mut cur = expr;
        while let Expression::BinaryOp(b) = cur {
            operands.push(&b.lhs_expr);
            ops.push((*b.operator.value(), b.operator.span()));
            cur = &b.rhs_expr;
        }
        operands.push(cur);
        let mut values: Vec<Value> = vec![];
        let mut pending: Vec<(BinaryOperator, Option<Range<usize>>)> = vec![];
        values.push(self.eval(operands[0])?);
        for (i, (op, span)) in ops.into_iter().enumerate() {
            while pending
                .last()
                .is_some_and(|(p, _)| p.precedence() >= op.precedence())
            {
                self.reduce(&mut values, &mut pending)?;
            }
            pending.push((op, span));
            values.push(self.eval(operands[i + 1])?);
        }
        while !pending.is_empty() {
            self.reduce(&mut values, &mut pending)?;
        }
        values
            .pop()
            .ok_or_else(|| err(Fail::Plain, "empty operation", expr.span()))
    }

    fn reduce(
        &mut self,
        values: &mut Vec<Value>,
        pending: &mut Vec<(BinaryOperator, Option<Range<usize>>)>,
    ) -> R<()> {
        let (Some((op, span)), Some(rhs), Some(lhs)) = (pending.pop(), values.pop(), values.pop())
        else {
            return Err(err(Fail::Plain, "malformed operation", None));
        };
        self.charge(1, &span)?;
        values.push(binary(op, lhs, rhs, &span)?);
        Ok(())
    }

    fn template_value(&mut self, t: &Template, span: &Option<Range<usize>>) -> R<Value> {
        let elems: Vec<&Element> = t.iter().collect();
        if let [Element::Interpolation(i)] = elems[..] {
            return self.eval(&i.expr);
        }
        let mut out = String::new();
        self.template(&mut out, t, Strip::None, Strip::None, span)?;
        self.string(out, span)
    }

    fn template(
        &mut self,
        out: &mut String,
        t: &Template,
        prev_strip: Strip,
        next_strip: Strip,
        span: &Option<Range<usize>>,
    ) -> R<()> {
        let elems: Vec<&Element> = t.iter().collect();
        let n = elems.len();
        for (i, e) in elems.iter().enumerate() {
            let prev = if i == 0 {
                prev_strip
            } else {
                strip_of(elems[i - 1])
            };
            let next = if i + 1 == n {
                next_strip
            } else {
                strip_of(elems[i + 1])
            };
            match e {
                Element::Literal(l) => out.push_str(strip_literal(l.value(), prev, next)),
                Element::Interpolation(ip) => match self.eval(&ip.expr)? {
                    Value::String(s) => out.push_str(&s),
                    Value::Null => {
                        return Err(err(
                            Fail::Plain,
                            "cannot insert null into a string",
                            ip.expr.span(),
                        ))
                    }
                    v @ (Value::Array(_) | Value::Object(_)) => {
                        return Err(err(
                            Fail::Plain,
                            format!("cannot insert {} into a string", short(&v)),
                            ip.expr.span(),
                        ))
                    }
                    other => out.push_str(&other.to_string()),
                },
                Element::Directive(Directive::If(d)) => {
                    if self.boolean(&d.if_expr.cond_expr)? {
                        let next = match &d.else_expr {
                            Some(e) => e.strip,
                            None => d.endif_expr.strip,
                        };
                        self.template(out, &d.if_expr.template, d.if_expr.strip, next, span)?;
                    } else if let Some(e) = &d.else_expr {
                        self.template(out, &e.template, e.strip, d.endif_expr.strip, span)?;
                    }
                }
                Element::Directive(Directive::For(d)) => {
                    let fe = &d.for_expr;
                    let coll = self.eval(&fe.collection_expr)?;
                    let pairs = pairs_of(coll, fe.collection_expr.span())?;
                    for (k, v) in pairs {
                        let mark = self.bound.len();
                        if let Some(kv) = &fe.key_var {
                            self.bound.push((kv.as_str().to_string(), k));
                        }
                        self.bound.push((fe.value_var.as_str().to_string(), v));
                        let r =
                            self.template(out, &fe.template, fe.strip, d.endfor_expr.strip, span);
                        self.bound.truncate(mark);
                        r?;
                        if out.len() > MAX_STRING_BYTES {
                            break;
                        }
                    }
                }
            }
            self.charge(1, span)?;
            if out.len() > MAX_STRING_BYTES {
                return Err(err(
                    Fail::Limit,
                    format!("a string is longer than the limit of {MAX_STRING_BYTES} bytes"),
                    span.clone(),
                ));
            }
        }
        Ok(())
    }

    /// `root.a.b...`: looked up in place (no copy of the root object), then copied.
    fn lookup(&mut self, root: &str, attrs: &[&str], span: &Option<Range<usize>>) -> R<Value> {
        let missing = |what: String| Err(err(Fail::Plain, what, span.clone()));
        if let Some((_, v)) = self.bound.iter().rev().find(|(n, _)| n == root) {
            let v = descend(v, attrs, span)?.clone();
            return self.admit(v, span);
        }
        let s = self.scope;
        let (base, rest): (Value, &[&str]) = match root {
            "var" | "local" => {
                let map = if root == "var" { &s.vars } else { &s.locals };
                let Some((first, rest)) = attrs.split_first() else {
                    let all: Map<String, Value> =
                        map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                    return self.admit(Value::Object(all), span);
                };
                if root == "local" && s.failed_locals.contains(*first) {
                    return Err(err(Fail::Poisoned, "", span.clone()));
                }
                match map.get(*first) {
                    Some(v) => {
                        let v = descend(v, rest, span)?.clone();
                        return self.admit(v, span);
                    }
                    None => {
                        return Err(err(
                            Fail::UndefinedVar,
                            format!("undefined variable `{root}.{first}`"),
                            span.clone(),
                        ))
                    }
                }
            }
            "data" => match attrs {
                [INSTANCE_TYPE_DATA, label, rest @ ..] => match s.data_instance_types.get(*label) {
                    Some(v) => {
                        let v = descend(v, rest, span)?.clone();
                        return self.admit(v, span);
                    }
                    None => return missing(format!("no such key: `{label}`")),
                },
                _ => {
                    return missing(
                        "data sources are read as data.gpushare_instance_type.LABEL".into(),
                    )
                }
            },
            _ => {
                if let Some(kind) = ResourceKind::parse(root) {
                    let names = s.names.get(&kind);
                    match attrs.split_first() {
                        Some((first, rest)) if names.is_some_and(|n| n.contains(*first)) => {
                            (Value::String(first.to_string()), rest)
                        }
                        Some((first, _)) => return missing(format!("no such key: `{first}`")),
                        None => {
                            let all: Map<String, Value> = names
                                .into_iter()
                                .flatten()
                                .map(|n| (n.clone(), Value::String(n.clone())))
                                .collect();
                            (Value::Object(all), attrs)
                        }
                    }
                } else if let Some(kind) =
                    root.strip_prefix("gpushare_").and_then(ResourceKind::parse)
                {
                    let entry = |n: &str| serde_json::json!({ "name": n, "id": n });
                    match attrs.split_first() {
                        Some((first, rest)) => {
                            let name = s
                                .tf_names
                                .get(&kind)
                                .and_then(|m| m.get(*first))
                                .cloned()
                                .or_else(|| {
                                    s.names
                                        .get(&kind)
                                        .filter(|n| n.contains(*first))
                                        .map(|_| first.to_string())
                                });
                            match name {
                                Some(n) => (entry(&n), rest),
                                None => return missing(format!("no such key: `{first}`")),
                            }
                        }
                        None => {
                            let mut all = Map::new();
                            for n in s.names.get(&kind).into_iter().flatten() {
                                all.insert(n.clone(), entry(n));
                            }
                            for (l, n) in s.tf_names.get(&kind).into_iter().flatten() {
                                all.insert(l.clone(), entry(n));
                            }
                            (Value::Object(all), attrs)
                        }
                    }
                } else {
                    return Err(err(
                        Fail::UndefinedVar,
                        format!("undefined variable `{root}`"),
                        span.clone(),
                    ));
                }
            }
        };
        let v = descend(&base, rest, span)?.clone();
        self.admit(v, span)
    }
}

fn descend<'v>(mut v: &'v Value, attrs: &[&str], span: &Option<Range<usize>>) -> R<&'v Value> {
    for a in attrs {
        v = match v {
            Value::Object(m) => m
                .get(*a)
                .ok_or_else(|| err(Fail::Plain, format!("no such key: `{a}`"), span.clone()))?,
            other => {
                return Err(err(
                    Fail::Plain,
                    format!("cannot read attribute `{a}` of {}", short(other)),
                    span.clone(),
                ))
            }
        };
    }
    Ok(v)
}

fn get_attr(v: Value, a: &str, span: &Option<Range<usize>>) -> R<Value> {
    match v {
        Value::Object(mut m) => m
            .remove(a)
            .ok_or_else(|| err(Fail::Plain, format!("no such key: `{a}`"), span.clone())),
        other => Err(err(
            Fail::Plain,
            format!("cannot read attribute `{a}` of {}", short(&other)),
            span.clone(),
        )),
    }
}

fn index(v: Value, i: u64, span: &Option<Range<usize>>) -> R<Value> {
    match v {
        Value::Array(mut a) => {
            let n = a.len();
            usize::try_from(i)
                .ok()
                .filter(|&i| i < n)
                .map(|i| a.swap_remove(i))
                .ok_or_else(|| {
                    err(
                        Fail::Plain,
                        format!("index {i} out of range for a list of {n}"),
                        span.clone(),
                    )
                })
        }
        other => Err(err(
            Fail::Plain,
            format!("cannot index {}", short(&other)),
            span.clone(),
        )),
    }
}

fn pairs_of(v: Value, span: Option<Range<usize>>) -> R<Vec<(Value, Value)>> {
    match v {
        Value::Array(a) => Ok(a
            .into_iter()
            .enumerate()
            .map(|(i, v)| (Value::from(i), v))
            .collect()),
        Value::Object(o) => Ok(o.into_iter().map(|(k, v)| (Value::String(k), v)).collect()),
        other => Err(err(
            Fail::Plain,
            format!(
                "a for expression needs a list or map, got {}",
                short(&other)
            ),
            span,
        )),
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

fn strip_of(e: &Element) -> Strip {
    match e {
        Element::Literal(_) => Strip::None,
        Element::Interpolation(i) => i.strip,
        Element::Directive(Directive::If(d)) => Strip::from((
            d.if_expr.strip.strip_start(),
            d.endif_expr.strip.strip_end(),
        )),
        Element::Directive(Directive::For(d)) => Strip::from((
            d.for_expr.strip.strip_start(),
            d.endfor_expr.strip.strip_end(),
        )),
    }
}

fn strip_literal(mut literal: &str, prev: Strip, next: Strip) -> &str {
    let is_space = |c: char| c.is_whitespace() && c != '\r' && c != '\n';
    if prev.strip_end() {
        literal = literal.trim_start_matches(is_space);
        literal = literal
            .strip_prefix("\r\n")
            .or_else(|| literal.strip_prefix('\n'))
            .unwrap_or(literal);
    }
    if next.strip_start() {
        literal = literal.trim_end_matches(is_space);
        literal = literal
            .strip_suffix("\r\n")
            .or_else(|| literal.strip_suffix('\n'))
            .unwrap_or(literal);
    }
    literal
}

/// A number during arithmetic: integers stay exact while they fit in i64.
#[derive(Clone, Copy)]
enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    fn of(n: &Number) -> Option<Num> {
        match n.as_i64() {
            Some(i) => Some(Num::Int(i)),
            None => n.as_f64().map(Num::Float),
        }
    }
    fn f(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }
    /// The JSON number; `None` when not finite. Whole floats become integers (as in hcl).
    fn value(self) -> Option<Value> {
        match self {
            Num::Int(i) => Some(Value::from(i)),
            Num::Float(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15 => {
                Some(Value::from(f as i64))
            }
            Num::Float(f) => Number::from_f64(f).map(Value::Number),
        }
    }
}

/// One binary operation, checked: division and remainder by zero and overflow are errors.
fn binary(op: BinaryOperator, lhs: Value, rhs: Value, span: &Option<Range<usize>>) -> R<Value> {
    use BinaryOperator as B;
    let fail = |m: String| Err(err(Fail::Plain, m, span.clone()));
    match op {
        B::Eq => return Ok(Value::Bool(lhs == rhs)),
        B::NotEq => return Ok(Value::Bool(lhs != rhs)),
        B::And | B::Or => {
            return match (&lhs, &rhs) {
                (Value::Bool(a), Value::Bool(b)) => {
                    Ok(Value::Bool(if op == B::And { *a && *b } else { *a || *b }))
                }
                _ => fail(format!(
                    "operator `{}` needs two booleans, got {} and {}",
                    op.as_str(),
                    short(&lhs),
                    short(&rhs)
                )),
            }
        }
        _ => {}
    }
    let (Some(a), Some(b)) = (
        lhs.as_number().and_then(Num::of),
        rhs.as_number().and_then(Num::of),
    ) else {
        return fail(format!(
            "operator `{}` needs two numbers, got {} and {}",
            op.as_str(),
            short(&lhs),
            short(&rhs)
        ));
    };
    let cmp = |f: fn(f64, f64) -> bool, g: fn(i64, i64) -> bool| match (a, b) {
        (Num::Int(x), Num::Int(y)) => Value::Bool(g(x, y)),
        _ => Value::Bool(f(a.f(), b.f())),
    };
    let zero = |n: Num| match n {
        Num::Int(i) => i == 0,
        Num::Float(f) => f == 0.0,
    };
    let r = match op {
        B::Less => return Ok(cmp(|x, y| x < y, |x, y| x < y)),
        B::LessEq => return Ok(cmp(|x, y| x <= y, |x, y| x <= y)),
        B::Greater => return Ok(cmp(|x, y| x > y, |x, y| x > y)),
        B::GreaterEq => return Ok(cmp(|x, y| x >= y, |x, y| x >= y)),
        B::Div | B::Mod if zero(b) => {
            let what = if op == B::Div {
                "division"
            } else {
                "remainder"
            };
            return fail(format!("{what} by zero: `{lhs} {} {rhs}`", op.as_str()));
        }
        B::Plus | B::Minus | B::Mul | B::Mod => match (a, b) {
            (Num::Int(x), Num::Int(y)) => {
                let r = match op {
                    B::Plus => x.checked_add(y),
                    B::Minus => x.checked_sub(y),
                    B::Mul => x.checked_mul(y),
                    _ => x.checked_rem(y),
                };
                match r {
                    Some(r) => Num::Int(r),
                    None => {
                        return fail(format!(
                            "`{lhs} {} {rhs}` is out of the range of whole numbers",
                            op.as_str()
                        ))
                    }
                }
            }
            _ => Num::Float(match op {
                B::Plus => a.f() + b.f(),
                B::Minus => a.f() - b.f(),
                B::Mul => a.f() * b.f(),
                _ => a.f() % b.f(),
            }),
        },
        _ => Num::Float(a.f() / b.f()),
    };
    r.value().map_or_else(
        || {
            fail(format!(
                "`{lhs} {} {rhs}` is not a finite number",
                op.as_str()
            ))
        },
        Ok,
    )
}

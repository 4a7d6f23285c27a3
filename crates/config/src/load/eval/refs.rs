//! References: variables, locals, data sources and resource names, looked up in
//! the scope or in for-expression variables, and traversals (`.a`, `[i]`, splats).

use super::{err, short, Eval, Fail, R};
use crate::load::decl::INSTANCE_TYPE_DATA;
use gpushare_core::ResourceKind;
use hcl::edit::expr::{Expression, Traversal, TraversalOperator};
use hcl::edit::Span;
use serde_json::{Map, Value};
use std::ops::Range;

impl Eval<'_> {
    /// `x.a[i]...`: a reference's attributes are looked up in place, then the rest
    /// applied to the value (a splat applies the attribute accesses after it to each item).
    pub(super) fn traversal(&mut self, t: &Traversal, span: &Option<Range<usize>>) -> R<Value> {
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
                                TraversalOperator::GetAttr(a) => get_attr(x, a.as_str(), span)?,
                                TraversalOperator::LegacyIndex(n) => index(x, *n.value(), span)?,
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

    /// `root.a.b...`: looked up in place (no copy of the root object), then copied.
    pub(super) fn lookup(
        &mut self,
        root: &str,
        attrs: &[&str],
        span: &Option<Range<usize>>,
    ) -> R<Value> {
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

//! References: variables, locals, data sources and resource names, looked up in
//! the scope or in for-expression variables, and traversals (`.a`, `[i]`, splats).
//! A sensitive value, or a key or index computed from one, is shown as
//! `(sensitive)` in the messages.

use super::hidden::{quoted, shown, written};
use super::{err, Bound, Eval, EvalError, Fail, R};
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
        // Whether the value read is sensitive: it stays so down the traversal.
        let hidden = self.hides_root(t);
        let mut v = if let Expression::Variable(root) = &t.expr {
            let mut attrs = vec![];
            while let Some((op, tail)) = rest.split_first() {
                match op.value() {
                    TraversalOperator::GetAttr(a) => attrs.push(a.as_str()),
                    _ => break,
                }
                rest = tail;
            }
            self.lookup(root.as_str(), &attrs, hidden, span)?
        } else {
            self.eval(&t.expr)?
        };
        for (i, op) in rest.iter().enumerate() {
            v = match op.value() {
                TraversalOperator::GetAttr(a) => {
                    get_attr(v, &Key::literal(a.as_str(), hidden), span)?
                }
                TraversalOperator::LegacyIndex(n) => {
                    index(v, &Key::literal(*n.value(), hidden), span)?
                }
                TraversalOperator::Index(e) => {
                    let k = self.eval(e)?;
                    let key_hidden = self.hides(e);
                    match k {
                        Value::String(k) => {
                            get_attr(v, &Key::computed(&*k, hidden, key_hidden), span)?
                        }
                        Value::Number(n) => match n.as_u64() {
                            Some(i) => index(v, &Key::computed(i, hidden, key_hidden), span)?,
                            None => {
                                let n = written(&n, key_hidden);
                                return Err(err(
                                    Fail::Plain,
                                    format!("index {n} is not a whole number of 0 or more"),
                                    e.span(),
                                ));
                            }
                        },
                        other => {
                            return Err(err(
                                Fail::Plain,
                                format!("cannot index with {}", self.show(e, &other)),
                                e.span(),
                            ))
                        }
                    }
                }
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
                                    get_attr(x, &Key::literal(a.as_str(), hidden), span)?
                                }
                                TraversalOperator::LegacyIndex(n) => {
                                    index(x, &Key::literal(*n.value(), hidden), span)?
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

    /// `root.a.b...`: looked up in place (no copy of the root object), then copied.
    /// `hidden`: the value read is sensitive.
    pub(super) fn lookup(
        &mut self,
        root: &str,
        attrs: &[&str],
        hidden: bool,
        span: &Option<Range<usize>>,
    ) -> R<Value> {
        let missing = |what: String| Err(err(Fail::Plain, what, span.clone()));
        let descend = |v, attrs| descend(v, attrs, hidden, span);
        if let Some(Bound { value, .. }) = self.bound.iter().rev().find(|b| b.name == root) {
            let v = descend(value, attrs)?.clone();
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
                        let v = descend(v, rest)?.clone();
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
                        let v = descend(v, rest)?.clone();
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
        let v = descend(&base, rest)?.clone();
        self.admit(v, span)
    }
}

/// A key or index of a traversal, and what of it a message may show.
struct Key<K> {
    k: K,
    /// The value it is looked up in is sensitive.
    of: bool,
    /// The key itself is sensitive (computed from a sensitive value).
    hidden: bool,
}

impl<K: std::fmt::Display> Key<K> {
    /// A key written in the source (`.a`, `.0`).
    fn literal(k: K, of: bool) -> Self {
        Key::computed(k, of, false)
    }

    fn computed(k: K, of: bool, hidden: bool) -> Self {
        Key { k, of, hidden }
    }

    /// The key as a message shows it: `` `a` `` or `(sensitive)`.
    fn quoted(&self) -> String {
        quoted(&self.k, self.hidden)
    }
}

fn descend<'v>(
    mut v: &'v Value,
    attrs: &[&str],
    hidden: bool,
    span: &Option<Range<usize>>,
) -> R<&'v Value> {
    for a in attrs {
        v = match v {
            Value::Object(m) => match m.get(*a) {
                Some(v) => v,
                None => return Err(no_such_key(&Key::literal(a, hidden), span)),
            },
            other => return Err(not_a_map(other, &Key::literal(a, hidden), span)),
        };
    }
    Ok(v)
}

fn no_such_key<K: std::fmt::Display>(key: &Key<K>, span: &Option<Range<usize>>) -> EvalError {
    err(
        Fail::Plain,
        format!("no such key: {}", key.quoted()),
        span.clone(),
    )
}

fn not_a_map<K: std::fmt::Display>(
    v: &Value,
    key: &Key<K>,
    span: &Option<Range<usize>>,
) -> EvalError {
    err(
        Fail::Plain,
        format!(
            "cannot read attribute {} of {}",
            key.quoted(),
            shown(v, key.of)
        ),
        span.clone(),
    )
}

fn get_attr(v: Value, key: &Key<&str>, span: &Option<Range<usize>>) -> R<Value> {
    match v {
        Value::Object(mut m) => m.remove(key.k).ok_or_else(|| no_such_key(key, span)),
        other => Err(not_a_map(&other, key, span)),
    }
}

fn index(v: Value, key: &Key<u64>, span: &Option<Range<usize>>) -> R<Value> {
    match v {
        Value::Array(mut a) => {
            let n = a.len();
            usize::try_from(key.k)
                .ok()
                .filter(|&i| i < n)
                .map(|i| a.swap_remove(i))
                .ok_or_else(|| {
                    let i = written(&key.k, key.hidden);
                    let n = written(&n, key.of);
                    err(
                        Fail::Plain,
                        format!("index {i} out of range for a list of {n}"),
                        span.clone(),
                    )
                })
        }
        other => Err(err(
            Fail::Plain,
            format!("cannot index {}", shown(&other, key.of)),
            span.clone(),
        )),
    }
}

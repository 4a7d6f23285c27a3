//! For expressions: `[for k, v in coll : v if cond]` and `{for ... : k => v...}`.

use super::hidden::{quoted, shown};
use super::{err, Bound, Eval, Fail, R};
use crate::limits::MAX_ELEMENTS;
use hcl::edit::expr::ForExpr;
use hcl::edit::Span;
use serde_json::{Map, Value};
use std::ops::Range;

impl Eval<'_> {
    /// A for expression: a list, or a map when it has a key expression.
    pub(super) fn for_expr(&mut self, f: &ForExpr, span: &Option<Range<usize>>) -> R<Value> {
        let coll = self.eval(&f.intro.collection_expr)?;
        let sensitive = self.hides(&f.intro.collection_expr);
        let pairs = pairs_of(coll, sensitive, f.intro.collection_expr.span())?;
        let key_var = f.intro.key_var.as_ref().map(|k| k.as_str());
        let value_var = f.intro.value_var.as_str();
        let mut list = vec![];
        let mut map = Map::new();
        for pair in pairs {
            self.charge(1, span)?;
            let mark = self.bound.len();
            self.bind(key_var, value_var, pair, sensitive);
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

    fn for_item(
        &mut self,
        f: &ForExpr,
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
                    let key = quoted(&key, self.hides(ke));
                    return Err(err(
                        Fail::Plain,
                        format!("key {key} already exists (use `...` to group values by key)"),
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

    /// Binds a for variable (and its key variable) to one of the pairs `for` runs
    /// over; `sensitive`: the collection is.
    pub(super) fn bind(
        &mut self,
        key_var: Option<&str>,
        value_var: &str,
        (k, v): (Value, Value),
        sensitive: bool,
    ) {
        if let Some(kv) = key_var {
            self.bound.push(Bound {
                name: kv.to_string(),
                value: k,
                sensitive,
            });
        }
        self.bound.push(Bound {
            name: value_var.to_string(),
            value: v,
            sensitive,
        });
    }
}

/// The (key, value) pairs a `for` runs over: a list's indices or a map's keys.
/// `hidden`: the collection is sensitive.
pub(super) fn pairs_of(
    v: Value,
    hidden: bool,
    span: Option<Range<usize>>,
) -> R<Vec<(Value, Value)>> {
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
                shown(&other, hidden)
            ),
            span,
        )),
    }
}

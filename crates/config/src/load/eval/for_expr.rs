//! For expressions: `[for k, v in coll : v if cond]` and `{for ... : k => v...}`.

use super::{err, short, Eval, Fail, R};
use crate::limits::MAX_ELEMENTS;
use hcl::edit::expr::ForExpr;
use hcl::edit::Span;
use serde_json::{Map, Value};
use std::ops::Range;

impl Eval<'_> {
    /// A for expression: a list, or a map when it has a key expression.
    pub(super) fn for_expr(&mut self, f: &ForExpr, span: &Option<Range<usize>>) -> R<Value> {
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
}

/// The (key, value) pairs a `for` runs over: a list's indices or a map's keys.
pub(super) fn pairs_of(v: Value, span: Option<Range<usize>>) -> R<Vec<(Value, Value)>> {
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

//! The work budget of one load and the size limits on values (`crate::limits`).

use super::{err, Eval, Fail, R};
use crate::limits::{
    MAX_ELEMENTS, MAX_EVAL_WORK, MAX_STRING_BYTES, MAX_VALUE_BYTES, MAX_VALUE_DEPTH,
};
use serde_json::Value;
use std::ops::Range;

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

impl Eval<'_> {
    pub(super) fn charge(&mut self, steps: u64, span: &Option<Range<usize>>) -> R<()> {
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
    pub(super) fn admit(&mut self, v: Value, span: &Option<Range<usize>>) -> R<Value> {
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

    pub(super) fn string(&mut self, s: String, span: &Option<Range<usize>>) -> R<Value> {
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
}

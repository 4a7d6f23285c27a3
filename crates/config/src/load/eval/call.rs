//! Function calls: the functions of `crate::funcs`, results within the size limits.
//! A sensitive argument is shown as `(sensitive)` in the messages.

use super::{err, Eval, Fail, R};
use crate::funcs;
use crate::limits::MAX_STRING_BYTES;
use hcl::edit::expr::FuncCall;
use hcl::edit::Span;
use serde_json::Value;
use std::ops::Range;

impl Eval<'_> {
    /// A call of a function of `crate::funcs` (`...` expands a final list argument).
    pub(super) fn call(&mut self, f: &FuncCall, span: &Option<Range<usize>>) -> R<Value> {
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
        // The argument each value comes from (a list expanded by `...` gives several).
        let mut from = Vec::with_capacity(n);
        for (i, a) in f.args.iter().enumerate() {
            let v = self.eval(a)?;
            if f.args.expand_final() && i + 1 == n {
                match v {
                    Value::Array(items) => {
                        from.extend(std::iter::repeat_n(a, items.len()));
                        args.extend(items);
                    }
                    other => {
                        return Err(err(
                            Fail::Plain,
                            format!("`...` expands a list, got {}", self.show(a, &other)),
                            a.span(),
                        ))
                    }
                }
            } else {
                from.push(a);
                args.push(v);
            }
        }
        // Arguments are admitted values: a result is at most their sum (plus a
        // format string), so the work of the call is bounded by the admit below.
        let v = funcs::call(name, args, MAX_STRING_BYTES).map_err(|e| {
            let hidden: Vec<bool> = from.iter().map(|a| self.hides(a)).collect();
            err(
                Fail::Plain,
                format!("error calling function `{name}`: {}", e.message(&hidden)),
                span.clone(),
            )
        })?;
        self.admit(v, span)
    }
}

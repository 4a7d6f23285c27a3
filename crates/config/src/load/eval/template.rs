//! String templates and heredocs: interpolation, `%{if}` and `%{for}` directives,
//! and the whitespace their strip markers (`~`) remove.

use super::for_expr::pairs_of;
use super::{err, Eval, Fail, R};
use crate::limits::MAX_STRING_BYTES;
use hcl::edit::template::{Directive, Element, Strip, Template};
use hcl::edit::Span;
use serde_json::Value;
use std::ops::Range;

impl Eval<'_> {
    pub(super) fn template_value(&mut self, t: &Template, span: &Option<Range<usize>>) -> R<Value> {
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
                            format!("cannot insert {} into a string", self.show(&ip.expr, &v)),
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
                    let sensitive = self.hides(&fe.collection_expr);
                    let pairs = pairs_of(coll, sensitive, fe.collection_expr.span())?;
                    for (k, v) in pairs {
                        let mark = self.bound.len();
                        let key_var = fe.key_var.as_ref().map(|kv| kv.as_str());
                        self.bind(key_var, fe.value_var.as_str(), (k, v), sensitive);
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

//! Operators: unary, and chains of binary ones by precedence, with checked
//! arithmetic (division and remainder by zero and overflow are errors). A
//! sensitive operand is shown as `(sensitive)` in the messages.

use super::hidden::{shown, written};
use super::{err, Eval, Fail, R};
use hcl::edit::expr::{BinaryOperator, Expression, UnaryOp, UnaryOperator};
use hcl::edit::Span;
use serde_json::{Number, Value};
use std::ops::Range;

/// An operator and where it is written.
type Op = (BinaryOperator, Option<Range<usize>>);

/// A value of a chain and the operands (their indices) it is computed from.
type Operand = (Value, Range<usize>);

impl Eval<'_> {
    /// `!b` and `-n` (negation checked).
    pub(super) fn unary(&mut self, u: &UnaryOp, span: &Option<Range<usize>>) -> R<Value> {
        let v = self.eval(&u.expr)?;
        match (u.operator.value(), v) {
            (UnaryOperator::Not, Value::Bool(b)) => Ok(Value::Bool(!b)),
            (UnaryOperator::Neg, Value::Number(n)) => {
                let r = match n.as_i64() {
                    Some(i) => i.checked_neg().map(Num::Int),
                    None => n.as_f64().map(|f| Num::Float(-f)),
                };
                r.and_then(Num::value).ok_or_else(|| {
                    let n = written(&n, self.hides(&u.expr));
                    err(Fail::Plain, format!("cannot negate {n}"), span.clone())
                })
            }
            (op, v) => Err(err(
                Fail::Plain,
                format!(
                    "unary operator `{}` is not applicable to {}",
                    op.as_str(),
                    self.show(&u.expr, &v)
                ),
                span.clone(),
            )),
        }
    }

    /// `a op b op c ...`: hcl-edit nests the chain to the right without precedence;
    /// evaluated here without recursion over its length, by precedence climbing.
    pub(super) fn binary_chain(&mut self, expr: &Expression) -> R<Value> {
        let mut operands: Vec<&Expression> = vec![];
        let mut ops: Vec<Op> = vec![];
        let mut cur = expr;
        while let Expression::BinaryOp(b) = cur {
            operands.push(&b.lhs_expr);
            ops.push((*b.operator.value(), b.operator.span()));
            cur = &b.rhs_expr;
        }
        operands.push(cur);
        let mut values: Vec<Operand> = vec![];
        let mut pending: Vec<Op> = vec![];
        values.push((self.eval(operands[0])?, 0..1));
        for (i, (op, span)) in ops.into_iter().enumerate() {
            while pending
                .last()
                .is_some_and(|(p, _)| p.precedence() >= op.precedence())
            {
                self.reduce(&operands, &mut values, &mut pending)?;
            }
            pending.push((op, span));
            values.push((self.eval(operands[i + 1])?, i + 1..i + 2));
        }
        while !pending.is_empty() {
            self.reduce(&operands, &mut values, &mut pending)?;
        }
        values
            .pop()
            .map(|(v, _)| v)
            .ok_or_else(|| err(Fail::Plain, "empty operation", expr.span()))
    }

    fn reduce(
        &mut self,
        operands: &[&Expression],
        values: &mut Vec<Operand>,
        pending: &mut Vec<Op>,
    ) -> R<()> {
        let (Some((op, span)), Some((rhs, r)), Some((lhs, l))) =
            (pending.pop(), values.pop(), values.pop())
        else {
            return Err(err(Fail::Plain, "malformed operation", None));
        };
        self.charge(1, &span)?;
        match binary(op, &lhs, &rhs) {
            Ok(v) => {
                values.push((v, l.start..r.end));
                Ok(())
            }
            Err(broken) => {
                let hidden = |from: Range<usize>| {
                    operands
                        .get(from)
                        .is_some_and(|es| es.iter().any(|e| self.hides(e)))
                };
                let msg = broken.message(op, (&lhs, hidden(l)), (&rhs, hidden(r)));
                Err(err(Fail::Plain, msg, span))
            }
        }
    }
}

/// Why a binary operation has no value.
enum Broken {
    NeedBools,
    NeedNumbers,
    ByZero,
    OutOfRange,
    NotFinite,
}

impl Broken {
    /// The message, each operand written out or `(sensitive)` where `hidden`.
    fn message(&self, op: BinaryOperator, lhs: (&Value, bool), rhs: (&Value, bool)) -> String {
        let o = op.as_str();
        let need = |what: &str| {
            format!(
                "operator `{o}` needs two {what}, got {} and {}",
                shown(lhs.0, lhs.1),
                shown(rhs.0, rhs.1)
            )
        };
        let whole = format!("`{} {o} {}`", written(lhs.0, lhs.1), written(rhs.0, rhs.1));
        match self {
            Broken::NeedBools => need("booleans"),
            Broken::NeedNumbers => need("numbers"),
            Broken::ByZero if op == BinaryOperator::Div => format!("division by zero: {whole}"),
            Broken::ByZero => format!("remainder by zero: {whole}"),
            Broken::OutOfRange => format!("{whole} is out of the range of whole numbers"),
            Broken::NotFinite => format!("{whole} is not a finite number"),
        }
    }
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
fn binary(op: BinaryOperator, lhs: &Value, rhs: &Value) -> Result<Value, Broken> {
    use BinaryOperator as B;
    match op {
        B::Eq => return Ok(Value::Bool(lhs == rhs)),
        B::NotEq => return Ok(Value::Bool(lhs != rhs)),
        B::And | B::Or => {
            return match (lhs, rhs) {
                (Value::Bool(a), Value::Bool(b)) => {
                    Ok(Value::Bool(if op == B::And { *a && *b } else { *a || *b }))
                }
                _ => Err(Broken::NeedBools),
            }
        }
        _ => {}
    }
    let (Some(a), Some(b)) = (
        lhs.as_number().and_then(Num::of),
        rhs.as_number().and_then(Num::of),
    ) else {
        return Err(Broken::NeedNumbers);
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
        B::Div | B::Mod if zero(b) => return Err(Broken::ByZero),
        B::Plus | B::Minus | B::Mul | B::Mod => match (a, b) {
            (Num::Int(x), Num::Int(y)) => {
                let r = match op {
                    B::Plus => x.checked_add(y),
                    B::Minus => x.checked_sub(y),
                    B::Mul => x.checked_mul(y),
                    _ => x.checked_rem(y),
                };
                Num::Int(r.ok_or(Broken::OutOfRange)?)
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
    r.value().ok_or(Broken::NotFinite)
}

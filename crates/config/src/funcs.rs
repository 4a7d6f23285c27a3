//! The HCL functions available in configurations (Terraform's names and meanings):
//! min, max, upper, lower, format, join, length, concat, merge, coalesce.

use crate::diag::SENSITIVE;
use serde_json::{Map, Value};

/// Why a call failed. A message that quotes an argument ends with it, so that a
/// sensitive one can be shown as `(sensitive)` instead ([`CallError::message`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallError {
    text: String,
    /// The argument quoted at the end (its index) and how it is written.
    quoted: Option<(usize, String)>,
}

impl CallError {
    /// `text` followed by argument `i`, written as `shown`.
    fn quoting(text: impl Into<String>, i: usize, shown: String) -> Self {
        CallError {
            text: text.into(),
            quoted: Some((i, shown)),
        }
    }

    /// The message; an argument whose index is `true` in `hidden` is not quoted.
    pub fn message(&self, hidden: &[bool]) -> String {
        match &self.quoted {
            Some((i, _)) if hidden.get(*i).copied().unwrap_or(false) => {
                format!("{}{SENSITIVE}", self.text)
            }
            Some((_, shown)) => format!("{}{shown}", self.text),
            None => self.text.clone(),
        }
    }
}

impl From<String> for CallError {
    fn from(text: String) -> Self {
        CallError { text, quoted: None }
    }
}

impl From<&str> for CallError {
    fn from(text: &str) -> Self {
        CallError::from(text.to_string())
    }
}

pub const NAMES: [&str; 10] = [
    "min", "max", "upper", "lower", "format", "join", "length", "concat", "merge", "coalesce",
];

/// Calls the function `name` (one of [`NAMES`]); a string result longer than
/// `max_string` bytes is refused before it is built.
pub fn call(name: &str, args: Vec<Value>, max_string: usize) -> Result<Value, CallError> {
    match name {
        "min" => min(&args),
        "max" => max(&args),
        "upper" => upper(&args),
        "lower" => lower(&args),
        "format" => format(&args, max_string),
        "join" => join(&args, max_string),
        "length" => length(&args),
        "concat" => concat(args),
        "merge" => merge(args),
        "coalesce" => coalesce(args),
        other => Err(format!("undefined function `{other}`").into()),
    }
}

fn numbers(args: &[Value]) -> Result<Vec<f64>, CallError> {
    let mut v = Vec::with_capacity(args.len());
    for (i, a) in args.iter().enumerate() {
        match a.as_f64() {
            Some(f) => v.push(f),
            None => {
                return Err(CallError::quoting(
                    "every argument must be a number, got ",
                    i,
                    plain(a),
                ))
            }
        }
    }
    if v.is_empty() {
        return Err("needs at least one number".into());
    }
    Ok(v)
}

fn number_value(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        Value::from(f as i64)
    } else {
        Value::from(f)
    }
}

fn min(args: &[Value]) -> Result<Value, CallError> {
    Ok(number_value(
        numbers(args)?.into_iter().fold(f64::INFINITY, f64::min),
    ))
}

fn max(args: &[Value]) -> Result<Value, CallError> {
    Ok(number_value(
        numbers(args)?.into_iter().fold(f64::NEG_INFINITY, f64::max),
    ))
}

fn str_arg(args: &[Value], i: usize) -> Result<&str, String> {
    args.get(i)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("argument {} must be a string", i + 1))
}

fn one<'a>(args: &'a [Value], name: &str) -> Result<&'a Value, String> {
    match args {
        [a] => Ok(a),
        _ => Err(format!("{name} takes one argument, got {}", args.len())),
    }
}

fn upper(args: &[Value]) -> Result<Value, CallError> {
    one(args, "upper")?;
    Ok(Value::from(str_arg(args, 0)?.to_uppercase()))
}

fn lower(args: &[Value]) -> Result<Value, CallError> {
    one(args, "lower")?;
    Ok(Value::from(str_arg(args, 0)?.to_lowercase()))
}

/// A value as `format`'s `%v` and `join` show it.
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

/// `format(spec, args...)` with the verbs `%s`, `%d`, `%v` and `%%`.
fn format(args: &[Value], max_string: usize) -> Result<Value, CallError> {
    let spec = str_arg(args, 0)?.to_string();
    let rest: Vec<&Value> = args.iter().skip(1).collect();
    let mut out = String::new();
    let mut next = 0usize;
    let mut chars = spec.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('%') => out.push('%'),
            Some(verb @ ('s' | 'd' | 'v')) => {
                let arg = rest.get(next).ok_or_else(|| {
                    CallError::quoting("too few arguments for the format ", 0, format!("{spec:?}"))
                })?;
                next += 1;
                if verb == 'd' {
                    let n = arg.as_number().ok_or_else(|| {
                        CallError::quoting("%d needs a number, got ", next, plain(arg))
                    })?;
                    out.push_str(&n.to_string());
                } else {
                    out.push_str(&plain(arg));
                }
            }
            Some(other) => {
                return Err(
                    format!("unsupported format verb %{other} (use %s, %d, %v or %%)").into(),
                )
            }
            None => return Err("the format ends with a lone %".into()),
        }
        if out.len() > max_string {
            return Err(format!("the result is longer than {max_string} bytes").into());
        }
    }
    if next < rest.len() {
        return Err(CallError::quoting(
            "too many arguments for the format ",
            0,
            format!("{spec:?}"),
        ));
    }
    Ok(Value::from(out))
}

fn join(args: &[Value], max_string: usize) -> Result<Value, CallError> {
    let sep = str_arg(args, 0)?;
    let list = args
        .get(1)
        .and_then(Value::as_array)
        .ok_or("argument 2 must be a list")?;
    if args.len() > 2 {
        return Err("join takes two arguments".into());
    }
    let mut out = String::new();
    for (i, v) in list.iter().enumerate() {
        if i > 0 {
            out.push_str(sep);
        }
        match v {
            Value::Array(_) | Value::Object(_) => {
                return Err(format!("element {i} is not a string, number or boolean").into())
            }
            v => out.push_str(&plain(v)),
        }
        if out.len() > max_string {
            return Err(format!("the result is longer than {max_string} bytes").into());
        }
    }
    Ok(Value::from(out))
}

fn length(args: &[Value]) -> Result<Value, CallError> {
    match one(args, "length").map(Some)? {
        Some(Value::String(s)) => Ok(Value::from(s.chars().count())),
        Some(Value::Array(a)) => Ok(Value::from(a.len())),
        Some(Value::Object(o)) => Ok(Value::from(o.len())),
        Some(other) => Err(CallError::quoting(
            "length needs a string, list or map, got ",
            0,
            plain(other),
        )),
        None => Err("length needs one argument".into()),
    }
}

fn concat(args: Vec<Value>) -> Result<Value, CallError> {
    let mut out = Vec::new();
    for a in args {
        match a {
            Value::Array(items) => out.extend(items),
            _ => return Err("every argument must be a list".into()),
        }
    }
    Ok(Value::Array(out))
}

fn merge(args: Vec<Value>) -> Result<Value, CallError> {
    let mut out = Map::new();
    for a in args {
        match a {
            Value::Object(m) => out.extend(m),
            _ => return Err("every argument must be a map".into()),
        }
    }
    Ok(Value::Object(out))
}

fn coalesce(args: Vec<Value>) -> Result<Value, CallError> {
    args.into_iter()
        .find(|v| !matches!(v, Value::Null) && v.as_str() != Some(""))
        .ok_or_else(|| "no non-null, non-empty argument".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn c(name: &str, args: Value) -> Result<Value, String> {
        match args {
            Value::Array(a) => call(name, a, 1 << 20).map_err(|e| e.message(&[])),
            _ => unreachable!(),
        }
    }

    #[test]
    fn functions_compute_what_terraform_does() {
        assert_eq!(c("min", json!([3, 1, 2])), Ok(json!(1)));
        assert_eq!(c("max", json!([3, 1, 2])), Ok(json!(3)));
        assert_eq!(c("upper", json!(["ab"])), Ok(json!("AB")));
        assert_eq!(c("lower", json!(["AB"])), Ok(json!("ab")));
        assert_eq!(c("format", json!(["%s-%d%%", "a", 5])), Ok(json!("a-5%")));
        assert_eq!(c("join", json!([",", ["a", "b"]])), Ok(json!("a,b")));
        assert_eq!(c("length", json!([[1, 2, 3]])), Ok(json!(3)));
        assert_eq!(c("length", json!(["héllo"])), Ok(json!(5)));
        assert_eq!(c("concat", json!([[1], [2, 3]])), Ok(json!([1, 2, 3])));
        assert_eq!(
            c("merge", json!([{"a": 1}, {"a": 2, "b": 3}])),
            Ok(json!({"a": 2, "b": 3}))
        );
        assert_eq!(c("coalesce", json!([null, "", "x"])), Ok(json!("x")));
        assert!(c("format", json!(["%s %s", "a"])).is_err());
        assert!(c("nope", json!([1])).is_err());
        assert!(c("min", json!(["a"])).is_err());
    }

    #[test]
    fn string_results_are_bounded_before_they_are_built() {
        let sep = "x".repeat(1000);
        let list: Vec<Value> = (0..2000).map(|_| json!("a")).collect();
        assert!(call("join", vec![json!(sep), Value::Array(list)], 1 << 20).is_err());
    }

    /// Issue 46 item 6: the argument a message quotes is `(sensitive)` where it is.
    #[test]
    fn a_sensitive_argument_is_not_quoted() {
        let e = call("min", vec![json!(1), json!("hunter2")], 1 << 20).unwrap_err();
        assert_eq!(
            e.message(&[]),
            "every argument must be a number, got hunter2"
        );
        assert_eq!(
            e.message(&[true, false]),
            "every argument must be a number, got hunter2"
        );
        assert_eq!(
            e.message(&[false, true]),
            "every argument must be a number, got (sensitive)"
        );
        let e = call(
            "format",
            vec![json!("%s %d"), json!(1), json!("x")],
            1 << 20,
        )
        .unwrap_err();
        assert_eq!(
            e.message(&[false, false, true]),
            "%d needs a number, got (sensitive)"
        );
    }
}

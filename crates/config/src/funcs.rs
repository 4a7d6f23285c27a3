//! The HCL functions available in configurations (Terraform's names and meanings):
//! min, max, upper, lower, format, join, length, concat, merge, coalesce.

use serde_json::{Map, Value};

pub const NAMES: [&str; 10] = [
    "min", "max", "upper", "lower", "format", "join", "length", "concat", "merge", "coalesce",
];

/// Calls the function `name` (one of [`NAMES`]); a string result longer than
/// `max_string` bytes is refused before it is built.
pub fn call(name: &str, args: Vec<Value>, max_string: usize) -> Result<Value, String> {
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
        other => Err(format!("undefined function `{other}`")),
    }
}

fn numbers(args: &[Value]) -> Result<Vec<f64>, String> {
    let mut v = Vec::with_capacity(args.len());
    for a in args {
        match a.as_f64() {
            Some(f) => v.push(f),
            None => return Err(format!("every argument must be a number, got {}", plain(a))),
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

fn min(args: &[Value]) -> Result<Value, String> {
    Ok(number_value(
        numbers(args)?.into_iter().fold(f64::INFINITY, f64::min),
    ))
}

fn max(args: &[Value]) -> Result<Value, String> {
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

fn upper(args: &[Value]) -> Result<Value, String> {
    one(args, "upper")?;
    Ok(Value::from(str_arg(args, 0)?.to_uppercase()))
}

fn lower(args: &[Value]) -> Result<Value, String> {
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
fn format(args: &[Value], max_string: usize) -> Result<Value, String> {
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
                let arg = rest
                    .get(next)
                    .ok_or_else(|| format!("too few arguments for the format {spec:?}"))?;
                next += 1;
                if verb == 'd' {
                    let n = arg
                        .as_number()
                        .ok_or_else(|| format!("%d needs a number, got {}", plain(arg)))?;
                    out.push_str(&n.to_string());
                } else {
                    out.push_str(&plain(arg));
                }
            }
            Some(other) => {
                return Err(format!(
                    "unsupported format verb %{other} (use %s, %d, %v or %%)"
                ))
            }
            None => return Err("the format ends with a lone %".into()),
        }
        if out.len() > max_string {
            return Err(format!("the result is longer than {max_string} bytes"));
        }
    }
    if next < rest.len() {
        return Err(format!("too many arguments for the format {spec:?}"));
    }
    Ok(Value::from(out))
}

fn join(args: &[Value], max_string: usize) -> Result<Value, String> {
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
                return Err(format!("element {i} is not a string, number or boolean"))
            }
            v => out.push_str(&plain(v)),
        }
        if out.len() > max_string {
            return Err(format!("the result is longer than {max_string} bytes"));
        }
    }
    Ok(Value::from(out))
}

fn length(args: &[Value]) -> Result<Value, String> {
    match one(args, "length").map(Some)? {
        Some(Value::String(s)) => Ok(Value::from(s.chars().count())),
        Some(Value::Array(a)) => Ok(Value::from(a.len())),
        Some(Value::Object(o)) => Ok(Value::from(o.len())),
        Some(other) => Err(format!(
            "length needs a string, list or map, got {}",
            plain(other)
        )),
        None => Err("length needs one argument".into()),
    }
}

fn concat(args: Vec<Value>) -> Result<Value, String> {
    let mut out = Vec::new();
    for a in args {
        match a {
            Value::Array(items) => out.extend(items),
            _ => return Err("every argument must be a list".into()),
        }
    }
    Ok(Value::Array(out))
}

fn merge(args: Vec<Value>) -> Result<Value, String> {
    let mut out = Map::new();
    for a in args {
        match a {
            Value::Object(m) => out.extend(m),
            _ => return Err("every argument must be a map".into()),
        }
    }
    Ok(Value::Object(out))
}

fn coalesce(args: Vec<Value>) -> Result<Value, String> {
    args.into_iter()
        .find(|v| !matches!(v, Value::Null) && v.as_str() != Some(""))
        .ok_or_else(|| "no non-null, non-empty argument".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn c(name: &str, args: Value) -> Result<Value, String> {
        match args {
            Value::Array(a) => call(name, a, 1 << 20),
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
}

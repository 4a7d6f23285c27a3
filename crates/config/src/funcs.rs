//! The HCL functions available in configurations (Terraform's names and meanings):
//! min, max, upper, lower, format, join, length, concat, merge, coalesce.

use hcl::eval::{Context, FuncArgs, FuncDef, ParamType};
use hcl::{Map, Value};

pub const NAMES: [&str; 10] = [
    "min", "max", "upper", "lower", "format", "join", "length", "concat", "merge", "coalesce",
];

/// Declares every function in `ctx`.
pub fn declare(ctx: &mut Context<'_>) {
    ctx.declare_func(
        "min",
        FuncDef::builder()
            .variadic_param(ParamType::Number)
            .build(min),
    );
    ctx.declare_func(
        "max",
        FuncDef::builder()
            .variadic_param(ParamType::Number)
            .build(max),
    );
    ctx.declare_func(
        "upper",
        FuncDef::builder().param(ParamType::String).build(upper),
    );
    ctx.declare_func(
        "lower",
        FuncDef::builder().param(ParamType::String).build(lower),
    );
    ctx.declare_func(
        "format",
        FuncDef::builder()
            .param(ParamType::String)
            .variadic_param(ParamType::Any)
            .build(format),
    );
    ctx.declare_func(
        "join",
        FuncDef::builder()
            .param(ParamType::String)
            .param(ParamType::array_of(ParamType::Any))
            .build(join),
    );
    ctx.declare_func(
        "length",
        FuncDef::builder().param(ParamType::Any).build(length),
    );
    ctx.declare_func(
        "concat",
        FuncDef::builder()
            .variadic_param(ParamType::array_of(ParamType::Any))
            .build(concat),
    );
    ctx.declare_func(
        "merge",
        FuncDef::builder()
            .variadic_param(ParamType::object_of(ParamType::Any))
            .build(merge),
    );
    ctx.declare_func(
        "coalesce",
        FuncDef::builder()
            .variadic_param(ParamType::Any)
            .build(coalesce),
    );
}

fn numbers(args: &FuncArgs) -> Result<Vec<f64>, String> {
    let v: Vec<f64> = args
        .iter()
        .filter_map(|a| a.as_number().and_then(|n| n.as_f64()))
        .collect();
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

fn min(args: FuncArgs) -> Result<Value, String> {
    Ok(number_value(
        numbers(&args)?.into_iter().fold(f64::INFINITY, f64::min),
    ))
}

fn max(args: FuncArgs) -> Result<Value, String> {
    Ok(number_value(
        numbers(&args)?
            .into_iter()
            .fold(f64::NEG_INFINITY, f64::max),
    ))
}

fn str_arg(args: &FuncArgs, i: usize) -> Result<&str, String> {
    args.get(i)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("argument {} must be a string", i + 1))
}

fn upper(args: FuncArgs) -> Result<Value, String> {
    Ok(Value::from(str_arg(&args, 0)?.to_uppercase()))
}

fn lower(args: FuncArgs) -> Result<Value, String> {
    Ok(Value::from(str_arg(&args, 0)?.to_lowercase()))
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
fn format(args: FuncArgs) -> Result<Value, String> {
    let spec = str_arg(&args, 0)?.to_string();
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
    }
    if next < rest.len() {
        return Err(format!("too many arguments for the format {spec:?}"));
    }
    Ok(Value::from(out))
}

fn join(args: FuncArgs) -> Result<Value, String> {
    let sep = str_arg(&args, 0)?;
    let list = args
        .get(1)
        .and_then(Value::as_array)
        .ok_or("argument 2 must be a list")?;
    Ok(Value::from(
        list.iter().map(plain).collect::<Vec<_>>().join(sep),
    ))
}

fn length(args: FuncArgs) -> Result<Value, String> {
    match args.first() {
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

fn concat(args: FuncArgs) -> Result<Value, String> {
    let mut out = Vec::new();
    for a in args.iter() {
        out.extend(
            a.as_array()
                .ok_or("every argument must be a list")?
                .iter()
                .cloned(),
        );
    }
    Ok(Value::Array(out))
}

fn merge(args: FuncArgs) -> Result<Value, String> {
    let mut out = Map::new();
    for a in args.iter() {
        for (k, v) in a.as_object().ok_or("every argument must be a map")? {
            out.insert(k.clone(), v.clone());
        }
    }
    Ok(Value::Object(out))
}

fn coalesce(args: FuncArgs) -> Result<Value, String> {
    args.iter()
        .find(|v| !matches!(v, Value::Null) && v.as_str() != Some(""))
        .cloned()
        .ok_or_else(|| "no non-null, non-empty argument".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hcl::eval::Evaluate;

    fn eval(src: &str) -> Result<Value, String> {
        let mut ctx = Context::new();
        declare(&mut ctx);
        let expr: hcl::Expression = src
            .parse::<hcl::edit::expr::Expression>()
            .map_err(|e| e.to_string())?
            .into();
        expr.evaluate(&ctx).map_err(|e| e.to_string())
    }

    #[test]
    fn functions_compute_what_terraform_does() {
        assert_eq!(eval("min(3, 1, 2)"), Ok(Value::from(1)));
        assert_eq!(eval("max(3, 1, 2)"), Ok(Value::from(3)));
        assert_eq!(eval("upper(\"ab\")"), Ok(Value::from("AB")));
        assert_eq!(eval("lower(\"AB\")"), Ok(Value::from("ab")));
        assert_eq!(
            eval("format(\"%s-%d%%\", \"a\", 5)"),
            Ok(Value::from("a-5%"))
        );
        assert_eq!(eval("join(\",\", [\"a\", \"b\"])"), Ok(Value::from("a,b")));
        assert_eq!(eval("length([1, 2, 3])"), Ok(Value::from(3)));
        assert_eq!(eval("length(\"héllo\")"), Ok(Value::from(5)));
        assert_eq!(eval("concat([1], [2, 3])"), eval("[1, 2, 3]"));
        assert_eq!(
            eval("merge({a = 1}, {a = 2, b = 3})"),
            eval("{a = 2, b = 3}")
        );
        assert_eq!(eval("coalesce(null, \"\", \"x\")"), Ok(Value::from("x")));
        assert!(eval("format(\"%s %s\", \"a\")").is_err());
        assert!(eval("nope(1)").is_err());
    }
}

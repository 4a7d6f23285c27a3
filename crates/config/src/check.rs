//! Checking values against the schema: types (with Terraform's automatic
//! string/number/bool conversions) and validations (range, enum, pattern).

use crate::diag::SENSITIVE;
use gpushare_core::schema::{AttrType, Attribute, Block, BlockLike, Nesting, Validation};
use gpushare_core::{Desired, ResourceKind};
use serde_json::Value;

/// "a string", "a number", ... for messages.
pub fn describe(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// "a string", "a whole number", "a list of strings", ...
pub fn expected(ty: &AttrType) -> String {
    match ty {
        AttrType::String => "a string".into(),
        AttrType::Number => "a whole number".into(),
        AttrType::Bool => "a bool (true or false)".into(),
        AttrType::List(t) => format!("a list of {}", plural(t)),
        AttrType::Map(t) => format!("a map of {}", plural(t)),
    }
}

fn plural(t: &AttrType) -> String {
    match t {
        AttrType::String => "strings".into(),
        AttrType::Number => "numbers".into(),
        AttrType::Bool => "bools".into(),
        other => format!("{other}"),
    }
}

/// Whether a message may quote the value it is about (issue 46 item 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quote {
    Value,
    /// The value is sensitive: `(sensitive)` in its place.
    Sensitive,
}

impl Quote {
    /// [`Quote::Sensitive`] where `sensitive`.
    pub fn sensitive_if(sensitive: bool) -> Quote {
        if sensitive {
            Quote::Sensitive
        } else {
            Quote::Value
        }
    }

    /// `shown`, or `(sensitive)`.
    fn or_hidden(self, shown: String) -> String {
        match self {
            Quote::Value => shown,
            Quote::Sensitive => SENSITIVE.to_string(),
        }
    }
}

/// Converts `v` to `ty` the way Terraform does (a number or bool where a string
/// is expected becomes a string; a numeric string where a number is expected
/// becomes a number). Numbers must be whole. Errors say what was expected; with
/// [`Quote::Sensitive`] none quotes the value (map keys, shown by plan as they
/// are, still are).
pub fn convert(v: &Value, ty: &AttrType, quote: Quote) -> Result<Value, String> {
    let fail = || Err(format!("expected {}, got {}", expected(ty), describe(v)));
    match ty {
        AttrType::String => match v {
            Value::String(_) => Ok(v.clone()),
            Value::Number(n) => Ok(Value::String(n.to_string())),
            Value::Bool(b) => Ok(Value::String(b.to_string())),
            _ => fail(),
        },
        AttrType::Number => {
            let n = match v {
                Value::Number(n) => n.clone(),
                Value::String(s) => match s.trim().parse::<serde_json::Number>() {
                    Ok(n) => n,
                    Err(_) => {
                        let s = quote.or_hidden(format!("{s:?}"));
                        return Err(format!("expected {}, got the string {s}", expected(ty)));
                    }
                },
                _ => return fail(),
            };
            if n.is_u64() || n.is_i64() {
                return Ok(Value::Number(n));
            }
            match n.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(Value::from(f as i64)),
                Some(f) => {
                    let f = quote.or_hidden(f.to_string());
                    Err(format!("expected {}, got {f}", expected(ty)))
                }
                None => fail(),
            }
        }
        AttrType::Bool => match v {
            Value::Bool(_) => Ok(v.clone()),
            Value::String(s) if s == "true" || s == "false" => Ok(Value::Bool(s == "true")),
            _ => fail(),
        },
        AttrType::List(inner) => match v {
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    out.push(convert(item, inner, quote).map_err(|e| format!("element {i}: {e}"))?);
                }
                Ok(Value::Array(out))
            }
            _ => fail(),
        },
        AttrType::Map(inner) => match v {
            Value::Object(m) => {
                let mut out = serde_json::Map::new();
                for (k, item) in m {
                    out.insert(
                        k.clone(),
                        convert(item, inner, quote).map_err(|e| format!("key {k:?}: {e}"))?,
                    );
                }
                Ok(Value::Object(out))
            }
            _ => fail(),
        },
    }
}

/// Checks min/max/enum/pattern. Errors say what was expected.
pub fn check_validation(v: &Value, val: &Validation) -> Result<(), String> {
    check_validation_as(v, val, Quote::Value)
}

/// [`check_validation`]; with [`Quote::Sensitive`] no error quotes the value
/// (the keys of a map of environment variables, shown by plan, still are).
pub fn check_validation_as(v: &Value, val: &Validation, quote: Quote) -> Result<(), String> {
    if let Err(e) = val.check_range_and_enum(v) {
        return Err(match quote {
            Quote::Value => e,
            // The same checks, said without the value.
            Quote::Sensitive if v.is_number() => {
                format!("{SENSITIVE} is out of range: expected {}", val.range_text())
            }
            Quote::Sensitive => {
                let list: Vec<String> = val.one_of.iter().map(|e| format!("{e:?}")).collect();
                format!(
                    "{SENSITIVE} is not allowed: expected one of {}",
                    list.join(", ")
                )
            }
        });
    }
    val.check_keys(v)?;
    if let (Some(p), Some(s)) = (&val.pattern, v.as_str()) {
        // Patterns are written with their own anchors (`^...$` for a whole match).
        let ok = pattern_matches(p, s)?;
        if !ok {
            let s = quote.or_hidden(format!("{s:?}"));
            return Err(format!("{s} does not match the pattern `{p}`"));
        }
    }
    Ok(())
}

/// Whether `s` matches the schema pattern `p`; compiled patterns are cached
/// (the schemas hold a handful, checked once per resource).
fn pattern_matches(p: &str, s: &str) -> Result<bool, String> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, regex_lite::Regex>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut cache = gpushare_core::util::lock(cache);
    if let Some(re) = cache.get(p) {
        return Ok(re.is_match(s));
    }
    let re = regex_lite::Regex::new(p)
        .map_err(|e| format!("the schema's pattern {p:?} is invalid: {e}"))?;
    let ok = re.is_match(s);
    cache.insert(p.to_string(), re);
    Ok(ok)
}

/// Converts and validates one attribute value; the errors about an attribute the
/// schema marks sensitive (`secret_env`) do not quote its value.
pub fn check_attribute(a: &Attribute, v: &Value) -> Result<Value, String> {
    let quote = Quote::sensitive_if(a.sensitive);
    let v = convert(v, &a.ty, quote)?;
    check_validation_as(&v, &a.validation, quote)?;
    Ok(v)
}

/// Checks a whole resource as JSON (the form of `Desired::resources()`) against a
/// schema level: types and validations of every argument present, required
/// arguments, block counts. Returns (dotted path below `path`, message) pairs.
/// `skip_name`: the top-level `name` comes from elsewhere (the block label).
pub fn check_object(
    level: &dyn BlockLike,
    v: &Value,
    path: &str,
    skip_name: bool,
    out: &mut Vec<(String, String)>,
) {
    let Some(obj) = v.as_object() else {
        out.push((
            path.to_string(),
            format!("expected an object, got {}", describe(v)),
        ));
        return;
    };
    for a in level.attributes().iter().filter(|a| a.is_argument()) {
        if skip_name && a.name == "name" {
            continue;
        }
        let p = format!("{path}.{}", a.name);
        match obj.get(&a.name) {
            None | Some(Value::Null) => {
                if a.required {
                    out.push((p, format!("the required attribute `{}` is missing", a.name)));
                }
            }
            Some(val) => {
                if let Err(e) = check_attribute(a, val) {
                    out.push((p, e));
                }
            }
        }
    }
    for b in level.blocks() {
        check_block(b, obj.get(&b.name), &format!("{path}.{}", b.name), out);
    }
}

fn check_block(b: &Block, v: Option<&Value>, path: &str, out: &mut Vec<(String, String)>) {
    let items: Vec<(String, &Value)> = match (b.nesting, v) {
        (_, None | Some(Value::Null)) => vec![],
        (Nesting::Single, Some(v)) => vec![(path.to_string(), v)],
        (Nesting::Map, Some(Value::Object(m))) => {
            m.iter().map(|(k, v)| (format!("{path}.{k}"), v)).collect()
        }
        (_, Some(Value::Array(a))) => a
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let key = b
                    .label
                    .as_ref()
                    .and_then(|l| v.get(l))
                    .and_then(Value::as_str)
                    .map_or_else(|| i.to_string(), str::to_string);
                (format!("{path}.{key}"), v)
            })
            .collect(),
        (_, Some(other)) => {
            out.push((
                path.to_string(),
                format!("expected {} block(s), got {}", b.name, describe(other)),
            ));
            return;
        }
    };
    if (items.len() as u32) < b.min_items {
        out.push((
            path.to_string(),
            format!(
                "at least {} `{}` block(s) required, found {}",
                b.min_items,
                b.name,
                items.len()
            ),
        ));
    }
    if let Some(max) = b.max_items {
        if items.len() as u32 > max {
            out.push((
                path.to_string(),
                format!(
                    "at most {max} `{}` block(s) allowed, found {}",
                    b.name,
                    items.len()
                ),
            ));
        }
    }
    for (p, item) in items {
        check_object(b, item, &p, false, out);
    }
}

/// Deserialises a resource from its JSON form into the typed model and adds it to `desired`.
pub fn insert_resource(
    desired: &mut Desired,
    kind: ResourceKind,
    name: &str,
    v: Value,
) -> serde_json::Result<()> {
    let name = name.to_string();
    match kind {
        ResourceKind::CapacityProvider => desired
            .capacity_providers
            .insert(name, serde_json::from_value(v)?)
            .map(|_| ()),
        ResourceKind::GpuInstance => desired
            .gpu_instances
            .insert(name, serde_json::from_value(v)?)
            .map(|_| ()),
        ResourceKind::TaskDefinition => desired
            .task_definitions
            .insert(name, serde_json::from_value(v)?)
            .map(|_| ()),
        ResourceKind::Service => desired
            .services
            .insert(name, serde_json::from_value(v)?)
            .map(|_| ()),
        ResourceKind::Job => desired
            .jobs
            .insert(name, serde_json::from_value(v)?)
            .map(|_| ()),
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn converts_like_terraform() {
        assert_eq!(
            convert(&json!("3"), &AttrType::Number, Quote::Value),
            Ok(json!(3))
        );
        assert_eq!(
            convert(&json!(3.0), &AttrType::Number, Quote::Value),
            Ok(json!(3))
        );
        assert!(convert(&json!(3.5), &AttrType::Number, Quote::Value)
            .unwrap_err()
            .contains("whole number"));
        assert_eq!(
            convert(&json!(3), &AttrType::String, Quote::Value),
            Ok(json!("3"))
        );
        assert_eq!(
            convert(&json!("true"), &AttrType::Bool, Quote::Value),
            Ok(json!(true))
        );
        let e = convert(
            &json!(["a", []]),
            &AttrType::List(Box::new(AttrType::String)),
            Quote::Value,
        )
        .unwrap_err();
        assert_eq!(e, "element 1: expected a string, got a list");
        assert!(convert(
            &json!("x"),
            &AttrType::Map(Box::new(AttrType::String)),
            Quote::Value
        )
        .is_err());
    }

    #[test]
    fn validations_name_the_range_enum_and_pattern() {
        let v = Validation {
            min: Some(1.0),
            max: Some(100.0),
            ..Default::default()
        };
        assert_eq!(
            check_validation(&json!(101), &v).unwrap_err(),
            "101 is out of range: expected a number between 1 and 100"
        );
        assert!(check_validation(&json!(100), &v).is_ok());
        let e = Validation {
            one_of: vec!["binpack".into(), "spread".into()],
            ..Default::default()
        };
        assert!(check_validation(&json!("pack"), &e)
            .unwrap_err()
            .contains("\"binpack\", \"spread\""));
        let p = Validation {
            pattern: Some("^[0-9a-f]{4}$".into()),
            ..Default::default()
        };
        assert!(check_validation(&json!("beef"), &p).is_ok());
        assert!(check_validation(&json!("beefy"), &p).is_err());
        let prefix = Validation {
            pattern: Some("^/".into()),
            ..Default::default()
        };
        assert!(check_validation(&json!("/run/x"), &prefix).is_ok());
        assert!(check_validation(&json!("run/x"), &prefix).is_err());
    }

    /// Issue 46 item 6: a sensitive value is not quoted, the rest of the message stays.
    #[test]
    fn sensitive_values_are_not_quoted_in_conversion_and_validation_errors() {
        let secret = "hunter2-SECRET";
        let number = convert(&json!(secret), &AttrType::Number, Quote::Sensitive).unwrap_err();
        assert_eq!(
            number,
            "expected a whole number, got the string (sensitive)"
        );
        let list = AttrType::List(Box::new(AttrType::Number));
        let e = convert(&json!([1, 2.5]), &list, Quote::Sensitive).unwrap_err();
        assert_eq!(e, "element 1: expected a whole number, got (sensitive)");
        let range = Validation {
            min: Some(1.0),
            max: Some(100.0),
            ..Default::default()
        };
        let e = check_validation_as(&json!(4242), &range, Quote::Sensitive).unwrap_err();
        assert_eq!(
            e,
            "(sensitive) is out of range: expected a number between 1 and 100"
        );
        let one_of = Validation {
            one_of: vec!["a".into()],
            ..Default::default()
        };
        let e = check_validation_as(&json!(secret), &one_of, Quote::Sensitive).unwrap_err();
        assert_eq!(e, "(sensitive) is not allowed: expected one of \"a\"");
        let pattern = Validation {
            pattern: Some("^[a-z]+$".into()),
            ..Default::default()
        };
        let e = check_validation_as(&json!(secret), &pattern, Quote::Sensitive).unwrap_err();
        assert_eq!(e, "(sensitive) does not match the pattern `^[a-z]+$`");
        // Not sensitive: quoted as before.
        let e = check_validation(&json!(secret), &pattern).unwrap_err();
        assert!(e.contains(secret), "{e}");
    }
}

//! Terraform's value model (cty): types, values, and the JSON type-constraint encoding.
//!
//! A [`Value`] carries no type of its own: list, set and tuple values are all
//! [`Value::List`], map and object values are [`Value::Map`]. The [`Type`] from
//! the schema drives encoding and decoding (as on the wire), except for
//! `dynamic` slots, whose values carry their runtime type ([`Value::Dynamic`]).

use std::collections::BTreeMap;

/// A Terraform type constraint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Type {
    String,
    Number,
    Bool,
    Dynamic,
    List(Box<Type>),
    Set(Box<Type>),
    Map(Box<Type>),
    Object(BTreeMap<String, Type>),
    Tuple(Vec<Type>),
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TypeError {
    #[error("type constraint {json} is not valid JSON")]
    NotJson { json: String },
    #[error("unsupported type constraint {json}")]
    Unsupported { json: String },
}

impl Type {
    pub fn list(t: Type) -> Type {
        Type::List(Box::new(t))
    }
    pub fn set(t: Type) -> Type {
        Type::Set(Box::new(t))
    }
    pub fn map(t: Type) -> Type {
        Type::Map(Box::new(t))
    }

    /// The compact JSON form used in schemas and dynamic values, e.g. `["list","string"]`.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            Type::String => json!("string"),
            Type::Number => json!("number"),
            Type::Bool => json!("bool"),
            Type::Dynamic => json!("dynamic"),
            Type::List(t) => json!(["list", t.to_json()]),
            Type::Set(t) => json!(["set", t.to_json()]),
            Type::Map(t) => json!(["map", t.to_json()]),
            Type::Object(attrs) => {
                let m: serde_json::Map<String, serde_json::Value> = attrs
                    .iter()
                    .map(|(k, t)| (k.clone(), t.to_json()))
                    .collect();
                json!(["object", m])
            }
            Type::Tuple(ts) => json!(["tuple", ts.iter().map(Type::to_json).collect::<Vec<_>>()]),
        }
    }

    /// Bytes for `Schema.Attribute.type`.
    pub fn to_json_bytes(&self) -> Vec<u8> {
        self.to_json().to_string().into_bytes()
    }

    pub fn from_json_bytes(bytes: &[u8]) -> Result<Type, TypeError> {
        let v: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|_| TypeError::NotJson {
                json: String::from_utf8_lossy(bytes).into_owned(),
            })?;
        Type::from_json(&v)
    }

    /// Parses a type constraint; an object type's optional-attribute list (third element) is tolerated.
    pub fn from_json(v: &serde_json::Value) -> Result<Type, TypeError> {
        let unsupported = || TypeError::Unsupported {
            json: v.to_string(),
        };
        match v {
            serde_json::Value::String(s) => match s.as_str() {
                "string" => Ok(Type::String),
                "number" => Ok(Type::Number),
                "bool" => Ok(Type::Bool),
                "dynamic" => Ok(Type::Dynamic),
                _ => Err(unsupported()),
            },
            serde_json::Value::Array(items) if items.len() >= 2 => {
                let kind = items[0].as_str().ok_or_else(unsupported)?;
                match kind {
                    "list" => Ok(Type::list(Type::from_json(&items[1])?)),
                    "set" => Ok(Type::set(Type::from_json(&items[1])?)),
                    "map" => Ok(Type::map(Type::from_json(&items[1])?)),
                    "object" => {
                        let attrs = items[1].as_object().ok_or_else(unsupported)?;
                        let mut out = BTreeMap::new();
                        for (k, t) in attrs {
                            out.insert(k.clone(), Type::from_json(t)?);
                        }
                        Ok(Type::Object(out))
                    }
                    "tuple" => {
                        let ts = items[1].as_array().ok_or_else(unsupported)?;
                        Ok(Type::Tuple(
                            ts.iter().map(Type::from_json).collect::<Result<_, _>>()?,
                        ))
                    }
                    _ => Err(unsupported()),
                }
            }
            _ => Err(unsupported()),
        }
    }
}

/// A Terraform number as it came over the wire.
#[derive(Debug, Clone)]
pub enum Number {
    Int(i64),
    Float(f64),
    /// A decimal string (msgpack strings carry numbers beyond f64's mantissa).
    Big(String),
}

impl Number {
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Number::Int(i) => Some(*i as f64),
            Number::Float(f) => Some(*f),
            Number::Big(s) => s.parse().ok(),
        }
    }
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Number::Int(i) => Some(*i),
            Number::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Some(*f as i64),
            Number::Float(_) => None,
            Number::Big(s) => s.parse().ok(),
        }
    }
    /// The most compact exact form: an integer when the value is whole.
    pub fn normalized(&self) -> Number {
        match self.as_i64() {
            Some(i) => Number::Int(i),
            None => self.clone(),
        }
    }
}

impl PartialEq for Number {
    fn eq(&self, other: &Self) -> bool {
        match (self.as_i64(), other.as_i64()) {
            (Some(a), Some(b)) => a == b,
            _ => match (self, other) {
                (Number::Big(a), Number::Big(b)) => a == b,
                _ => self.as_f64() == other.as_f64(),
            },
        }
    }
}

/// A Terraform value. See the module documentation for how types map.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    /// Unknown until apply; the raw refinement payload (extension code 12) when it had one.
    Unknown(Option<Vec<u8>>),
    Bool(bool),
    Number(Number),
    String(String),
    /// list, set or tuple elements
    List(Vec<Value>),
    /// map elements or object attributes
    Map(BTreeMap<String, Value>),
    /// A value in a `dynamic` slot, with its runtime type.
    Dynamic(Type, Box<Value>),
}

impl Value {
    pub fn unknown() -> Value {
        Value::Unknown(None)
    }
    pub fn string(s: impl Into<String>) -> Value {
        Value::String(s.into())
    }
    pub fn int(i: i64) -> Value {
        Value::Number(Number::Int(i))
    }
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
    pub fn is_unknown(&self) -> bool {
        matches!(self, Value::Unknown(_))
    }
    /// True when neither this value nor anything inside it is unknown.
    pub fn is_wholly_known(&self) -> bool {
        match self {
            Value::Unknown(_) => false,
            Value::List(items) => items.iter().all(Value::is_wholly_known),
            Value::Map(m) => m.values().all(Value::is_wholly_known),
            Value::Dynamic(_, v) => v.is_wholly_known(),
            _ => true,
        }
    }
    /// An object attribute (None when this is not an object or lacks the attribute).
    pub fn attr(&self, name: &str) -> Option<&Value> {
        match self {
            Value::Map(m) => m.get(name),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// Converts a wholly known value to JSON (nulls stay null). `Err(path)` names the
    /// first unknown value found, as attribute path steps.
    pub fn to_json(&self) -> Result<serde_json::Value, Vec<String>> {
        Ok(match self {
            Value::Null => serde_json::Value::Null,
            Value::Unknown(_) => return Err(Vec::new()),
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Number(n) => match n.normalized() {
                Number::Int(i) => serde_json::Value::from(i),
                Number::Float(f) => serde_json::Number::from_f64(f)
                    .map(serde_json::Value::Number)
                    .unwrap_or(serde_json::Value::Null),
                Number::Big(s) => s
                    .parse::<f64>()
                    .ok()
                    .and_then(serde_json::Number::from_f64)
                    .map(serde_json::Value::Number)
                    .unwrap_or(serde_json::Value::Null),
            },
            Value::String(s) => serde_json::Value::String(s.clone()),
            Value::List(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, v) in items.iter().enumerate() {
                    out.push(v.to_json().map_err(|mut p| {
                        p.insert(0, format!("[{i}]"));
                        p
                    })?);
                }
                serde_json::Value::Array(out)
            }
            Value::Map(m) => {
                let mut out = serde_json::Map::new();
                for (k, v) in m {
                    out.insert(
                        k.clone(),
                        v.to_json().map_err(|mut p| {
                            p.insert(0, k.clone());
                            p
                        })?,
                    );
                }
                serde_json::Value::Object(out)
            }
            Value::Dynamic(_, v) => v.to_json()?,
        })
    }

    /// Builds a value of type `ty` from JSON (the JSON rules of the wire format: a `dynamic`
    /// slot is `{"type":..., "value":...}`). Object attributes missing from the JSON are null.
    pub fn from_json(json: &serde_json::Value, ty: &Type) -> Result<Value, JsonValueError> {
        from_json_at(json, ty, &mut Vec::new())
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("at {path}: expected {expected}, found {found}")]
pub struct JsonValueError {
    pub path: String,
    pub expected: String,
    pub found: String,
}

fn from_json_at(
    json: &serde_json::Value,
    ty: &Type,
    path: &mut Vec<String>,
) -> Result<Value, JsonValueError> {
    use serde_json::Value as J;
    let err = |path: &Vec<String>, expected: &str| JsonValueError {
        path: if path.is_empty() {
            "(root)".into()
        } else {
            path.join(".")
        },
        expected: expected.into(),
        found: json.to_string(),
    };
    if json.is_null() {
        return Ok(Value::Null);
    }
    Ok(match ty {
        Type::String => match json {
            J::String(s) => Value::String(s.clone()),
            J::Number(n) => Value::String(n.to_string()),
            J::Bool(b) => Value::String(b.to_string()),
            _ => return Err(err(path, "string")),
        },
        Type::Number => match json {
            J::Number(n) => Value::Number(match n.as_i64() {
                Some(i) => Number::Int(i),
                None => Number::Float(n.as_f64().unwrap_or(f64::NAN)),
            }),
            J::String(s) if s.parse::<f64>().is_ok() => {
                Value::Number(Number::Big(s.clone()).normalized())
            }
            _ => return Err(err(path, "number")),
        },
        Type::Bool => match json {
            J::Bool(b) => Value::Bool(*b),
            J::String(s) if s == "true" || s == "false" => Value::Bool(s == "true"),
            _ => return Err(err(path, "bool")),
        },
        Type::List(t) | Type::Set(t) => {
            let items = json.as_array().ok_or_else(|| err(path, "array"))?;
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                path.push(format!("[{i}]"));
                out.push(from_json_at(item, t, path)?);
                path.pop();
            }
            Value::List(out)
        }
        Type::Tuple(ts) => {
            let items = json
                .as_array()
                .filter(|a| a.len() == ts.len())
                .ok_or_else(|| err(path, &format!("array of {} elements", ts.len())))?;
            let mut out = Vec::with_capacity(items.len());
            for (i, (item, t)) in items.iter().zip(ts).enumerate() {
                path.push(format!("[{i}]"));
                out.push(from_json_at(item, t, path)?);
                path.pop();
            }
            Value::List(out)
        }
        Type::Map(t) => {
            let m = json.as_object().ok_or_else(|| err(path, "object"))?;
            let mut out = BTreeMap::new();
            for (k, v) in m {
                path.push(k.clone());
                out.insert(k.clone(), from_json_at(v, t, path)?);
                path.pop();
            }
            Value::Map(out)
        }
        Type::Object(attrs) => {
            let m = json.as_object().ok_or_else(|| err(path, "object"))?;
            let mut out = BTreeMap::new();
            for (k, t) in attrs {
                path.push(k.clone());
                let v = match m.get(k) {
                    Some(v) => from_json_at(v, t, path)?,
                    None => Value::Null,
                };
                path.pop();
                out.insert(k.clone(), v);
            }
            Value::Map(out)
        }
        Type::Dynamic => {
            let m = json
                .as_object()
                .ok_or_else(|| err(path, "{\"type\":...,\"value\":...}"))?;
            let t = m
                .get("type")
                .ok_or_else(|| err(path, "a \"type\" property"))?;
            let t = Type::from_json(t).map_err(|_| err(path, "a type constraint"))?;
            let v = from_json_at(m.get("value").unwrap_or(&J::Null), &t, path)?;
            Value::Dynamic(t, Box::new(v))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_json_round_trip() {
        let t = Type::Object(BTreeMap::from([
            ("a".to_string(), Type::list(Type::String)),
            ("b".to_string(), Type::map(Type::Number)),
            (
                "c".to_string(),
                Type::Tuple(vec![Type::Bool, Type::Dynamic]),
            ),
            ("d".to_string(), Type::set(Type::Object(BTreeMap::new()))),
        ]));
        let bytes = t.to_json_bytes();
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            r#"["object",{"a":["list","string"],"b":["map","number"],"c":["tuple",["bool","dynamic"]],"d":["set",["object",{}]]}]"#
        );
        assert_eq!(Type::from_json_bytes(&bytes).unwrap(), t);
    }

    #[test]
    fn object_type_with_optional_attributes_is_tolerated() {
        let t = Type::from_json_bytes(br#"["object",{"a":"string"},["a"]]"#).unwrap();
        assert_eq!(
            t,
            Type::Object(BTreeMap::from([("a".to_string(), Type::String)]))
        );
        assert!(Type::from_json_bytes(br#"["frob","string"]"#).is_err());
    }

    #[test]
    fn json_state_fills_missing_attributes_with_null_and_reports_paths() {
        let t = Type::Object(BTreeMap::from([
            ("n".to_string(), Type::Number),
            ("s".to_string(), Type::String),
        ]));
        let v = Value::from_json(&serde_json::json!({"n": 3}), &t).unwrap();
        assert_eq!(v.attr("n"), Some(&Value::int(3)));
        assert_eq!(v.attr("s"), Some(&Value::Null));
        let e = Value::from_json(&serde_json::json!({"n": [1]}), &t).unwrap_err();
        assert_eq!(e.path, "n");
    }

    #[test]
    fn numbers_compare_by_value() {
        assert_eq!(Number::Int(3), Number::Float(3.0));
        assert_eq!(Number::Big("3".into()), Number::Int(3));
        assert_ne!(Number::Float(3.5), Number::Int(3));
    }
}

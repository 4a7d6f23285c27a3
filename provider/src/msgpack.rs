//! The MessagePack form of Terraform values (`DynamicValue.msgpack`), driven by the type.
//!
//! Null is nil; unknown is any extension value (code 0 unrefined, code 12 with a
//! refinement map, kept as raw bytes and written back unchanged); numbers are
//! integers, floats or decimal strings; a `dynamic` slot holds `[type JSON (bin), value]`.

use crate::cty::{Number, Type, Value};
use rmp::Marker;
use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MsgpackError {
    #[error("at {path}: expected {expected}, found msgpack {found}")]
    Mismatch {
        path: String,
        expected: String,
        found: String,
    },
    #[error("at {path}: value ends early")]
    Truncated { path: String },
    #[error("{extra} bytes left after the value")]
    Trailing { extra: usize },
    #[error("at {path}: the dynamic value's type is not valid")]
    DynamicType {
        path: String,
        #[source]
        source: crate::cty::TypeError,
    },
    #[error("at {path}: {message}")]
    Encode { path: String, message: String },
}

// ---------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------

/// Encodes `value` as type `ty`. Object values must carry every attribute of the type
/// (a missing one is written as null, which is what Terraform expects of an absent attribute).
pub fn encode(value: &Value, ty: &Type) -> Result<Vec<u8>, MsgpackError> {
    let mut out = Vec::with_capacity(64);
    encode_into(&mut out, value, ty, &mut Vec::new())?;
    Ok(out)
}

fn path_string(path: &[String]) -> String {
    if path.is_empty() {
        "(root)".into()
    } else {
        path.join(".")
    }
}

// Writes to a Vec<u8> cannot fail; rmp's API returns Results for general writers.
fn w<T, E>(r: Result<T, E>) {
    let _ = r;
}

fn write_unknown(out: &mut Vec<u8>, refinements: &Option<Vec<u8>>) {
    match refinements {
        Some(payload) if !payload.is_empty() => {
            w(rmp::encode::write_ext_meta(out, payload.len() as u32, 12));
            out.extend_from_slice(payload);
        }
        _ => {
            // fixext1, code 0, one zero byte: an unrefined unknown.
            out.extend_from_slice(&[0xd4, 0x00, 0x00]);
        }
    }
}

fn write_number(out: &mut Vec<u8>, n: &Number) {
    match n.normalized() {
        Number::Int(i) => w(rmp::encode::write_sint(out, i)),
        Number::Float(f) => w(rmp::encode::write_f64(out, f)),
        Number::Big(s) => w(rmp::encode::write_str(out, &s)),
    }
}

fn encode_into(
    out: &mut Vec<u8>,
    value: &Value,
    ty: &Type,
    path: &mut Vec<String>,
) -> Result<(), MsgpackError> {
    let mismatch = |path: &Vec<String>, expected: &Type| MsgpackError::Encode {
        path: path_string(path),
        message: format!("value {value:?} does not fit type {}", expected.to_json()),
    };
    if *ty == Type::Dynamic {
        return match value {
            Value::Null => {
                out.push(0xc0);
                Ok(())
            }
            Value::Unknown(r) => {
                write_unknown(out, r);
                Ok(())
            }
            Value::Dynamic(t, v) => {
                w(rmp::encode::write_array_len(out, 2));
                let tj = t.to_json_bytes();
                w(rmp::encode::write_bin(out, &tj));
                encode_into(out, v, t, path)
            }
            _ => Err(mismatch(path, ty)),
        };
    }
    match value {
        Value::Null => out.push(0xc0),
        Value::Unknown(r) => write_unknown(out, r),
        Value::Dynamic(_, _) => return Err(mismatch(path, ty)),
        Value::Bool(b) => match ty {
            Type::Bool => w(rmp::encode::write_bool(out, *b)),
            Type::String => w(rmp::encode::write_str(
                out,
                if *b { "true" } else { "false" },
            )),
            _ => return Err(mismatch(path, ty)),
        },
        Value::Number(n) => match ty {
            Type::Number => write_number(out, n),
            Type::String => w(rmp::encode::write_str(
                out,
                &match n.normalized() {
                    Number::Int(i) => i.to_string(),
                    Number::Float(f) => f.to_string(),
                    Number::Big(s) => s,
                },
            )),
            _ => return Err(mismatch(path, ty)),
        },
        Value::String(s) => match ty {
            Type::String => w(rmp::encode::write_str(out, s)),
            _ => return Err(mismatch(path, ty)),
        },
        Value::List(items) => match ty {
            Type::List(t) | Type::Set(t) => {
                w(rmp::encode::write_array_len(out, items.len() as u32));
                for (i, item) in items.iter().enumerate() {
                    path.push(format!("[{i}]"));
                    encode_into(out, item, t, path)?;
                    path.pop();
                }
            }
            Type::Tuple(ts) if ts.len() == items.len() => {
                w(rmp::encode::write_array_len(out, items.len() as u32));
                for (i, (item, t)) in items.iter().zip(ts).enumerate() {
                    path.push(format!("[{i}]"));
                    encode_into(out, item, t, path)?;
                    path.pop();
                }
            }
            _ => return Err(mismatch(path, ty)),
        },
        Value::Map(m) => match ty {
            Type::Map(t) => {
                w(rmp::encode::write_map_len(out, m.len() as u32));
                for (k, v) in m {
                    w(rmp::encode::write_str(out, k));
                    path.push(k.clone());
                    encode_into(out, v, t, path)?;
                    path.pop();
                }
            }
            Type::Object(attrs) => {
                if let Some(extra) = m.keys().find(|k| !attrs.contains_key(*k)) {
                    return Err(MsgpackError::Encode {
                        path: path_string(path),
                        message: format!("attribute {extra:?} is not in the object type"),
                    });
                }
                w(rmp::encode::write_map_len(out, attrs.len() as u32));
                for (k, t) in attrs {
                    w(rmp::encode::write_str(out, k));
                    path.push(k.clone());
                    encode_into(out, m.get(k).unwrap_or(&Value::Null), t, path)?;
                    path.pop();
                }
            }
            _ => return Err(mismatch(path, ty)),
        },
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------

/// Decodes bytes of type `ty`. Object attributes absent from the bytes decode as null.
pub fn decode(bytes: &[u8], ty: &Type) -> Result<Value, MsgpackError> {
    let mut r = Reader { buf: bytes, pos: 0 };
    let v = r.value(ty, &mut Vec::new())?;
    if r.pos != bytes.len() {
        return Err(MsgpackError::Trailing {
            extra: bytes.len() - r.pos,
        });
    }
    Ok(v)
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

enum Head {
    Nil,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(usize),
    Bin(usize),
    Array(usize),
    Map(usize),
    Ext(i8, usize),
}

impl Head {
    fn describe(&self) -> &'static str {
        match self {
            Head::Nil => "nil",
            Head::Bool(_) => "bool",
            Head::Int(_) | Head::UInt(_) => "integer",
            Head::Float(_) => "float",
            Head::Str(_) => "string",
            Head::Bin(_) => "binary",
            Head::Array(_) => "array",
            Head::Map(_) => "map",
            Head::Ext(_, _) => "extension",
        }
    }
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, path: &[String]) -> Result<&'a [u8], MsgpackError> {
        if self.buf.len() - self.pos < n {
            return Err(MsgpackError::Truncated {
                path: path_string(path),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn be(&mut self, n: usize, path: &[String]) -> Result<u64, MsgpackError> {
        Ok(self
            .take(n, path)?
            .iter()
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    }

    fn head(&mut self, path: &[String]) -> Result<Head, MsgpackError> {
        let b = self.take(1, path)?[0];
        Ok(match Marker::from_u8(b) {
            Marker::FixPos(n) => Head::UInt(u64::from(n)),
            Marker::FixNeg(n) => Head::Int(i64::from(n)),
            Marker::Null => Head::Nil,
            Marker::True => Head::Bool(true),
            Marker::False => Head::Bool(false),
            Marker::U8 => Head::UInt(self.be(1, path)?),
            Marker::U16 => Head::UInt(self.be(2, path)?),
            Marker::U32 => Head::UInt(self.be(4, path)?),
            Marker::U64 => Head::UInt(self.be(8, path)?),
            Marker::I8 => Head::Int(i64::from(self.be(1, path)? as u8 as i8)),
            Marker::I16 => Head::Int(i64::from(self.be(2, path)? as u16 as i16)),
            Marker::I32 => Head::Int(i64::from(self.be(4, path)? as u32 as i32)),
            Marker::I64 => Head::Int(self.be(8, path)? as i64),
            Marker::F32 => Head::Float(f64::from(f32::from_bits(self.be(4, path)? as u32))),
            Marker::F64 => Head::Float(f64::from_bits(self.be(8, path)?)),
            Marker::FixStr(n) => Head::Str(usize::from(n)),
            Marker::Str8 => Head::Str(self.be(1, path)? as usize),
            Marker::Str16 => Head::Str(self.be(2, path)? as usize),
            Marker::Str32 => Head::Str(self.be(4, path)? as usize),
            Marker::Bin8 => Head::Bin(self.be(1, path)? as usize),
            Marker::Bin16 => Head::Bin(self.be(2, path)? as usize),
            Marker::Bin32 => Head::Bin(self.be(4, path)? as usize),
            Marker::FixArray(n) => Head::Array(usize::from(n)),
            Marker::Array16 => Head::Array(self.be(2, path)? as usize),
            Marker::Array32 => Head::Array(self.be(4, path)? as usize),
            Marker::FixMap(n) => Head::Map(usize::from(n)),
            Marker::Map16 => Head::Map(self.be(2, path)? as usize),
            Marker::Map32 => Head::Map(self.be(4, path)? as usize),
            Marker::FixExt1 => Head::Ext(self.be(1, path)? as u8 as i8, 1),
            Marker::FixExt2 => Head::Ext(self.be(1, path)? as u8 as i8, 2),
            Marker::FixExt4 => Head::Ext(self.be(1, path)? as u8 as i8, 4),
            Marker::FixExt8 => Head::Ext(self.be(1, path)? as u8 as i8, 8),
            Marker::FixExt16 => Head::Ext(self.be(1, path)? as u8 as i8, 16),
            Marker::Ext8 => {
                let n = self.be(1, path)? as usize;
                Head::Ext(self.be(1, path)? as u8 as i8, n)
            }
            Marker::Ext16 => {
                let n = self.be(2, path)? as usize;
                Head::Ext(self.be(1, path)? as u8 as i8, n)
            }
            Marker::Ext32 => {
                let n = self.be(4, path)? as usize;
                Head::Ext(self.be(1, path)? as u8 as i8, n)
            }
            Marker::Reserved => {
                return Err(MsgpackError::Mismatch {
                    path: path_string(path),
                    expected: "a value".into(),
                    found: "reserved byte 0xc1".into(),
                })
            }
        })
    }

    fn string(&mut self, n: usize, path: &[String]) -> Result<String, MsgpackError> {
        let bytes = self.take(n, path)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| MsgpackError::Mismatch {
            path: path_string(path),
            expected: "UTF-8 string".into(),
            found: "invalid UTF-8".into(),
        })
    }

    fn value(&mut self, ty: &Type, path: &mut Vec<String>) -> Result<Value, MsgpackError> {
        let head = self.head(path)?;
        let mismatch = |path: &Vec<String>, head: &Head| MsgpackError::Mismatch {
            path: path_string(path),
            expected: ty.to_json().to_string(),
            found: head.describe().into(),
        };
        match head {
            Head::Nil => return Ok(Value::Null),
            Head::Ext(code, n) => {
                let payload = self.take(n, path)?;
                // Any extension is an unknown; code 12 carries refinements, kept verbatim.
                return Ok(Value::Unknown(if code == 12 && !payload.is_empty() {
                    Some(payload.to_vec())
                } else {
                    None
                }));
            }
            _ => {}
        }
        Ok(match ty {
            Type::Dynamic => match head {
                Head::Array(2) => {
                    let tb = match self.head(path)? {
                        Head::Bin(n) | Head::Str(n) => self.take(n, path)?,
                        other => return Err(mismatch(path, &other)),
                    };
                    let t =
                        Type::from_json_bytes(tb).map_err(|source| MsgpackError::DynamicType {
                            path: path_string(path),
                            source,
                        })?;
                    let v = self.value(&t, path)?;
                    Value::Dynamic(t, Box::new(v))
                }
                other => return Err(mismatch(path, &other)),
            },
            Type::String => match head {
                Head::Str(n) => Value::String(self.string(n, path)?),
                other => return Err(mismatch(path, &other)),
            },
            Type::Bool => match head {
                Head::Bool(b) => Value::Bool(b),
                other => return Err(mismatch(path, &other)),
            },
            Type::Number => match head {
                Head::Int(i) => Value::Number(Number::Int(i)),
                Head::UInt(u) => Value::Number(match i64::try_from(u) {
                    Ok(i) => Number::Int(i),
                    Err(_) => Number::Big(u.to_string()),
                }),
                Head::Float(f) => Value::Number(Number::Float(f)),
                Head::Str(n) => {
                    let s = self.string(n, path)?;
                    if s.parse::<f64>().is_err() {
                        return Err(MsgpackError::Mismatch {
                            path: path_string(path),
                            expected: "number".into(),
                            found: format!("string {s:?}"),
                        });
                    }
                    Value::Number(Number::Big(s).normalized())
                }
                other => return Err(mismatch(path, &other)),
            },
            Type::List(t) | Type::Set(t) => match head {
                Head::Array(n) => {
                    let mut out = Vec::with_capacity(n.min(1024));
                    for i in 0..n {
                        path.push(format!("[{i}]"));
                        out.push(self.value(t, path)?);
                        path.pop();
                    }
                    Value::List(out)
                }
                other => return Err(mismatch(path, &other)),
            },
            Type::Tuple(ts) => match head {
                Head::Array(n) if n == ts.len() => {
                    let mut out = Vec::with_capacity(n);
                    for (i, t) in ts.iter().enumerate() {
                        path.push(format!("[{i}]"));
                        out.push(self.value(t, path)?);
                        path.pop();
                    }
                    Value::List(out)
                }
                other => return Err(mismatch(path, &other)),
            },
            Type::Map(t) => match head {
                Head::Map(n) => {
                    let mut out = BTreeMap::new();
                    for _ in 0..n {
                        let k = self.key(path)?;
                        path.push(k.clone());
                        let v = self.value(t, path)?;
                        path.pop();
                        out.insert(k, v);
                    }
                    Value::Map(out)
                }
                other => return Err(mismatch(path, &other)),
            },
            Type::Object(attrs) => match head {
                Head::Map(n) => {
                    let mut out = BTreeMap::new();
                    for _ in 0..n {
                        let k = self.key(path)?;
                        path.push(k.clone());
                        let t = attrs.get(&k).ok_or_else(|| MsgpackError::Mismatch {
                            path: path_string(path),
                            expected: format!(
                                "one of the attributes {:?}",
                                attrs.keys().collect::<Vec<_>>()
                            ),
                            found: "an unexpected attribute".into(),
                        })?;
                        let v = self.value(t, path)?;
                        path.pop();
                        out.insert(k, v);
                    }
                    for k in attrs.keys() {
                        out.entry(k.clone()).or_insert(Value::Null);
                    }
                    Value::Map(out)
                }
                other => return Err(mismatch(path, &other)),
            },
        })
    }

    fn key(&mut self, path: &[String]) -> Result<String, MsgpackError> {
        match self.head(path)? {
            Head::Str(n) => self.string(n, path),
            other => Err(MsgpackError::Mismatch {
                path: path_string(path),
                expected: "string map key".into(),
                found: other.describe().into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(pairs: &[(&str, Type)]) -> Type {
        Type::Object(
            pairs
                .iter()
                .map(|(k, t)| (k.to_string(), t.clone()))
                .collect(),
        )
    }

    #[test]
    fn golden_object_with_null_and_unknown() {
        let ty = obj(&[("a", Type::String), ("b", Type::Number), ("c", Type::Bool)]);
        let v = Value::Map(BTreeMap::from([
            ("a".to_string(), Value::string("x")),
            ("b".to_string(), Value::unknown()),
            ("c".to_string(), Value::Null),
        ]));
        let bytes = encode(&v, &ty).unwrap();
        // fixmap(3) "a" "x" "b" fixext1(0,0) "c" nil
        assert_eq!(hex::encode(&bytes), "83a161a178a162d40000a163c0");
        assert_eq!(decode(&bytes, &ty).unwrap(), v);
    }

    #[test]
    fn golden_numbers() {
        for (n, hexs) in [
            (Number::Int(1), "01"),
            (Number::Int(-1), "ff"),
            (Number::Int(300), "cd012c"),
            (Number::Float(1.5), "cb3ff8000000000000"),
            (Number::Float(2.0), "02"),
        ] {
            assert_eq!(
                hex::encode(encode(&Value::Number(n.clone()), &Type::Number).unwrap()),
                hexs,
                "{n:?}"
            );
        }
        // A big number as a decimal string, and unsigned 64-bit integers beyond i64.
        let big = decode(
            &hex::decode("b43132333435363738393031323334353637383930").unwrap(),
            &Type::Number,
        )
        .unwrap();
        assert_eq!(
            big,
            Value::Number(Number::Big("12345678901234567890".into()))
        );
        let u = decode(&hex::decode("cfffffffffffffffff").unwrap(), &Type::Number).unwrap();
        assert_eq!(u, Value::Number(Number::Big(u64::MAX.to_string())));
    }

    #[test]
    fn refined_unknown_is_kept_verbatim() {
        // ext8 len 3 code 12, payload {1: false} => "not null" refinement
        let bytes = hex::decode("c7030c8101c2").unwrap();
        let v = decode(&bytes, &Type::String).unwrap();
        assert_eq!(v, Value::Unknown(Some(vec![0x81, 0x01, 0xc2])));
        assert_eq!(encode(&v, &Type::String).unwrap(), bytes);
        // Any other extension code is an unknown too, written back unrefined.
        let v = decode(&hex::decode("d40500").unwrap(), &Type::Bool).unwrap();
        assert_eq!(v, Value::unknown());
        assert_eq!(hex::encode(encode(&v, &Type::Bool).unwrap()), "d40000");
    }

    #[test]
    fn golden_dynamic_value() {
        let v = Value::Dynamic(
            Type::list(Type::String),
            Box::new(Value::List(vec![Value::string("a")])),
        );
        let bytes = encode(&v, &Type::Dynamic).unwrap();
        // fixarray(2) bin8(17) ["list","string"] fixarray(1) "a"
        assert_eq!(
            hex::encode(&bytes),
            format!("92c411{}91a161", hex::encode(r#"["list","string"]"#))
        );
        assert_eq!(decode(&bytes, &Type::Dynamic).unwrap(), v);
        // Null and unknown of dynamic type are written directly.
        assert_eq!(encode(&Value::Null, &Type::Dynamic).unwrap(), vec![0xc0]);
        assert_eq!(
            decode(&[0xd4, 0, 0], &Type::Dynamic).unwrap(),
            Value::unknown()
        );
    }

    #[test]
    fn nested_collections_round_trip() {
        let ty = obj(&[
            ("tags", Type::map(Type::String)),
            ("ids", Type::set(Type::String)),
            ("blocks", Type::list(obj(&[("n", Type::Number)]))),
            ("pair", Type::Tuple(vec![Type::String, Type::Bool])),
        ]);
        let v = Value::Map(BTreeMap::from([
            (
                "tags".to_string(),
                Value::Map(BTreeMap::from([("k".to_string(), Value::string("v"))])),
            ),
            (
                "ids".to_string(),
                Value::List(vec![Value::string("a"), Value::unknown()]),
            ),
            (
                "blocks".to_string(),
                Value::List(vec![Value::Map(BTreeMap::from([(
                    "n".to_string(),
                    Value::int(7),
                )]))]),
            ),
            (
                "pair".to_string(),
                Value::List(vec![Value::string("x"), Value::Bool(true)]),
            ),
        ]));
        assert_eq!(decode(&encode(&v, &ty).unwrap(), &ty).unwrap(), v);
    }

    #[test]
    fn missing_attributes_decode_as_null_and_errors_name_the_path() {
        let ty = obj(&[("a", Type::String), ("b", Type::list(Type::Number))]);
        // {"a": "x"} only
        let v = decode(&hex::decode("81a161a178").unwrap(), &ty).unwrap();
        assert_eq!(v.attr("b"), Some(&Value::Null));
        // {"b": ["x"]}: a string where a number belongs
        let e = decode(&hex::decode("81a16291a178").unwrap(), &ty).unwrap_err();
        assert!(e.to_string().contains("b.[0]"), "{e}");
        assert!(matches!(
            decode(&[0x81], &ty),
            Err(MsgpackError::Truncated { .. })
        ));
        assert!(matches!(
            decode(&[0xc0, 0xc0], &ty),
            Err(MsgpackError::Trailing { extra: 1 })
        ));
    }
}

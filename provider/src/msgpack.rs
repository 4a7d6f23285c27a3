//! The MessagePack form of Terraform values (`DynamicValue.msgpack`), driven by the type.
//!
//! Null is nil; unknown is any extension value (code 0 unrefined, code 12 with a
//! refinement map, kept as raw bytes and written back unchanged); numbers are
//! integers, floats or decimal strings; a `dynamic` slot holds `[type JSON (bin), value]`.

use crate::cty::{Number, Type, Value};
use rmpv::Value as Raw;
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
    #[error("at {path}: value nests deeper than {max} levels")]
    TooDeep { path: String, max: usize },
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

/// The deepest nesting of collections (lists, sets, tuples, maps, objects and dynamic
/// wrappers) that [`decode`] accepts. Terraform schemas nest far less; the bound keeps
/// hostile input from recursing without limit.
pub const MAX_DEPTH: usize = 64;

/// `rmpv` spends two units of its depth budget per array or map (the value and its body)
/// and three on a string, binary or extension leaf (value, body, bytes): this lets
/// exactly [`MAX_DEPTH`] levels of collections through its reader.
const RMPV_MAX_DEPTH: usize = 2 * MAX_DEPTH + 3;

/// Decodes bytes of type `ty`. Object attributes absent from the bytes decode as null.
///
/// The bytes are read into an untyped [`rmpv::Value`] first (which bounds recursion, and
/// never preallocates more than the input holds), then walked along `ty`.
pub fn decode(bytes: &[u8], ty: &Type) -> Result<Value, MsgpackError> {
    let mut rest = bytes;
    let raw =
        rmpv::decode::read_value_with_max_depth(&mut rest, RMPV_MAX_DEPTH).map_err(read_error)?;
    if !rest.is_empty() {
        return Err(MsgpackError::Trailing { extra: rest.len() });
    }
    walk(raw, ty, &mut Vec::new(), 0)
}

/// rmpv reads the whole value before the walk, so its errors carry no attribute path.
fn read_error(e: rmpv::decode::Error) -> MsgpackError {
    use rmpv::decode::Error as E;
    let root = path_string(&[]);
    match e {
        E::DepthLimitExceeded => MsgpackError::TooDeep {
            path: root,
            max: MAX_DEPTH,
        },
        E::InvalidMarkerRead(io) | E::InvalidDataRead(io)
            if io.kind() == std::io::ErrorKind::UnexpectedEof =>
        {
            MsgpackError::Truncated { path: root }
        }
        E::InvalidMarkerRead(io) | E::InvalidDataRead(io) => MsgpackError::Mismatch {
            path: root,
            expected: "a msgpack value".into(),
            found: io.to_string(),
        },
    }
}

fn describe(raw: &Raw) -> &'static str {
    match raw {
        Raw::Nil => "nil",
        Raw::Boolean(_) => "bool",
        Raw::Integer(_) => "integer",
        Raw::F32(_) | Raw::F64(_) => "float",
        Raw::String(_) => "string",
        Raw::Binary(_) => "binary",
        Raw::Array(_) => "array",
        Raw::Map(_) => "map",
        Raw::Ext(_, _) => "extension",
    }
}

fn utf8(s: rmpv::Utf8String, path: &[String]) -> Result<String, MsgpackError> {
    s.into_str().ok_or_else(|| MsgpackError::Mismatch {
        path: path_string(path),
        expected: "UTF-8 string".into(),
        found: "invalid UTF-8".into(),
    })
}

fn key(raw: Raw, path: &[String]) -> Result<String, MsgpackError> {
    match raw {
        Raw::String(s) => utf8(s, path),
        other => Err(MsgpackError::Mismatch {
            path: path_string(path),
            expected: "string map key".into(),
            found: describe(&other).into(),
        }),
    }
}

/// Walks a msgpack map's pairs; `type_of` gives the type of the value under a key (the
/// path then names that key) or the error for a key the type does not allow.
fn walk_pairs<'t>(
    pairs: Vec<(Raw, Raw)>,
    path: &mut Vec<String>,
    depth: usize,
    type_of: impl Fn(&str, &[String]) -> Result<&'t Type, MsgpackError>,
) -> Result<BTreeMap<String, Value>, MsgpackError> {
    let mut out = BTreeMap::new();
    for (k, v) in pairs {
        let k = key(k, path)?;
        path.push(k.clone());
        let v = walk(v, type_of(&k, path)?, path, depth)?;
        path.pop();
        out.insert(k, v);
    }
    Ok(out)
}

/// The typed walk from an untyped msgpack value to a value of type `ty`.
fn walk(raw: Raw, ty: &Type, path: &mut Vec<String>, depth: usize) -> Result<Value, MsgpackError> {
    match raw {
        Raw::Nil => return Ok(Value::Null),
        // Any extension is an unknown; code 12 carries refinements, kept verbatim.
        Raw::Ext(code, payload) => {
            return Ok(Value::Unknown(
                (code == 12 && !payload.is_empty()).then_some(payload),
            ))
        }
        Raw::Array(_) | Raw::Map(_) if depth >= MAX_DEPTH => {
            return Err(MsgpackError::TooDeep {
                path: path_string(path),
                max: MAX_DEPTH,
            })
        }
        _ => {}
    }
    let depth = depth + 1;
    match (ty, raw) {
        (Type::Dynamic, Raw::Array(items)) if items.len() == 2 => walk_dynamic(items, path, depth),
        (Type::String, Raw::String(s)) => Ok(Value::String(utf8(s, path)?)),
        (Type::Bool, Raw::Boolean(b)) => Ok(Value::Bool(b)),
        (Type::Number, raw @ (Raw::Integer(_) | Raw::F32(_) | Raw::F64(_) | Raw::String(_))) => {
            number(raw, path)
        }
        (Type::List(t) | Type::Set(t), Raw::Array(items)) => walk_items(
            items.into_iter().map(|item| (item, t.as_ref())),
            path,
            depth,
        ),
        (Type::Tuple(ts), Raw::Array(items)) if items.len() == ts.len() => {
            walk_items(items.into_iter().zip(ts), path, depth)
        }
        (Type::Map(t), Raw::Map(pairs)) => {
            Ok(Value::Map(walk_pairs(pairs, path, depth, |_, _| {
                Ok(t.as_ref())
            })?))
        }
        (Type::Object(attrs), Raw::Map(pairs)) => walk_object(pairs, attrs, path, depth),
        (_, other) => Err(mismatch(ty, path, &other)),
    }
}

/// A value that is not of the type at `path`.
fn mismatch(ty: &Type, path: &[String], raw: &Raw) -> MsgpackError {
    MsgpackError::Mismatch {
        path: path_string(path),
        expected: ty.to_json().to_string(),
        found: describe(raw).into(),
    }
}

/// A dynamic value: `[type as JSON, value]`, the value walked with the type it names.
fn walk_dynamic(
    items: Vec<Raw>,
    path: &mut Vec<String>,
    depth: usize,
) -> Result<Value, MsgpackError> {
    let Ok([tj, v]) = <[Raw; 2]>::try_from(items) else {
        return Err(MsgpackError::Mismatch {
            path: path_string(path),
            expected: Type::Dynamic.to_json().to_string(),
            found: "an array of another length".into(),
        });
    };
    let tb = match &tj {
        Raw::Binary(b) => b.as_slice(),
        Raw::String(s) => s.as_bytes(),
        other => return Err(mismatch(&Type::Dynamic, path, other)),
    };
    let t = Type::from_json_bytes(tb).map_err(|source| MsgpackError::DynamicType {
        path: path_string(path),
        source,
    })?;
    let v = walk(v, &t, path, depth)?;
    Ok(Value::Dynamic(t, Box::new(v)))
}

/// A number: an integer (beyond `i64` kept as its decimal text), a float, or a string
/// holding a number (how Terraform sends numbers too large or precise for a float).
fn number(raw: Raw, path: &[String]) -> Result<Value, MsgpackError> {
    Ok(Value::Number(match raw {
        Raw::Integer(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Number::Int(i),
            (None, Some(u)) => Number::Big(u.to_string()),
            (None, None) => unreachable!("a msgpack integer fits i64 or u64"),
        },
        Raw::F32(f) => Number::Float(f64::from(f)),
        Raw::F64(f) => Number::Float(f),
        Raw::String(s) => {
            let s = utf8(s, path)?;
            if s.parse::<f64>().is_err() {
                return Err(MsgpackError::Mismatch {
                    path: path_string(path),
                    expected: "number".into(),
                    found: format!("string {s:?}"),
                });
            }
            Number::Big(s).normalized()
        }
        other => return Err(mismatch(&Type::Number, path, &other)),
    }))
}

/// The items of a list, set or tuple, each walked with its type; the path names the
/// index (`[i]`).
fn walk_items<'t>(
    items: impl Iterator<Item = (Raw, &'t Type)>,
    path: &mut Vec<String>,
    depth: usize,
) -> Result<Value, MsgpackError> {
    let mut out = Vec::new();
    for (i, (item, t)) in items.enumerate() {
        path.push(format!("[{i}]"));
        let v = walk(item, t, path, depth);
        path.pop();
        out.push(v?);
    }
    Ok(Value::List(out))
}

/// An object: only its attributes are allowed, and the attributes it leaves out are
/// null.
fn walk_object(
    pairs: Vec<(Raw, Raw)>,
    attrs: &BTreeMap<String, Type>,
    path: &mut Vec<String>,
    depth: usize,
) -> Result<Value, MsgpackError> {
    let mut out = walk_pairs(pairs, path, depth, |k, path| {
        attrs.get(k).ok_or_else(|| MsgpackError::Mismatch {
            path: path_string(path),
            expected: format!(
                "one of the attributes {:?}",
                attrs.keys().collect::<Vec<_>>()
            ),
            found: "an unexpected attribute".into(),
        })
    })?;
    for k in attrs.keys() {
        out.entry(k.clone()).or_insert(Value::Null);
    }
    Ok(Value::Map(out))
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

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        // Exactly MAX_DEPTH nested lists of strings decode; one more level is refused,
        // both by rmpv's reader and by the typed walk.
        let mut ty = Type::String;
        for _ in 0..MAX_DEPTH {
            ty = Type::list(ty);
        }
        let mut bytes = vec![0x91; MAX_DEPTH];
        bytes.extend_from_slice(&[0xa1, b'x']);
        assert!(decode(&bytes, &ty).is_ok());
        let deeper = Type::list(ty.clone());
        let mut bytes = vec![0x91; MAX_DEPTH + 1];
        bytes.extend_from_slice(&[0xa1, b'x']);
        assert!(matches!(
            decode(&bytes, &deeper),
            Err(MsgpackError::TooDeep { .. })
        ));
        // Hostile input: a hundred thousand nested arrays (and maps), whatever the type.
        for marker in [0x91u8, 0x81] {
            let mut bytes = vec![marker; 100_000];
            bytes.push(0xc0);
            for ty in [&Type::Dynamic, &ty] {
                let e = decode(&bytes, ty).unwrap_err();
                assert!(matches!(e, MsgpackError::TooDeep { .. }), "{e}");
            }
        }
        // Nested dynamic wrappers count as levels too.
        let mut bytes = Vec::new();
        for _ in 0..100_000 {
            bytes.extend_from_slice(&[0x92, 0xc4, 9]);
            bytes.extend_from_slice(b"\"dynamic\"");
        }
        bytes.push(0xc0);
        assert!(matches!(
            decode(&bytes, &Type::Dynamic),
            Err(MsgpackError::TooDeep { .. })
        ));
    }

    #[test]
    fn truncated_input_and_absurd_lengths_are_errors_not_panics() {
        let ty = obj(&[
            ("tags", Type::map(Type::String)),
            ("n", Type::Number),
            ("d", Type::Dynamic),
        ]);
        let v = Value::Map(BTreeMap::from([
            (
                "tags".to_string(),
                Value::Map(BTreeMap::from([("k".to_string(), Value::string("v"))])),
            ),
            ("n".to_string(), Value::Number(Number::Float(1.5))),
            (
                "d".to_string(),
                Value::Dynamic(Type::String, Box::new(Value::string("s"))),
            ),
        ]));
        let bytes = encode(&v, &ty).unwrap();
        assert_eq!(decode(&bytes, &ty).unwrap(), v);
        for cut in 0..bytes.len() {
            assert!(
                matches!(
                    decode(&bytes[..cut], &ty),
                    Err(MsgpackError::Truncated { .. })
                ),
                "cut at {cut}"
            );
        }
        // Headers claiming 4 GiB of elements, bytes or extension payload, with nothing behind.
        for head in [
            &[0xdd, 0xff, 0xff, 0xff, 0xff][..],   // array32
            &[0xdf, 0xff, 0xff, 0xff, 0xff],       // map32
            &[0xdb, 0xff, 0xff, 0xff, 0xff, b'a'], // str32
            &[0xc6, 0xff, 0xff, 0xff, 0xff, 0x00], // bin32
            &[0xc9, 0xff, 0xff, 0xff, 0xff, 0x0c], // ext32
        ] {
            for ty in [&Type::Dynamic, &Type::list(Type::String), &Type::String] {
                assert!(
                    matches!(decode(head, ty), Err(MsgpackError::Truncated { .. })),
                    "{head:x?}"
                );
            }
        }
    }
}

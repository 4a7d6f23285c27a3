//! What an import could not carry over (each field with its reason), what it changed
//! on the way (notes), and the one error kind of the mapping: a field at a JSON path
//! that cannot be imported.

use serde_json::Value;
use std::fmt;

/// A field at `path` that cannot be imported: the import stops, nothing is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

pub fn field_error(path: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        path: path.into(),
        message: message.into(),
    }
}

/// A two-valued setting: `None` for `default` (or unset), `Some(other)` for the
/// other value, an error at `path` for anything else.
pub fn either(
    v: Option<&str>,
    default: &str,
    other: &'static str,
    path: String,
) -> Result<Option<&'static str>, FieldError> {
    match v {
        None => Ok(None),
        Some(x) if x == default => Ok(None),
        Some(x) if x == other => Ok(Some(other)),
        Some(x) => Err(field_error(
            path,
            format!("{x:?}: expected {default} or {other}"),
        )),
    }
}

/// One reported field: its JSON path, its value when it is short, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub value: Option<String>,
    pub reason: String,
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{} = {}: {}", self.path, v, self.reason),
            None => write!(f, "{}: {}", self.path, self.reason),
        }
    }
}

/// The fields not carried over and the notes of one import, in input order.
#[derive(Debug, Default)]
pub struct Report {
    pub dropped: Vec<Entry>,
    pub notes: Vec<Entry>,
}

/// Why an unknown key is reported.
pub const UNKNOWN: &str = "not a field gpushare knows how to carry over (unknown to the importer)";

impl Report {
    /// A field not carried over, with the short form of its value.
    pub fn drop(&mut self, path: impl Into<String>, value: &Value, reason: impl Into<String>) {
        self.dropped.push(Entry {
            path: path.into(),
            value: short(value),
            reason: reason.into(),
        });
    }

    /// A field carried over with a change worth knowing.
    pub fn note(&mut self, path: impl Into<String>, reason: impl Into<String>) {
        self.notes.push(Entry {
            path: path.into(),
            value: None,
            reason: reason.into(),
        });
    }

    /// Report every key of the object `obj` (at `path`) that is not in `carried`:
    /// a key of `known` with its reason (unless its value is empty: null, [], {} or
    /// false carry nothing), any other key as unknown.
    pub fn keys(&mut self, obj: &Value, path: &str, carried: &[&str], known: &[(&str, &str)]) {
        let Some(map) = obj.as_object() else { return };
        for (k, v) in map {
            if carried.contains(&k.as_str()) {
                continue;
            }
            match known.iter().find(|(name, _)| name == k) {
                Some(_) if is_empty(v) => {}
                Some((_, reason)) => self.drop(join(path, k), v, *reason),
                None => self.drop(join(path, k), v, UNKNOWN),
            }
        }
    }

    /// The report as comment lines (`# ...`) for the top of the output.
    pub fn comment_lines(&self) -> Vec<String> {
        let mut out = vec![];
        if self.dropped.is_empty() {
            out.push("Every field was carried over.".to_string());
        } else {
            out.push(format!("Not carried over ({}):", self.dropped.len()));
            out.extend(self.dropped.iter().map(|e| format!("  - {e}")));
        }
        if !self.notes.is_empty() {
            out.push(format!("Notes ({}):", self.notes.len()));
            out.extend(self.notes.iter().map(|e| format!("  - {e}")));
        }
        out
    }
}

/// `path.key`, or `key` at the top.
pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// `path[i]`.
pub fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// The member `key` of `v` (null when absent).
pub fn at<'a>(v: &'a Value, key: &str) -> &'a Value {
    v.get(key).unwrap_or(&Value::Null)
}

/// The element `i` of the array `v` (null when absent).
pub fn nth(v: &Value, i: usize) -> &Value {
    v.get(i).unwrap_or(&Value::Null)
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// A value short enough to quote in a report line: a scalar as it reads (a string
/// without quotes), a short array as JSON; nothing for the rest.
fn short(v: &Value) -> Option<String> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(_) | Value::Bool(_) => v.to_string(),
        Value::Array(_) => v.to_string(),
        Value::Null | Value::Object(_) => return None,
    };
    (text.len() <= 80).then_some(text)
}

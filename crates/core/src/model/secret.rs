//! Secret values (`secret_env`): kept in the store for the host's agent, shown as
//! `(sensitive)` everywhere else, and redacted from the JSON shown to users.

use serde::{Deserialize, Serialize};

/// What a secret value is shown as, in plans, `show` and logs.
pub const SENSITIVE: &str = "(sensitive)";
/// What a secret value that a plan changes is shown as (its old value is [`SENSITIVE`]).
pub const SENSITIVE_CHANGED: &str = "(sensitive, changed)";

/// A secret string (a `secret_env` value). Serialised as itself, because the store
/// keeps it for the host's agent; `Debug` and `Display` show [`SENSITIVE`], so a
/// secret never reaches a log line or a message by formatting.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }
    /// The secret itself, for the one place that needs it (the container's environment).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(SENSITIVE)
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(SENSITIVE)
    }
}

/// Replaces every value under a `secret_env` key anywhere in `v` with [`SENSITIVE`]:
/// for JSON shown to users (`plan --json`, `show --json`) built from values that
/// hold secrets.
pub fn redact(v: &mut serde_json::Value) {
    redact_in(v, None);
}

/// Redacts `after` as [`redact`] does, but marks each secret whose value differs from
/// the same secret in `before` (matched by object key, and by `name` in lists of
/// named objects such as containers; absent counts as different) as
/// [`SENSITIVE_CHANGED`]: a plan's diff then shows that a secret changes without
/// showing it. Redact `before` itself with [`redact`].
pub fn redact_pair(before: &serde_json::Value, after: &mut serde_json::Value) {
    redact_in(after, Some(Some(before)));
}

/// `compare`: `None` to redact plainly; `Some(old)` to compare with `old` (`Some(None)`:
/// there is no old value at this place).
fn redact_in(v: &mut serde_json::Value, compare: Option<Option<&serde_json::Value>>) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                let old = compare.map(|o| o.and_then(|o| o.get(k)));
                if k == "secret_env" {
                    if let Value::Object(secrets) = v {
                        for (name, value) in secrets.iter_mut() {
                            let shown = match old {
                                Some(o) if o.and_then(|o| o.get(name)) != Some(&*value) => {
                                    SENSITIVE_CHANGED
                                }
                                _ => SENSITIVE,
                            };
                            *value = Value::String(shown.into());
                        }
                    }
                } else {
                    redact_in(v, old);
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let old = compare.map(|o| {
                    o.and_then(|o| match item.get("name") {
                        Some(n) => o.as_array()?.iter().find(|x| x.get("name") == Some(n)),
                        None => o.get(i),
                    })
                });
                redact_in(item, old);
            }
        }
        _ => {}
    }
}

//! Terraform's rules for provider answers, checked in Rust (Terraform checks the
//! same and fails the run with "Provider produced invalid plan" / "Provider
//! produced inconsistent result after apply"): the lifecycle tests (main.rs) run them
//! on every plan and apply response the core produces. Test code only: it is not part
//! of the provider (issue 53).
//!
//! Plan validity (for each attribute):
//! - not computed: the planned value equals the configuration value (unknown stays unknown);
//! - optional + computed: a non-null configuration value is planned as is; a null one
//!   may be planned as the prior value or unknown;
//! - computed only: on update, the prior value or unknown; on create, anything;
//! - nested blocks recurse element by element and keep the configuration's count.
//!
//! Apply consistency: the new state is wholly known, and every value known in the
//! plan is unchanged in the new state.

use gpushare_core::schema::{BlockLike, Nesting};
use gpushare_provider::cty::Value;

fn at(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// Checks a planned value against the configuration and the prior state
/// (`prior` is `Value::Null` on create). Returns every violation found.
pub fn plan_valid(
    schema: &dyn BlockLike,
    prior: &Value,
    config: &Value,
    planned: &Value,
) -> Vec<String> {
    let mut out = Vec::new();
    if config.is_null() {
        if !planned.is_null() {
            out.push("planned a value for a resource whose configuration is null".into());
        }
        return out;
    }
    block_valid(schema, prior, config, planned, "", &mut out);
    out
}

fn block_valid(
    schema: &dyn BlockLike,
    prior: &Value,
    config: &Value,
    planned: &Value,
    path: &str,
    out: &mut Vec<String>,
) {
    let null = Value::Null;
    let get = |v: &'_ Value, n: &str| -> Value { v.attr(n).cloned().unwrap_or(Value::Null) };
    for a in schema.attributes() {
        let (p, c, pl) = (
            get(prior, &a.name),
            get(config, &a.name),
            get(planned, &a.name),
        );
        let here = at(path, &a.name);
        // Not computed, or set in the configuration: planned exactly as configured.
        if !a.computed || (a.is_argument() && !c.is_null()) {
            if c != pl {
                out.push(format!(
                    "{here}: planned {pl:?} but the configuration has {c:?}"
                ));
            }
        } else if !prior.is_null() && !pl.is_unknown() && pl != p {
            out.push(format!(
                "{here}: planned {pl:?}, neither unknown nor the prior value {p:?}"
            ));
        }
    }
    for b in schema.blocks() {
        let (p, c, pl) = (
            get(prior, &b.name),
            get(config, &b.name),
            get(planned, &b.name),
        );
        let here = at(path, &b.name);
        match (b.nesting, &c, &pl) {
            (_, Value::Null, Value::Null) => {}
            (_, Value::Unknown(_), Value::Unknown(_)) => {}
            (Nesting::Single, Value::Map(_), Value::Map(_)) => {
                let pp = if p.is_null() { &null } else { &p };
                block_valid(b, pp, &c, &pl, &here, out)
            }
            (Nesting::List | Nesting::Set, Value::List(cs), Value::List(ps)) => {
                if cs.len() != ps.len() {
                    out.push(format!(
                        "{here}: planned {} blocks, the configuration has {}",
                        ps.len(),
                        cs.len()
                    ));
                    continue;
                }
                let priors = match &p {
                    Value::List(v) => v.clone(),
                    _ => vec![],
                };
                for (i, (ci, pi)) in cs.iter().zip(ps).enumerate() {
                    block_valid(
                        b,
                        priors.get(i).unwrap_or(&null),
                        ci,
                        pi,
                        &format!("{here}[{i}]"),
                        out,
                    );
                }
            }
            (Nesting::Map, Value::Map(cs), Value::Map(ps)) => {
                if cs.keys().ne(ps.keys()) {
                    out.push(format!(
                        "{here}: planned block keys differ from the configuration"
                    ));
                    continue;
                }
                for (k, ci) in cs {
                    let pi = p.attr(k).unwrap_or(&null);
                    block_valid(b, pi, ci, &ps[k], &format!("{here}[{k:?}]"), out);
                }
            }
            _ => out.push(format!(
                "{here}: planned {pl:?} does not match the configuration's {c:?}"
            )),
        }
    }
}

/// Checks a new state from apply against the planned state.
pub fn apply_consistent(planned: &Value, new: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if !new.is_wholly_known() {
        out.push("the new state holds unknown values".into());
    }
    compat(planned, new, "", &mut out);
    out
}

fn compat(planned: &Value, new: &Value, path: &str, out: &mut Vec<String>) {
    match (planned, new) {
        (Value::Unknown(_), _) => {}
        (Value::List(a), Value::List(b)) => {
            if a.len() != b.len() {
                out.push(format!(
                    "{}: planned {} elements, got {}",
                    if path.is_empty() { "(root)" } else { path },
                    a.len(),
                    b.len()
                ));
                return;
            }
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                compat(x, y, &format!("{path}[{i}]"), out);
            }
        }
        (Value::Map(a), Value::Map(b)) => {
            for (k, x) in a {
                compat(x, b.get(k).unwrap_or(&Value::Null), &at(path, k), out);
            }
            for k in b.keys().filter(|k| !a.contains_key(*k)) {
                out.push(format!("{}: not planned", at(path, k)));
            }
        }
        (a, b) => {
            if a != b {
                out.push(format!(
                    "{}: planned {a:?}, got {b:?}",
                    if path.is_empty() { "(root)" } else { path }
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpushare_core::model::ResourceKind;
    use gpushare_core::schema::schema;
    use gpushare_provider::schema::resource_type;

    fn v(j: serde_json::Value) -> Value {
        Value::from_json(&j, resource_type(ResourceKind::Service)).unwrap()
    }

    #[test]
    fn catches_a_changed_argument_and_a_changed_computed_value() {
        let s = schema(ResourceKind::Service);
        let prior = v(
            serde_json::json!({"name": "a", "id": "a", "task_definition": "t", "capacity_provider": "p", "desired_count": 1, "running_count": 1}),
        );
        let config = v(
            serde_json::json!({"name": "a", "task_definition": "t", "capacity_provider": "p", "desired_count": 2}),
        );
        let mut bad = config.clone();
        if let Value::Map(m) = &mut bad {
            m.insert("desired_count".into(), Value::int(3));
            m.insert("running_count".into(), Value::int(7));
            m.insert("id".into(), Value::string("a"));
        }
        let errs = plan_valid(s, &prior, &config, &bad);
        assert_eq!(errs.len(), 2, "{errs:?}");
        let mut good = config.clone();
        if let Value::Map(m) = &mut good {
            m.insert("running_count".into(), Value::unknown());
            m.insert("id".into(), Value::string("a"));
        }
        assert!(plan_valid(s, &prior, &config, &good).is_empty());
    }

    #[test]
    fn apply_must_keep_known_planned_values() {
        let planned = v(serde_json::json!({"name": "a", "desired_count": 2}));
        let mut planned = planned;
        if let Value::Map(m) = &mut planned {
            m.insert("running_count".into(), Value::unknown());
        }
        let mut new = v(serde_json::json!({"name": "a", "desired_count": 2, "running_count": 2}));
        assert!(apply_consistent(&planned, &new).is_empty());
        if let Value::Map(m) = &mut new {
            m.insert("desired_count".into(), Value::int(3));
        }
        assert_eq!(apply_consistent(&planned, &new).len(), 1);
        assert_eq!(
            apply_consistent(&planned, &planned).len(),
            1,
            "unknown left in new state"
        );
    }
}

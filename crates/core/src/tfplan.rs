//! A plan in Terraform's JSON plan representation (`terraform show -json PLANFILE`,
//! format 1.2), so tools that read Terraform plans (policy checks such as OPA or
//! conftest, cost tools) read gpushare's plans too.
//!
//! Each gpushare resource appears as the Terraform provider's resource of the same
//! name would (`service.embedder` is `gpushare_service.embedder`), with the same
//! attribute names and nesting, so one policy serves both ways of running gpushare.
//! What only gpushare knows (hosts to launch and retire, where every task lands, the
//! cost) is under the top-level key `gpushare` ([`crate::render::plan_json`]).
//!
//! Differences from Terraform's own output, deliberate:
//! - values of `secret_env` are shown as `(sensitive)` (Terraform writes sensitive
//!   values in clear and only marks them in `after_sensitive`; both are marked here);
//! - attributes left at their default are written with the default's value (the
//!   Terraform provider leaves them null when the configuration omits them), and
//!   computed attributes (`placements`, `host_ids`, ...) are not written: the
//!   `gpushare` section has them;
//! - there is no `configuration`, `prior_state` or `variables` section.

use crate::model::{Desired, ResourceAddr};
use crate::plan::{Action, Plan};
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

/// The Terraform JSON plan format version written.
pub const TERRAFORM_PLAN_FORMAT: &str = "1.2";

/// The provider address Terraform gives gpushare's resources.
pub const PROVIDER_NAME: &str = "registry.terraform.io/gpushare/gpushare";

/// One resource's change: its address, Terraform's actions, before and after, and
/// the attributes that force a replacement (`[["instance_type"]]`).
struct Change {
    addr: ResourceAddr,
    actions: Vec<&'static str>,
    before: Option<Value>,
    after: Option<Value>,
    replace_paths: Vec<Vec<String>>,
}

/// `plan` as Terraform's JSON plan representation. `desired` (the configuration the
/// plan was made from) lists the resources that do not change (`["no-op"]`), as
/// Terraform does; without it only the changes are listed.
pub fn terraform_plan_json(plan: &Plan, desired: Option<&Desired>) -> Value {
    let mut changes: Vec<Change> = plan
        .resource_changes
        .iter()
        .map(|rc| Change {
            addr: rc.addr.clone(),
            actions: match rc.action {
                Action::Create => vec!["create"],
                Action::Update => vec!["update"],
                Action::Replace => vec!["delete", "create"],
                Action::Delete => vec!["delete"],
            },
            before: rc.before.clone(),
            after: rc.after.clone(),
            replace_paths: rc
                .changes
                .iter()
                .filter(|c| c.forces_replacement)
                .map(|c| vec![c.name.clone()])
                .collect(),
        })
        .collect();
    if let Some(d) = desired.filter(|_| !plan.destroy) {
        let changed: BTreeSet<ResourceAddr> = changes.iter().map(|c| c.addr.clone()).collect();
        for (addr, attrs) in d.resources() {
            if !changed.contains(&addr) {
                changes.push(Change {
                    addr,
                    actions: vec!["no-op"],
                    before: Some(attrs.clone()),
                    after: Some(attrs),
                    replace_paths: vec![],
                });
            }
        }
    }
    changes.sort_by_key(|c| address(&c.addr));

    let mut resource_changes = Vec::with_capacity(changes.len());
    let mut planned = Vec::new();
    for c in changes {
        let before = c.before.map(|v| values(&c.addr, v));
        let after = c.after.map(|v| values(&c.addr, v));
        let mask = |v: &Option<Value>| v.as_ref().map_or(Value::Bool(false), sensitive_mask);
        let shown_after = after.as_ref().map(redacted);
        if let Some(values) = &shown_after {
            let mut r = identity(&c.addr);
            r.insert("schema_version".into(), json!(0));
            r.insert("values".into(), values.clone());
            r.insert("sensitive_values".into(), mask(&after));
            planned.push(Value::Object(r));
        }
        let mut change = json!({
            "actions": c.actions,
            "before": before.as_ref().map(redacted),
            "after": shown_after,
            "after_unknown": {},
            "before_sensitive": mask(&before),
            "after_sensitive": mask(&after),
        });
        let mut rc = identity(&c.addr);
        if c.actions == ["delete", "create"] {
            change["replace_paths"] = json!(c.replace_paths);
            rc.insert(
                "action_reason".into(),
                json!("replace_because_cannot_update"),
            );
        }
        rc.insert("change".into(), change);
        resource_changes.push(Value::Object(rc));
    }
    json!({
        "format_version": TERRAFORM_PLAN_FORMAT,
        "applyable": !plan.is_empty(),
        "complete": true,
        "errored": false,
        "planned_values": { "root_module": { "resources": planned } },
        "resource_changes": resource_changes,
        "gpushare": crate::render::plan_json(plan),
    })
}

/// The machine-readable UI version of the messages [`ui_messages`] writes (what
/// Terraform 1.11 writes in its `version` message).
pub const TERRAFORM_UI_VERSION: &str = "1.2";

/// `plan` as the stream of Terraform's machine-readable UI messages that `terraform
/// plan -json` prints, one JSON object per line: a `version` message, one
/// `planned_change` per resource that changes (sorted by address, actions `create`,
/// `update`, `replace` with reason `cannot_update`, `delete`), a `gpushare_plan`
/// message holding gpushare's own plan ([`crate::render::plan_json`], a message type
/// Terraform's consumers skip as the format asks them to skip types they do not know),
/// and the `change_summary` last. Resources are named as the Terraform provider names
/// them (`gpushare_service.embedder`), so a consumer of `terraform plan -json` through
/// the provider reads gpushare's stream the same way. `timestamp` is written to every
/// message's `@timestamp`; `version` is gpushare's.
pub fn ui_messages(plan: &Plan, timestamp: &str, version: &str) -> Vec<Value> {
    let message = |level: &str, text: String, kind: &str, body: Value| {
        let mut m = Map::new();
        m.insert("@level".into(), json!(level));
        m.insert("@message".into(), json!(text));
        m.insert("@module".into(), json!("gpushare.ui"));
        m.insert("@timestamp".into(), json!(timestamp));
        if let Value::Object(b) = body {
            m.extend(b);
        }
        m.insert("type".into(), json!(kind));
        Value::Object(m)
    };
    let mut out = vec![message(
        "info",
        format!("gpushare {version}"),
        "version",
        json!({ "gpushare": version, "ui": TERRAFORM_UI_VERSION }),
    )];
    let mut changes: Vec<_> = plan.resource_changes.iter().collect();
    changes.sort_by_key(|rc| address(&rc.addr));
    let (mut add, mut change, mut remove) = (0, 0, 0);
    for rc in changes {
        let (action, verb) = match rc.action {
            Action::Create => ("create", "create"),
            Action::Update => ("update", "update"),
            Action::Replace => ("replace", "replace"),
            Action::Delete => ("delete", "delete"),
        };
        match rc.action {
            Action::Create => add += 1,
            Action::Update => change += 1,
            Action::Replace => {
                add += 1;
                remove += 1;
            }
            Action::Delete => remove += 1,
        }
        let addr = address(&rc.addr);
        let mut body = json!({
            "resource": {
                "addr": addr,
                "module": "",
                "resource": addr,
                "implied_provider": "gpushare",
                "resource_type": type_name(&rc.addr),
                "resource_name": rc.addr.name,
                "resource_key": null,
            },
            "action": action,
        });
        if rc.action == Action::Replace {
            body["reason"] = json!("cannot_update");
        }
        out.push(message(
            "info",
            format!("{addr}: Plan to {verb}"),
            "planned_change",
            json!({ "change": body }),
        ));
    }
    out.push(message(
        "info",
        format!("gpushare: {}", crate::render::summary_line(plan)),
        "gpushare_plan",
        json!({ "gpushare": crate::render::plan_json(plan) }),
    ));
    out.push(message(
        "info",
        format!("Plan: {add} to add, {change} to change, {remove} to destroy."),
        "change_summary",
        json!({ "changes": {
            "add": add, "change": change, "import": 0, "remove": remove,
            // Terraform says "plan" for a -destroy plan too ("destroy" is for terraform destroy).
            "operation": "plan",
        } }),
    ));
    out
}

/// What names a resource in Terraform's JSON: address, mode, type, name, provider.
fn identity(addr: &ResourceAddr) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("address".into(), json!(address(addr)));
    m.insert("mode".into(), json!("managed"));
    m.insert("type".into(), json!(type_name(addr)));
    m.insert("name".into(), json!(addr.name));
    m.insert("provider_name".into(), json!(PROVIDER_NAME));
    m
}

/// `gpushare_service.embedder` for `service.embedder`.
fn address(addr: &ResourceAddr) -> String {
    format!("{}.{}", type_name(addr), addr.name)
}

fn type_name(addr: &ResourceAddr) -> String {
    format!("gpushare_{}", addr.kind.as_str())
}

/// A resource's attributes as the provider's resource holds them: its `name` too.
fn values(addr: &ResourceAddr, mut v: Value) -> Value {
    if let Value::Object(m) = &mut v {
        m.insert("name".into(), Value::String(addr.name.clone()));
    }
    v
}

fn redacted(v: &Value) -> Value {
    let mut v = v.clone();
    crate::model::redact(&mut v);
    v
}

/// Terraform's sensitivity mask of a value: `true` at every `secret_env`, objects and
/// arrays mirrored down to them, `{}` / `[]` / `false` elsewhere.
fn sensitive_mask(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, x) in m {
                if k == "secret_env" {
                    out.insert(k.clone(), Value::Bool(true));
                    continue;
                }
                match sensitive_mask(x) {
                    Value::Bool(false) => {}
                    Value::Object(o) if o.is_empty() => {}
                    Value::Array(a)
                        if a.iter()
                            .all(|e| e == &Value::Bool(false) || e == &json!({})) => {}
                    mask => {
                        out.insert(k.clone(), mask);
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(sensitive_mask).collect()),
        _ => Value::Bool(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked_and_redacted() {
        let v = json!({ "container": [{ "name": "a", "secret_env": { "K": "v" }, "env": { "X": "1" } }] });
        assert_eq!(
            sensitive_mask(&v),
            json!({ "container": [{ "secret_env": true }] })
        );
        let r = redacted(&v);
        assert_eq!(
            r["container"][0]["secret_env"]["K"],
            crate::model::SENSITIVE
        );
        assert_eq!(r["container"][0]["env"]["X"], "1");
        assert_eq!(sensitive_mask(&json!({ "a": [1, 2] })), json!({}));
    }
}

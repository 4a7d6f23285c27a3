//! The computed attributes of a resource from the store state: a pool's hosts and
//! hourly cost, a service's placements and deployment, a job's progress.

use crate::cty::Value;
use gpushare_core::model::{ResourceKind, StoreState};
use std::collections::BTreeMap;

/// The computed attributes of resource `kind.name` as the store has them now; a
/// pool's `hourly_cost` at the prices of `prices` (the plans' prices; the built-in
/// table where none is known).
pub fn computed(
    kind: ResourceKind,
    name: &str,
    state: &StoreState,
    prices: Option<&gpushare_core::catalog::PriceBook>,
) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    out.insert("id".to_string(), Value::string(name));
    let strings = |v: Vec<String>| Value::List(v.into_iter().map(Value::String).collect());
    match kind {
        ResourceKind::CapacityProvider => {
            let mut ids: Vec<String> = state
                .hosts
                .values()
                .filter(|h| {
                    h.capacity_provider == name && h.gpu_instance.is_none() && h.state.is_active()
                })
                .map(|h| h.id.clone())
                .collect();
            ids.sort();
            out.insert("desired_size".into(), Value::int(ids.len() as i64));
            out.insert("host_ids".into(), strings(ids));
            let cost: f64 = state
                .hosts
                .values()
                .filter(|h| h.capacity_provider == name && h.state.is_active())
                .filter_map(|h| match prices {
                    Some(book) => {
                        gpushare_core::plan::host_price_in_book(book, state, h).map(|p| p.per_hour)
                    }
                    None => gpushare_core::plan::host_price_in(state, h),
                })
                .sum();
            // Whole cents, so a refresh finds the same number again.
            let cents = (cost * 100.0).round();
            out.insert(
                "hourly_cost".into(),
                Value::Number(crate::cty::Number::Float(cents / 100.0).normalized()),
            );
        }
        ResourceKind::GpuInstance => {
            let host = state
                .hosts
                .values()
                .find(|h| h.gpu_instance.as_deref() == Some(name) && h.state.is_active());
            let s = |o: Option<String>| o.map(Value::String).unwrap_or(Value::Null);
            out.insert("host_id".into(), s(host.map(|h| h.id.clone())));
            out.insert(
                "instance_id".into(),
                s(host.and_then(|h| h.instance_id.clone())),
            );
            out.insert(
                "state".into(),
                s(host.map(|h| {
                    serde_json::to_value(h.state)
                        .ok()
                        .and_then(|j| j.as_str().map(str::to_string))
                        .unwrap_or_default()
                })),
            );
        }
        ResourceKind::Job => {
            let rec = state.job(name);
            out.insert(
                "state".into(),
                rec.map_or(Value::Null, |r| Value::string(r.state.to_string())),
            );
            let done = rec.map_or(0, |r| r.counts(u32::MAX).succeeded);
            out.insert("succeeded".into(), Value::int(i64::from(done)));
        }
        ResourceKind::TaskDefinition => {
            let rev = state
                .revisions
                .get(name)
                .and_then(|r| r.last())
                .map(|r| i64::from(r.revision));
            out.insert(
                "revision".into(),
                rev.map(Value::int).unwrap_or(Value::Null),
            );
        }
        ResourceKind::Service => {
            let mut tasks: Vec<_> = state.tasks.values().filter(|t| t.service == name).collect();
            tasks.sort_by(|a, b| a.id.cmp(&b.id));
            let rev = tasks.iter().map(|t| t.revision).max();
            out.insert(
                "task_definition_revision".into(),
                rev.map(|r| Value::int(i64::from(r))).unwrap_or(Value::Null),
            );
            out.insert("running_count".into(), Value::int(tasks.len() as i64));
            out.insert(
                "placements".into(),
                strings(tasks.iter().map(|t| placement_string(t)).collect()),
            );
            deployment_attrs(&mut out, state.deployment(name));
        }
    }
    out
}

/// A service's `deployment_*` attributes from its last deployment record (all null
/// before its first deployment), as `gpushare show --json` gives the record.
fn deployment_attrs(
    out: &mut BTreeMap<String, Value>,
    d: Option<&gpushare_core::model::DeploymentRecord>,
) {
    let s = |o: Option<String>| o.map_or(Value::Null, Value::String);
    let n = |o: Option<u32>| o.map_or(Value::Null, |n| Value::int(i64::from(n)));
    for (k, v) in [
        ("deployment_id", s(d.map(|d| d.id.clone()))),
        ("deployment_revision", n(d.map(|d| d.revision))),
        (
            "deployment_previous_revision",
            n(d.and_then(|d| d.previous)),
        ),
        ("deployment_state", s(d.map(|d| d.state.as_str().into()))),
        ("deployment_failed_tasks", n(d.map(|d| d.failed_tasks))),
        ("deployment_reason", s(d.and_then(|d| d.reason.clone()))),
    ] {
        out.insert(k.into(), v);
    }
}

/// `task@host/gpu[,gpu]` (`-` when the task has no GPU).
pub fn placement_string(t: &gpushare_core::model::Task) -> String {
    let gpus = if t.gpus.is_empty() {
        "-".to_string()
    } else {
        t.gpus
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    format!("{}@{}/{}", t.id, t.host, gpus)
}

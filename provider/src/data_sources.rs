//! The data sources' reads: an instance type from gpushare's catalogue, and the
//! placements of a service or pool from the store.

use crate::cty::Value;
use crate::diag::{attr_path, Diag};
use crate::{resource, schema};
use gpushare_core::model::StoreState;
use std::collections::BTreeMap;

pub(crate) fn read_instance_type(config: &Value) -> (Value, Vec<Diag>) {
    let Some(name) = config.attr("name").and_then(Value::as_str) else {
        return (
            Value::Null,
            vec![Diag::error("Missing name", "name is required").at(attr_path(&["name"]))],
        );
    };
    let t = match gpushare_core::catalog::require(name) {
        Ok(t) => t,
        Err(e) => {
            return (
                Value::Null,
                vec![Diag::error("Unknown instance type", e.to_string()).at(attr_path(&["name"]))],
            )
        }
    };
    let j = serde_json::json!({
        "name": name, "id": name, "gpu_model": t.gpu_model, "gpu_count": t.gpu_count,
        "gpu_memory_mib": t.gpu_memory_mib, "vcpus": t.vcpus, "memory_mib": t.memory_mib,
        "price_per_hour": t.price_per_hour, "fractional": t.fractional,
    });
    match Value::from_json(
        &j,
        schema::data_source_type(schema::INSTANCE_TYPE_DATA).unwrap_or(&crate::cty::Type::Dynamic),
    ) {
        Ok(v) => (v, vec![]),
        Err(e) => (
            Value::Null,
            vec![Diag::error("Internal error", e.to_string())],
        ),
    }
}

pub(crate) fn placements(config: &Value, state: &StoreState) -> Value {
    let service = config.attr("service").and_then(Value::as_str);
    let pool = config.attr("capacity_provider").and_then(Value::as_str);
    let host_ok =
        |h: &str| pool.is_none_or(|p| state.hosts.get(h).is_some_and(|x| x.capacity_provider == p));
    let mut tasks: Vec<_> = state
        .tasks
        .values()
        .filter(|t| service.is_none_or(|s| t.service == s) && host_ok(&t.host))
        .collect();
    tasks.sort_by(|a, b| a.id.cmp(&b.id));
    let mut hosts: Vec<String> = tasks.iter().map(|t| t.host.clone()).collect();
    if service.is_none() {
        if let Some(p) = pool {
            hosts.extend(
                state
                    .hosts
                    .values()
                    .filter(|h| h.capacity_provider == p && h.state.is_active())
                    .map(|h| h.id.clone()),
            );
        }
    }
    hosts.sort();
    hosts.dedup();
    let mut gpus: Vec<(String, u32)> = tasks
        .iter()
        .flat_map(|t| t.gpus.iter().map(move |g| (t.host.clone(), *g)))
        .collect();
    gpus.sort();
    gpus.dedup();
    let mem: u64 = tasks.iter().map(|t| t.gpu_memory_mib()).sum();
    let strings = |v: Vec<String>| Value::List(v.into_iter().map(Value::String).collect());
    let opt = |o: Option<&str>| o.map(Value::string).unwrap_or(Value::Null);
    Value::Map(BTreeMap::from([
        ("service".to_string(), opt(service)),
        ("capacity_provider".to_string(), opt(pool)),
        (
            "id".to_string(),
            Value::string(format!(
                "{}/{}",
                service.unwrap_or("*"),
                pool.unwrap_or("*")
            )),
        ),
        (
            "placements".to_string(),
            strings(
                tasks
                    .iter()
                    .map(|t| resource::placement_string(t))
                    .collect(),
            ),
        ),
        (
            "task_ids".to_string(),
            strings(tasks.iter().map(|t| t.id.clone()).collect()),
        ),
        ("host_ids".to_string(), strings(hosts)),
        ("gpus_in_use".to_string(), Value::int(gpus.len() as i64)),
        ("gpu_memory_mib".to_string(), Value::int(mem as i64)),
    ]))
}

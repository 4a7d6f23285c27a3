//! Resources between Terraform values and gpushare's model.
//!
//! - [`model_json`]: a Terraform object value to the model's JSON (the form
//!   `Desired::resources()` and the store use): null attributes are left out so the
//!   model's serde defaults apply; `name`, `id` and computed-only attributes drop.
//! - [`state_from_model`]: the reverse, for import and drift: values equal to the
//!   schema's default become null, so a configuration that omits them plans clean.
//! - [`validate`]: schema-level checks with attribute paths (ranges, enums,
//!   patterns, whole numbers) and the semantic checks that need no other resource.
//! - [`computed`]: the computed attributes of a resource from the store state.

use crate::cty::Value;
use crate::diag::{AttrPath, Diag, PathStep};
use gpushare_core::model::{
    CapacityProvider, GpuInstance, Market, ResourceAddr, ResourceKind, Service, TaskDefinition,
};
use gpushare_core::schema::{Attribute, BlockLike, Nesting};
use std::collections::BTreeMap;

mod computed;
pub use computed::{computed, placement_string};

/// The model JSON of a resource value (see the module docs). `Err` names an unknown value's path.
pub fn model_json(
    schema: &dyn BlockLike,
    v: &Value,
    top: bool,
) -> Result<serde_json::Value, Vec<String>> {
    let mut out = serde_json::Map::new();
    for a in schema.attributes() {
        if a.is_computed_only() || (top && (a.name == "name" || a.name == "id")) {
            continue;
        }
        match v.attr(&a.name) {
            None | Some(Value::Null) => {}
            Some(x) => {
                let j = x.to_json().map_err(|mut p| {
                    p.insert(0, a.name.clone());
                    p
                })?;
                out.insert(a.name.clone(), j);
            }
        }
    }
    for b in schema.blocks() {
        let Some(x) = v.attr(&b.name) else { continue };
        let j = match (b.nesting, x) {
            (_, Value::Null) => continue,
            (_, Value::Unknown(_)) => return Err(vec![b.name.clone()]),
            (Nesting::Single, obj) => model_json(b, obj, false).map_err(|mut p| {
                p.insert(0, b.name.clone());
                p
            })?,
            (Nesting::List | Nesting::Set, Value::List(items)) => {
                let mut arr = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    arr.push(model_json(b, item, false).map_err(|mut p| {
                        p.insert(0, format!("{}[{i}]", b.name));
                        p
                    })?);
                }
                serde_json::Value::Array(arr)
            }
            (Nesting::Map, Value::Map(m)) => {
                let mut o = serde_json::Map::new();
                for (k, item) in m {
                    o.insert(
                        k.clone(),
                        model_json(b, item, false).map_err(|mut p| {
                            p.insert(0, format!("{}[{k:?}]", b.name));
                            p
                        })?,
                    );
                }
                serde_json::Value::Object(o)
            }
            _ => continue,
        };
        out.insert(b.name.clone(), j);
    }
    Ok(serde_json::Value::Object(out))
}

fn json_eq(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    match (a, b) {
        (serde_json::Value::Number(x), serde_json::Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn is_default(a: &Attribute, v: &serde_json::Value) -> bool {
    match &a.default {
        Some(d) => json_eq(d, v),
        None => v.is_null(),
    }
}

/// The Terraform value of a block from model JSON, defaults as null. `None`: the block is all defaults.
fn block_from_model(schema: &dyn BlockLike, j: &serde_json::Value) -> Value {
    let mut out = BTreeMap::new();
    for a in schema.attributes() {
        let v = j.get(&a.name).unwrap_or(&serde_json::Value::Null);
        let val = if a.is_computed_only() || is_default(a, v) {
            Value::Null
        } else {
            Value::from_json(v, &crate::schema::attr_type(&a.ty)).unwrap_or(Value::Null)
        };
        out.insert(a.name.clone(), val);
    }
    for b in schema.blocks() {
        let v = j.get(&b.name).unwrap_or(&serde_json::Value::Null);
        let val = match (b.nesting, v) {
            (_, serde_json::Value::Null) => Value::Null,
            (Nesting::Single, o) => {
                let inner = block_from_model(b, o);
                let all_null = matches!(&inner, Value::Map(m) if m.values().all(Value::is_null));
                if all_null && b.min_items == 0 {
                    Value::Null
                } else {
                    inner
                }
            }
            (Nesting::List | Nesting::Set, serde_json::Value::Array(items)) => {
                if items.is_empty() && b.min_items == 0 {
                    Value::Null
                } else {
                    Value::List(items.iter().map(|i| block_from_model(b, i)).collect())
                }
            }
            (Nesting::Map, serde_json::Value::Object(m)) => Value::Map(
                m.iter()
                    .map(|(k, i)| (k.clone(), block_from_model(b, i)))
                    .collect(),
            ),
            _ => Value::Null,
        };
        out.insert(b.name.clone(), val);
    }
    Value::Map(out)
}

/// The state value of resource `name` from its model JSON; computed attributes are null (see [`computed`]).
pub fn state_from_model(schema: &dyn BlockLike, name: &str, j: &serde_json::Value) -> Value {
    let mut v = block_from_model(schema, j);
    if let Value::Map(m) = &mut v {
        m.insert("name".into(), Value::string(name));
    }
    v
}

/// The model JSON with the model's defaults filled in (deserialised and serialised
/// again), to compare two resources semantically. `None` when it does not deserialise.
pub fn canonical(kind: ResourceKind, j: &serde_json::Value) -> Option<serde_json::Value> {
    fn via<T: serde::de::DeserializeOwned + serde::Serialize>(
        j: &serde_json::Value,
    ) -> Option<serde_json::Value> {
        serde_json::from_value::<T>(j.clone())
            .ok()
            .and_then(|t| serde_json::to_value(t).ok())
    }
    match kind {
        ResourceKind::CapacityProvider => via::<CapacityProvider>(j),
        ResourceKind::GpuInstance => via::<GpuInstance>(j),
        ResourceKind::TaskDefinition => via::<TaskDefinition>(j),
        ResourceKind::Service => via::<Service>(j),
        ResourceKind::Job => via::<gpushare_core::model::Job>(j),
    }
}

// ---------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------

/// Schema checks for a (possibly partly unknown) configuration value.
pub fn validate_block(schema: &dyn BlockLike, v: &Value, path: &mut AttrPath, out: &mut Vec<Diag>) {
    for a in schema.attributes() {
        let Some(x) = v.attr(&a.name) else { continue };
        if x.is_null() || !x.is_wholly_known() {
            continue;
        }
        path.push(PathStep::Attr(a.name.clone()));
        if let Ok(j) = x.to_json() {
            if let Some(n) = j.as_f64() {
                if n.fract() != 0.0 {
                    out.push(
                        Diag::error(
                            "Invalid value",
                            format!("{} must be a whole number, got {n}", a.name),
                        )
                        .at(path.clone()),
                    );
                }
            }
            // The same range, enum and pattern checks as the loader's (one validation path).
            if let Err(e) = gpushare_config::check_validation(&j, &a.validation) {
                out.push(Diag::error("Invalid value", format!("{}: {e}", a.name)).at(path.clone()));
            }
        }
        path.pop();
    }
    for b in schema.blocks() {
        let Some(x) = v.attr(&b.name) else { continue };
        path.push(PathStep::Attr(b.name.clone()));
        match x {
            Value::List(items) => {
                for (i, item) in items.iter().enumerate() {
                    path.push(PathStep::Index(i as i64));
                    validate_block(b, item, path, out);
                    path.pop();
                }
            }
            Value::Map(_) if b.nesting == Nesting::Single => validate_block(b, x, path, out),
            Value::Map(m) => {
                for (k, item) in m {
                    path.push(PathStep::Key(k.clone()));
                    validate_block(b, item, path, out);
                    path.pop();
                }
            }
            _ => {}
        }
        path.pop();
    }
}

fn p(names: &[&str]) -> AttrPath {
    crate::diag::attr_path(names)
}

/// Maps a gpushare dotted path (`task_definition.NAME.container.server.gpu.mps.memory`,
/// list blocks addressed by their label) to a Terraform attribute path on value `v`.
pub fn terraform_path(kind: ResourceKind, dotted: &str, v: &Value) -> Option<AttrPath> {
    let mut segs = dotted.split('.').skip(2).peekable();
    let mut block: &dyn BlockLike = gpushare_core::schema::schema(kind);
    let mut cur = v;
    let mut out = Vec::new();
    while let Some(seg) = segs.next() {
        out.push(PathStep::Attr(seg.to_string()));
        if block.attribute(seg).is_some() {
            return segs.peek().is_none().then_some(out);
        }
        let b = block.block(seg)?;
        cur = cur.attr(seg)?;
        if matches!(b.nesting, Nesting::List | Nesting::Set) {
            let label_attr = b.label.as_deref().unwrap_or("name");
            let Some(label) = segs.next() else {
                return Some(out);
            };
            let Value::List(items) = cur else {
                return Some(out);
            };
            let i = items
                .iter()
                .position(|x| x.attr(label_attr).and_then(Value::as_str) == Some(label))?;
            out.push(PathStep::Index(i as i64));
            cur = &items[i];
        }
        block = b;
    }
    Some(out)
}

/// gpushare's own validation of one resource (`gpushare_config::validate_resource`,
/// as `gpushare validate` runs it), with its paths mapped to Terraform's.
fn engine_validation(kind: ResourceKind, v: &Value) -> Vec<Diag> {
    let Some(name) = v.attr("name").and_then(Value::as_str) else {
        return vec![];
    };
    let Ok(attrs) = model_json(gpushare_core::schema::schema(kind), v, true) else {
        return vec![];
    };
    gpushare_config::validate_resource(kind, name, &attrs)
        .into_iter()
        .map(|d| {
            let diag = to_diag(&d);
            match d.path.as_deref().and_then(|p| terraform_path(kind, p, v)) {
                Some(path) => diag.at(path),
                None => diag,
            }
        })
        .collect()
}

/// A gpushare diagnostic as Terraform's, its hint in the detail (no path yet).
fn to_diag(d: &gpushare_config::Diagnostic) -> Diag {
    let mut detail = d.detail.clone().unwrap_or_default();
    if let Some(h) = &d.hint {
        detail.push_str(&format!(" ({h})"));
    }
    if d.is_error() {
        Diag::error(d.summary.clone(), detail)
    } else {
        Diag::warning(d.summary.clone(), detail)
    }
}

/// The errors gpushare's whole-configuration validation (`gpushare validate`'s checks
/// across resources: an MPS share larger than the pool's GPU, a whole-GPU count over
/// the instance's GPUs, a service naming an unknown pool...) finds in `with` (the
/// desired set with the change to `addr`, value `v`) and not in `without` (the same
/// set without it). A finding inside the resource gets its Terraform path; one in a
/// resource a service runs (its task definition, its pool) is shown at the service's
/// attribute that names it.
pub fn cross_validation(
    addr: &ResourceAddr,
    v: &Value,
    with: &gpushare_core::Desired,
    without: &gpushare_core::Desired,
) -> Vec<Diag> {
    let key = |d: &gpushare_config::Diagnostic| (d.summary.clone(), d.path.clone());
    let known: std::collections::BTreeSet<_> = gpushare_config::validate(without)
        .iter()
        .filter(|d| d.is_error())
        .map(key)
        .collect();
    let own = addr.to_string();
    gpushare_config::validate(with)
        .into_iter()
        .filter(|d| d.is_error() && !known.contains(&key(d)))
        .map(|d| {
            let diag = to_diag(&d);
            let Some(path) = d.path.as_deref() else {
                return diag;
            };
            if path == own || path.starts_with(&format!("{own}.")) {
                return match terraform_path(addr.kind, path, v) {
                    Some(p) => diag.at(p),
                    None => diag,
                };
            }
            let referring = ["task_definition", "capacity_provider"]
                .into_iter()
                .find(|r| path.starts_with(&format!("{r}.")) && v.attr(r).is_some());
            match referring {
                Some(r) => diag.at(p(&[r])),
                None => diag,
            }
        })
        .collect()
}

/// A pool's `instance_types`, `market` and `max_price` (gpushare_core::pool), once
/// they are known.
fn launch_options(v: &Value, out: &mut Vec<Diag>) {
    let Some(first) = v.attr("instance_type").and_then(Value::as_str) else {
        return;
    };
    let fallbacks: Vec<String> = match v.attr("instance_types") {
        None | Some(Value::Null) => Vec::new(),
        Some(x) => match x.to_json().ok().map(serde_json::from_value) {
            Some(Ok(list)) => list,
            _ => return,
        },
    };
    let market = match v.attr("market") {
        None | Some(Value::Null) => Market::OnDemand,
        Some(Value::String(s)) if s == "spot" => Market::Spot,
        Some(Value::String(_)) => Market::OnDemand,
        Some(_) => return,
    };
    let max_price = match v.attr("max_price") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return,
    };
    for t in &fallbacks {
        if gpushare_core::catalog::lookup(t).is_none() {
            out.push(
                Diag::error(
                    "Unknown instance type",
                    format!("{t:?} in instance_types is not a GPU instance type in gpushare's catalogue"),
                )
                .at(p(&["instance_types"])),
            );
        }
    }
    for i in gpushare_core::pool::launch_option_issues(
        "this capacity provider",
        first,
        &fallbacks,
        market,
        max_price,
    ) {
        out.push(
            Diag::error(
                "Invalid launch options",
                format!("{}; {}", i.summary, i.hint),
            )
            .at(p(&[i.attribute])),
        );
    }
}

/// All checks for a resource configuration of `kind`: the schema's rules with exact
/// attribute paths first; when those pass, gpushare's own validation of the resource.
pub fn validate(kind: ResourceKind, v: &Value) -> Vec<Diag> {
    let schema = gpushare_core::schema::schema(kind);
    let mut out = Vec::new();
    validate_block(schema, v, &mut Vec::new(), &mut out);
    match kind {
        ResourceKind::CapacityProvider | ResourceKind::GpuInstance => {
            // A registered pool's instance_type is a filter, not a catalogue type.
            let hosts = v.attr("hosts");
            let registered = hosts.and_then(Value::as_str) == Some("registered");
            let launched =
                hosts.is_none_or(|h| matches!(h, Value::Null) || h.as_str() == Some("launched"));
            if kind == ResourceKind::CapacityProvider && launched {
                let unset = |a: &&str| matches!(v.attr(a), None | Some(Value::Null));
                for a in ["instance_type", "max_size"].into_iter().filter(unset) {
                    let why =
                        format!("`{a}` is required for a launched pool (hosts = \"launched\")");
                    out.push(Diag::error("Missing required argument", why).at(p(&[a])));
                }
            }
            if let Some(t) = v
                .attr("instance_type")
                .and_then(Value::as_str)
                .filter(|_| !registered)
            {
                if let Err(e) = gpushare_core::catalog::require(t) {
                    out.push(
                        Diag::error("Unknown instance type", e.to_string())
                            .at(p(&["instance_type"])),
                    );
                }
            }
            let size = |n: &str| {
                v.attr(n)
                    .and_then(|x| x.to_json().ok())
                    .and_then(|j| j.as_f64())
                    // Whole and not negative (a fraction is the attribute check's error).
                    .filter(|f| *f >= 0.0 && f.fract() == 0.0)
                    .map(|f| f as u64)
            };
            if let (Some(min), Some(max)) = (size("min_size"), size("max_size")) {
                if let Some(issue) = gpushare_core::pool::size_issue(min, max) {
                    out.push(Diag::error("Invalid size", issue).at(p(&["min_size"])));
                }
            }
            if kind == ResourceKind::CapacityProvider {
                launch_options(v, &mut out);
            }
        }
        // The schema's checks are a job's all (its references are the planner's).
        ResourceKind::Job => {}
        ResourceKind::TaskDefinition => {
            if let Some(Value::List(containers)) = v.attr("container") {
                let mut names = BTreeMap::new();
                for (i, c) in containers.iter().enumerate() {
                    if let Some(n) = c.attr("name").and_then(Value::as_str) {
                        if let Some(first) = names.insert(n.to_string(), i) {
                            out.push(
                                Diag::error(
                                    "Duplicate container",
                                    format!("container {n:?} is declared twice (container[{first}] and container[{i}])"),
                                )
                                .at(vec![
                                    PathStep::Attr("container".into()),
                                    PathStep::Index(i as i64),
                                    PathStep::Attr("name".into()),
                                ]),
                            );
                        }
                    }
                    if let Some(gpu) = c.attr("gpu").filter(|g| !g.is_null()) {
                        let count = gpu.attr("count").is_some_and(|x| !x.is_null());
                        let mps = gpu.attr("mps").is_some_and(|x| !x.is_null());
                        let known = gpu.attr("count").is_some_and(|x| !x.is_unknown())
                            && gpu.attr("mps").is_some_and(|x| !x.is_unknown());
                        if known && count == mps {
                            out.push(
                                Diag::error(
                                    "Invalid GPU need",
                                    if count {
                                        "a gpu block takes either count (whole GPUs) or an mps block, not both"
                                    } else {
                                        "a gpu block needs count (whole GPUs) or an mps block"
                                    },
                                )
                                .at(vec![
                                    PathStep::Attr("container".into()),
                                    PathStep::Index(i as i64),
                                    PathStep::Attr("gpu".into()),
                                ]),
                            );
                        }
                    }
                }
            }
        }
        ResourceKind::Service => {}
    }
    if out.is_empty() && v.is_wholly_known() {
        out = engine_validation(kind, v);
    }
    out
}

/// Sets the given attributes on an object value.
pub fn with_attrs(mut v: Value, attrs: BTreeMap<String, Value>) -> Value {
    if let Value::Map(m) = &mut v {
        m.extend(attrs);
    }
    v
}

/// The address of a resource value of `kind` (by its `name` attribute).
pub fn addr_of(kind: ResourceKind, v: &Value) -> Option<ResourceAddr> {
    v.attr("name")
        .and_then(Value::as_str)
        .map(|n| ResourceAddr::new(kind, n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::resource_type;
    use gpushare_core::schema::schema;

    fn cp_config() -> Value {
        let j = serde_json::json!({
            "name": "l4", "instance_type": "g6.xlarge", "max_size": 3,
            "mps": {"enabled": true, "default_active_thread_percentage": 50},
        });
        Value::from_json(&j, resource_type(ResourceKind::CapacityProvider)).unwrap()
    }

    #[test]
    fn model_json_drops_nulls_name_and_computed() {
        let j = model_json(schema(ResourceKind::CapacityProvider), &cp_config(), true).unwrap();
        assert_eq!(
            j,
            serde_json::json!({"instance_type": "g6.xlarge", "max_size": 3, "mps": {"enabled": true, "default_active_thread_percentage": 50}})
        );
        let cp: CapacityProvider = serde_json::from_value(j).unwrap();
        assert_eq!(cp.min_size, 0);
    }

    #[test]
    fn state_from_model_round_trips_with_defaults_as_null() {
        let cfg = cp_config();
        let j = model_json(schema(ResourceKind::CapacityProvider), &cfg, true).unwrap();
        // The store keeps the canonical form, with every default written out.
        let stored = canonical(ResourceKind::CapacityProvider, &j).unwrap();
        assert!(stored.get("root_volume").is_some());
        let back = state_from_model(schema(ResourceKind::CapacityProvider), "l4", &stored);
        // `mps.enabled = true` is the default: null; the non-default percentage stays.
        let mps = back.attr("mps").unwrap();
        assert_eq!(mps.attr("enabled"), Some(&Value::Null));
        assert_eq!(
            mps.attr("default_active_thread_percentage"),
            Some(&Value::int(50))
        );
        assert_eq!(back.attr("root_volume"), Some(&Value::Null));
        assert_eq!(back.attr("min_size"), Some(&Value::Null));
        assert_eq!(
            canonical(
                ResourceKind::CapacityProvider,
                &model_json(schema(ResourceKind::CapacityProvider), &back, true).unwrap()
            )
            .unwrap(),
            stored
        );
    }

    #[test]
    fn validation_names_paths() {
        let j = serde_json::json!({
            "name": "bad name!",
            "container": [{"name": "a", "image": "x", "gpu": {"count": 1, "mps": {"memory": 10}}},
                          {"name": "a", "image": "x", "cpu": -1}],
        });
        let v = Value::from_json(&j, resource_type(ResourceKind::TaskDefinition)).unwrap();
        let d = validate(ResourceKind::TaskDefinition, &v);
        let paths: Vec<String> = d
            .iter()
            .map(|d| crate::diag::path_string(d.path.as_deref().unwrap_or(&[])))
            .collect();
        assert!(paths.contains(&"name".to_string()), "{paths:?}");
        assert!(paths.contains(&"container[0].gpu".to_string()), "{paths:?}");
        assert!(
            paths.contains(&"container[1].name".to_string()),
            "{paths:?}"
        );
        assert!(paths.contains(&"container[1].cpu".to_string()), "{paths:?}");
    }

    #[test]
    fn dotted_paths_map_to_terraform_paths() {
        let j = serde_json::json!({"name": "t", "container": [{"name": "a", "image": "x"}, {"name": "b", "image": "y", "gpu": {"mps": {"memory": 1}}}]});
        let v = Value::from_json(&j, resource_type(ResourceKind::TaskDefinition)).unwrap();
        let p = terraform_path(
            ResourceKind::TaskDefinition,
            "task_definition.t.container.b.gpu.mps.memory",
            &v,
        )
        .unwrap();
        assert_eq!(crate::diag::path_string(&p), "container[1].gpu.mps.memory");
        assert_eq!(
            terraform_path(
                ResourceKind::TaskDefinition,
                "task_definition.t.container.zz.image",
                &v
            ),
            None
        );
    }

    #[test]
    fn unknown_instance_type_suggests() {
        let j = serde_json::json!({"name": "p", "instance_type": "g6.xlarg", "max_size": 1, "min_size": 2});
        let v = Value::from_json(&j, resource_type(ResourceKind::CapacityProvider)).unwrap();
        let d = validate(ResourceKind::CapacityProvider, &v);
        assert!(
            d.iter()
                .any(|d| d.detail.contains("g6.xlarge") && d.path == Some(p(&["instance_type"]))),
            "{d:?}"
        );
        assert!(d.iter().any(|d| d.path == Some(p(&["min_size"]))), "{d:?}");
    }

    #[test]
    fn registered_pools_filter_by_instance_type_and_launched_pools_need_theirs() {
        let check = |j: serde_json::Value| {
            let v = Value::from_json(&j, resource_type(ResourceKind::CapacityProvider)).unwrap();
            validate(ResourceKind::CapacityProvider, &v)
        };
        let reg = check(
            serde_json::json!({"name": "lab", "hosts": "registered", "instance_type": "dgx-a100"}),
        );
        assert!(reg.is_empty(), "{reg:?}");
        let d = check(serde_json::json!({"name": "p", "min_size": 0}));
        for a in ["instance_type", "max_size"] {
            assert!(d.iter().any(|d| d.path == Some(p(&[a]))), "{d:?}");
        }
    }

    #[test]
    fn spot_launch_options_are_checked_at_their_attributes() {
        let check = |j: serde_json::Value| {
            let v = Value::from_json(&j, resource_type(ResourceKind::CapacityProvider)).unwrap();
            validate(ResourceKind::CapacityProvider, &v)
        };
        let ok = check(
            serde_json::json!({"name": "p", "instance_type": "g6.xlarge", "max_size": 1,
            "market": "spot", "max_price": "0.5", "instance_types": ["g6.2xlarge"]}),
        );
        assert!(ok.is_empty(), "{ok:?}");
        let d = check(
            serde_json::json!({"name": "p", "instance_type": "g6.xlarge", "max_size": 1,
            "market": "spto"}),
        );
        assert!(d.iter().any(|d| d.path == Some(p(&["market"]))), "{d:?}");
        let d = check(
            serde_json::json!({"name": "p", "instance_type": "g6.xlarge", "max_size": 1,
            "market": "spot", "max_price": "0"}),
        );
        assert!(
            d.iter()
                .any(|d| d.path == Some(p(&["max_price"])) && d.detail.contains("greater than 0")),
            "{d:?}"
        );
        let d = check(
            serde_json::json!({"name": "p", "instance_type": "g6.xlarge", "max_size": 1,
            "instance_types": ["g5.xlarge", "g6.xlarg"]}),
        );
        assert!(
            d.iter()
                .any(|d| d.path == Some(p(&["instance_types"])) && d.detail.contains("1 x a10g")),
            "{d:?}"
        );
        assert!(
            d.iter()
                .any(|d| d.path == Some(p(&["instance_types"])) && d.detail.contains("g6.xlarg\"")),
            "{d:?}"
        );
    }
}

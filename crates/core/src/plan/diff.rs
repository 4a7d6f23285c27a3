//! Step 1, resource changes: the declared resources against those recorded in the
//! store, attribute by attribute (top-level keys), secrets compared but shown
//! redacted.

use super::types::{Action, AttrChange, ResourceChange};
use super::Planner;
use crate::model::{AppliedResource, ResourceAddr};
use crate::schema;
use std::collections::{BTreeMap, BTreeSet};

impl<'a> Planner<'a> {
    pub(super) fn resource_changes(&mut self) {
        let desired = if self.options.destroy {
            BTreeMap::new()
        } else {
            self.desired.resources()
        };
        let live = &self.live.state.resources;
        let addrs: BTreeSet<&ResourceAddr> = desired.keys().chain(live.keys()).collect();
        for addr in addrs {
            let after = desired.get(addr);
            let upgraded = live
                .get(addr)
                .and_then(|r| with_new_defaults(addr, &r.attrs));
            let before = upgraded
                .as_ref()
                .or_else(|| live.get(addr).map(|r| &r.attrs));
            if let Some(rc) = diff_resource(addr, before, after) {
                self.out.resource_changes.push(rc);
            }
        }
        if !self.options.destroy {
            self.out.after.resources = desired
                .into_iter()
                .map(|(a, attrs)| (a, AppliedResource::new(attrs)))
                .collect();
        }
    }
}

/// A service recorded before its `deployment` block had `min_healthy_seconds` and
/// `circuit_breaker` is read with their defaults, so that upgrading gpushare plans no
/// change to it. `None` when nothing needs filling in.
fn with_new_defaults(addr: &ResourceAddr, attrs: &serde_json::Value) -> Option<serde_json::Value> {
    if addr.kind != crate::model::ResourceKind::Service {
        return None;
    }
    let dep = attrs.get("deployment")?;
    let filled =
        serde_json::to_value(serde_json::from_value::<crate::model::Deployment>(dep.clone()).ok()?)
            .ok()?;
    if &filled == dep {
        return None;
    }
    let mut out = attrs.clone();
    out["deployment"] = filled;
    Some(out)
}

/// The change of the resource at `addr` from `before` to `after` (its attributes
/// as recorded and as declared), `None` when there is none.
fn diff_resource(
    addr: &ResourceAddr,
    before: Option<&serde_json::Value>,
    after: Option<&serde_json::Value>,
) -> Option<ResourceChange> {
    let obj =
        |v: Option<&serde_json::Value>| v.and_then(|v| v.as_object()).cloned().unwrap_or_default();
    let (b, a) = (obj(before), obj(after));
    let action = match (before, after) {
        (None, None) => return None,
        (None, Some(_)) => Action::Create,
        (Some(_), None) => Action::Delete,
        (Some(x), Some(y)) if x == y => return None,
        _ => Action::Update,
    };
    let mut keys: Vec<&String> = a.keys().collect();
    keys.extend(b.keys().filter(|k| !a.contains_key(*k)));
    let mut changes = vec![];
    for k in keys {
        let (bv, av) = (b.get(k), a.get(k));
        if bv == av {
            continue;
        }
        let forces = action == Action::Update && schema::forces_replacement(addr.kind, k);
        // Secrets are compared above and shown redacted (changed ones marked).
        let mut after = av.cloned();
        if let (Some(a), Some(b)) = (after.as_mut(), bv) {
            crate::model::redact_pair(b, a);
        } else if let Some(a) = after.as_mut() {
            crate::model::redact(a);
        }
        let mut before = bv.cloned();
        if let Some(b) = before.as_mut() {
            crate::model::redact(b);
        }
        changes.push(AttrChange {
            name: k.clone(),
            before,
            after,
            forces_replacement: forces,
        });
    }
    if action == Action::Update && changes.is_empty() {
        return None;
    }
    let action = if changes.iter().any(|c| c.forces_replacement) {
        Action::Replace
    } else {
        action
    };
    Some(ResourceChange {
        addr: addr.clone(),
        action,
        before: before.cloned(),
        after: after.cloned(),
        changes,
    })
}

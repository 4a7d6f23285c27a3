//! Values known so far (variables, locals, resource names, data lookups) and
//! the evaluation context built from them.

use super::decl::INSTANCE_TYPE_DATA;
use crate::funcs;
use gpushare_core::ResourceKind;
use hcl::eval::Context;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Values known so far, from which evaluation contexts are built.
#[derive(Default)]
pub(super) struct Scope {
    pub(super) vars: BTreeMap<String, Value>,
    pub(super) locals: BTreeMap<String, Value>,
    /// Resource names by kind (HCL `kind.NAME` resolves to NAME).
    pub(super) names: BTreeMap<ResourceKind, BTreeSet<String>>,
    /// Terraform `gpushare_kind.LABEL` -> name.
    pub(super) tf_names: BTreeMap<ResourceKind, BTreeMap<String, String>>,
    pub(super) declared_vars: BTreeSet<String>,
    pub(super) declared_locals: BTreeSet<String>,
    pub(super) tf_labels: BTreeMap<ResourceKind, BTreeSet<String>>,
    /// `data.gpushare_instance_type.LABEL` -> the catalogue entry's attributes.
    pub(super) data_instance_types: BTreeMap<String, Value>,
    pub(super) data_labels: BTreeSet<String>,
    /// `("var", NAME)` and `("local", NAME)` holding a sensitive value.
    pub(super) sensitive: BTreeSet<(String, String)>,
}

impl Scope {
    pub(super) fn context(&self) -> Context<'static> {
        let mut ctx = Context::new();
        funcs::declare(&mut ctx);
        ctx.declare_var(
            "var",
            to_hcl(&Value::Object(self.vars.clone().into_iter().collect())),
        );
        ctx.declare_var(
            "local",
            to_hcl(&Value::Object(self.locals.clone().into_iter().collect())),
        );
        let data: Map<String, Value> = self.data_instance_types.clone().into_iter().collect();
        ctx.declare_var(
            "data",
            to_hcl(&serde_json::json!({ INSTANCE_TYPE_DATA: data })),
        );
        for k in ResourceKind::ALL {
            let names: Map<String, Value> = self
                .names
                .get(&k)
                .into_iter()
                .flatten()
                .map(|n| (n.clone(), Value::String(n.clone())))
                .collect();
            ctx.declare_var(k.as_str(), to_hcl(&Value::Object(names)));
            let mut tf: Map<String, Value> = Map::new();
            // HCL resources are reachable from .tf files by name too.
            for n in self.names.get(&k).into_iter().flatten() {
                tf.insert(n.clone(), serde_json::json!({ "name": n, "id": n }));
            }
            for (label, n) in self.tf_names.get(&k).into_iter().flatten() {
                tf.insert(label.clone(), serde_json::json!({ "name": n, "id": n }));
            }
            ctx.declare_var(k.terraform_type(), to_hcl(&Value::Object(tf)));
        }
        ctx
    }
}

fn to_hcl(v: &Value) -> hcl::Value {
    hcl::to_value(v).unwrap_or(hcl::Value::Null)
}

pub(super) fn from_hcl(v: &hcl::Value) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

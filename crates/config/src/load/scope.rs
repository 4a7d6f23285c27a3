//! Values known so far (variables, locals, resource names, data lookups), read
//! by evaluation (`eval`).

use gpushare_core::ResourceKind;
use serde_json::Value;
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
    /// Locals whose evaluation failed (reported): their dependants fail silently.
    pub(super) failed_locals: BTreeSet<String>,
}

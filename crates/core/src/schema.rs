//! Machine-readable resource schemas (`schemas/*.json`), embedded at build time.
//!
//! One file per resource kind plus `gpushare.json` for the settings block. The
//! HCL loader, the Terraform provider's GetProviderSchema and the reference docs
//! (`docs/resources/<kind>.md`, see [`render_docs`]) are all derived from them.
//! Attribute names equal the serde field names of the typed structs in
//! [`crate::model`]; a test checks both ways.

use crate::model::ResourceKind;
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

mod docs;
pub use docs::{example_files, first_sentence, render_docs, render_index};

/// The schema of one resource kind (or of the `gpushare` settings block).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schema {
    /// `capacity_provider`, ..., or `gpushare` for the settings block.
    pub kind: String,
    pub description: String,
    /// A gpushare HCL example (used in the docs; it must load).
    #[serde(default)]
    pub example: String,
    /// The same example in Terraform form.
    #[serde(default)]
    pub terraform_example: String,
    #[serde(default)]
    pub attributes: Vec<Attribute>,
    #[serde(default)]
    pub blocks: Vec<Block>,
}

/// One attribute. At least one of `required`, `optional`, `computed` is set;
/// `optional` and `computed` may both be set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attribute {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: AttrType,
    #[serde(default)]
    pub required: bool,
    #[serde(default)]
    pub optional: bool,
    #[serde(default)]
    pub computed: bool,
    /// Value used when the attribute is not set (absent: null).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<serde_json::Value>,
    #[serde(default)]
    pub validation: Validation,
    pub description: String,
    #[serde(default)]
    pub forces_replacement: bool,
    #[serde(default)]
    pub sensitive: bool,
}

impl Attribute {
    /// An attribute with no default, validation, replacement or sensitivity.
    pub fn new(
        name: &str,
        ty: AttrType,
        required: bool,
        optional: bool,
        computed: bool,
        description: &str,
    ) -> Attribute {
        Attribute {
            name: name.into(),
            ty,
            required,
            optional,
            computed,
            default: None,
            validation: Validation::default(),
            description: description.into(),
            forces_replacement: false,
            sensitive: false,
        }
    }

    /// Only the provider fills it (the user cannot set it).
    pub fn is_computed_only(&self) -> bool {
        self.computed && !self.required && !self.optional
    }
    /// The user may set it.
    pub fn is_argument(&self) -> bool {
        self.required || self.optional
    }
}

/// Attribute types, written in the schema files as Terraform type expressions:
/// `string`, `number`, `bool`, `list(string)`, `map(string)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttrType {
    String,
    Number,
    Bool,
    List(Box<AttrType>),
    Map(Box<AttrType>),
}

impl AttrType {
    pub fn parse(s: &str) -> Option<AttrType> {
        let s = s.trim();
        match s {
            "string" => Some(AttrType::String),
            "number" => Some(AttrType::Number),
            "bool" => Some(AttrType::Bool),
            _ => {
                if let Some(inner) = s.strip_prefix("list(").and_then(|r| r.strip_suffix(')')) {
                    return AttrType::parse(inner).map(|t| AttrType::List(Box::new(t)));
                }
                if let Some(inner) = s.strip_prefix("map(").and_then(|r| r.strip_suffix(')')) {
                    return AttrType::parse(inner).map(|t| AttrType::Map(Box::new(t)));
                }
                None
            }
        }
    }
}

impl std::fmt::Display for AttrType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttrType::String => f.write_str("string"),
            AttrType::Number => f.write_str("number"),
            AttrType::Bool => f.write_str("bool"),
            AttrType::List(t) => write!(f, "list({t})"),
            AttrType::Map(t) => write!(f, "map({t})"),
        }
    }
}

impl Serialize for AttrType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for AttrType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        AttrType::parse(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown attribute type {s:?}")))
    }
}

/// Value constraints. Numbers are whole numbers throughout gpushare.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Validation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    #[serde(default, rename = "enum", skip_serializing_if = "Vec::is_empty")]
    pub one_of: Vec<String>,
    /// A regular expression (Rust `regex` syntax) the whole string must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// The keys of this map are containers' environment variable names
    /// ([`crate::envname::name_issue`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub env_names: bool,
}

impl Validation {
    pub fn is_empty(&self) -> bool {
        self.min.is_none()
            && self.max.is_none()
            && self.one_of.is_empty()
            && self.pattern.is_none()
            && !self.env_names
    }

    /// Checks the keys of a map whose keys are environment variable names
    /// (`env_names`); the first bad key's problem on failure.
    pub fn check_keys(&self, v: &serde_json::Value) -> Result<(), String> {
        if !self.env_names {
            return Ok(());
        }
        match v.as_object() {
            Some(m) => m
                .keys()
                .find_map(|k| crate::envname::name_issue(k))
                .map_or(Ok(()), Err),
            None => Ok(()),
        }
    }

    /// Checks `min`, `max` and `enum` (not `pattern`, which needs a regex engine:
    /// the loader checks it). Returns what was expected on failure.
    pub fn check_range_and_enum(&self, v: &serde_json::Value) -> Result<(), String> {
        if let Some(n) = v.as_f64() {
            if self.min.is_some_and(|m| n < m) || self.max.is_some_and(|m| n > m) {
                return Err(format!(
                    "{} is out of range: expected {}",
                    fmt_num(n),
                    self.range_text()
                ));
            }
        }
        if let Some(s) = v.as_str() {
            if !self.one_of.is_empty() && !self.one_of.iter().any(|e| e == s) {
                let list = self
                    .one_of
                    .iter()
                    .map(|e| format!("{e:?}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(format!("{s:?} is not allowed: expected one of {list}"));
            }
        }
        Ok(())
    }

    /// "between 1 and 100", "at least 1", "at most 64" (empty when unbounded).
    pub fn range_text(&self) -> String {
        match (self.min, self.max) {
            (Some(a), Some(b)) => format!("a number between {} and {}", fmt_num(a), fmt_num(b)),
            (Some(a), None) => format!("a number of at least {}", fmt_num(a)),
            (None, Some(b)) => format!("a number of at most {}", fmt_num(b)),
            (None, None) => String::new(),
        }
    }
}

fn fmt_num(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Nesting {
    /// At most one block; an object.
    Single,
    /// Ordered blocks; a list of objects.
    List,
    /// Unordered blocks; a set of objects.
    Set,
    /// Labelled blocks keyed by label; a map of objects.
    Map,
}

impl Nesting {
    pub fn as_str(self) -> &'static str {
        match self {
            Nesting::Single => "single",
            Nesting::List => "list",
            Nesting::Set => "set",
            Nesting::Map => "map",
        }
    }
}

/// A nested block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Block {
    pub name: String,
    pub nesting: Nesting,
    #[serde(default)]
    pub min_items: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_items: Option<u32>,
    pub description: String,
    #[serde(default)]
    pub forces_replacement: bool,
    /// In gpushare HCL the block takes one label that sets this attribute
    /// (`container "server" {}` sets `name`); in Terraform it is a plain attribute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default)]
    pub attributes: Vec<Attribute>,
    #[serde(default)]
    pub blocks: Vec<Block>,
}

/// Lookups shared by [`Schema`] and [`Block`] (both hold attributes and blocks).
pub trait BlockLike {
    fn attributes(&self) -> &[Attribute];
    fn blocks(&self) -> &[Block];
    fn attribute(&self, name: &str) -> Option<&Attribute> {
        self.attributes().iter().find(|a| a.name == name)
    }
    fn block(&self, name: &str) -> Option<&Block> {
        self.blocks().iter().find(|b| b.name == name)
    }
    /// Names the user may write here (arguments and blocks), for suggestions.
    fn argument_names(&self) -> Vec<&str> {
        self.attributes()
            .iter()
            .filter(|a| a.is_argument())
            .map(|a| a.name.as_str())
            .chain(self.blocks().iter().map(|b| b.name.as_str()))
            .collect()
    }
}

impl BlockLike for Schema {
    fn attributes(&self) -> &[Attribute] {
        &self.attributes
    }
    fn blocks(&self) -> &[Block] {
        &self.blocks
    }
}

impl BlockLike for Block {
    fn attributes(&self) -> &[Attribute] {
        &self.attributes
    }
    fn blocks(&self) -> &[Block] {
        &self.blocks
    }
}

/// The raw schema files, by kind (`gpushare` last).
pub const SCHEMA_FILES: [(&str, &str); 6] = [
    (
        "capacity_provider",
        include_str!("../../../schemas/capacity_provider.json"),
    ),
    (
        "gpu_instance",
        include_str!("../../../schemas/gpu_instance.json"),
    ),
    (
        "task_definition",
        include_str!("../../../schemas/task_definition.json"),
    ),
    ("service", include_str!("../../../schemas/service.json")),
    ("job", include_str!("../../../schemas/job.json")),
    ("gpushare", include_str!("../../../schemas/gpushare.json")),
];

fn all() -> &'static [Schema; 6] {
    static SCHEMAS: OnceLock<[Schema; 6]> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        SCHEMA_FILES.map(|(kind, text)| match serde_json::from_str::<Schema>(text) {
            Ok(s) => s,
            // The files are compiled in and checked by tests; a broken one is a build defect.
            Err(e) => panic!("schemas/{kind}.json is invalid: {e}"),
        })
    })
}

/// The schema of a resource kind.
pub fn schema(kind: ResourceKind) -> &'static Schema {
    let all = all();
    match kind {
        ResourceKind::CapacityProvider => &all[0],
        ResourceKind::GpuInstance => &all[1],
        ResourceKind::TaskDefinition => &all[2],
        ResourceKind::Service => &all[3],
        ResourceKind::Job => &all[4],
    }
}

/// The schema of the `gpushare { }` settings block.
pub fn settings_schema() -> &'static Schema {
    &all()[5]
}

/// The Terraform provider block: the settings of the `gpushare { }` block (all
/// optional) plus `state_dir` and `endpoints`. The provider serves it; the `.tf`
/// reader checks `provider "gpushare"` blocks against it.
pub fn provider_schema() -> &'static Schema {
    static S: OnceLock<Schema> = OnceLock::new();
    S.get_or_init(|| {
        let mut s = settings_schema().clone();
        s.description = "The gpushare provider: the same settings as the `gpushare { }` block of gpushare HCL.".into();
        for a in &mut s.attributes {
            // Everything in the provider block is optional, as in the settings block.
            a.required = false;
            a.optional = true;
        }
        let optional = |name: &str, ty: AttrType, description: &str| {
            Attribute::new(name, ty, false, true, false, description)
        };
        s.attributes.push(optional(
            "state_dir",
            AttrType::String,
            "Directory of the file store (and of the local simulated fleet). Defaults to `.gpushare` in Terraform's working directory; `store = \"file://DIR\"` is the same.",
        ));
        s.attributes.push(optional(
            "endpoints",
            AttrType::Map(Box::new(AttrType::String)),
            "Service endpoint overrides by service name; `ec2` (an EC2-compatible endpoint such as moto, used with `cloud = \"ec2\"`) and `elbv2` (for services' `load_balancer`s). Unset: the standard `AWS_ENDPOINT_URL_EC2` / `AWS_ENDPOINT_URL_ELASTIC_LOAD_BALANCING_V2` / `AWS_ENDPOINT_URL`, then the real service of `region`.",
        ));
        s
    })
}

/// Whether changing attribute (or block) `attr` of a `kind` resource forces
/// replacement. `attr` is a top-level name or a dotted path into nested blocks
/// (`mps.enabled`); a path forces replacement when any block on it or the final
/// attribute does. Unknown names do not.
pub fn forces_replacement(kind: ResourceKind, attr: &str) -> bool {
    let s = schema(kind);
    let mut parts = attr.split('.');
    let Some(first) = parts.next() else {
        return false;
    };
    if let Some(a) = s.attribute(first) {
        return a.forces_replacement;
    }
    let Some(mut block) = s.block(first) else {
        return false;
    };
    loop {
        if block.forces_replacement {
            return true;
        }
        let Some(next) = parts.next() else {
            return false;
        };
        if let Some(a) = block.attribute(next) {
            return a.forces_replacement;
        }
        match block.block(next) {
            Some(b) => block = b,
            None => return false,
        }
    }
}

#[cfg(test)]
mod tests;

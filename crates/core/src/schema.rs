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
pub const SCHEMA_FILES: [(&str, &str); 5] = [
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
    ("gpushare", include_str!("../../../schemas/gpushare.json")),
];

fn all() -> &'static [Schema; 5] {
    static SCHEMAS: OnceLock<[Schema; 5]> = OnceLock::new();
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
    }
}

/// The schema of the `gpushare { }` settings block.
pub fn settings_schema() -> &'static Schema {
    &all()[4]
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
            "Service endpoint overrides by service name; the only one is `ec2` (an EC2-compatible endpoint such as moto, used with `cloud = \"ec2\"`). Unset: the standard `AWS_ENDPOINT_URL_EC2` / `AWS_ENDPOINT_URL`, then the real EC2 of `region`.",
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
mod tests {
    use super::*;
    use crate::model::*;
    use std::collections::{BTreeMap, BTreeSet};

    #[test]
    fn every_schema_file_parses_and_names_its_kind() {
        for (kind, _) in SCHEMA_FILES {
            let s = match ResourceKind::parse(kind) {
                Some(k) => schema(k),
                None => settings_schema(),
            };
            assert_eq!(s.kind, kind);
            for a in &s.attributes {
                assert!(
                    a.required || a.optional || a.computed,
                    "{kind}.{} is neither required, optional nor computed",
                    a.name
                );
                assert!(
                    !(a.required && (a.optional || a.computed)),
                    "{kind}.{} is required and optional/computed",
                    a.name
                );
            }
        }
    }

    #[test]
    fn every_resource_has_name_and_computed_id() {
        for k in ResourceKind::ALL {
            let s = schema(k);
            let name = s.attribute("name").expect("name");
            assert!(name.required && name.forces_replacement, "{k:?}");
            let id = s.attribute("id").expect("id");
            assert!(id.is_computed_only(), "{k:?}");
        }
    }

    #[test]
    fn forces_replacement_follows_the_schema_files() {
        use ResourceKind::*;
        // Launch settings of a pool update it in place: its hosts roll (docs/refresh.md).
        for (kind, attr, forces) in [
            (CapacityProvider, "instance_type", true),
            (CapacityProvider, "image", false),
            (CapacityProvider, "mps", false),
            (CapacityProvider, "mps.enabled", false),
            (CapacityProvider, "refresh.pause_seconds", false),
            (CapacityProvider, "max_size", false),
            (CapacityProvider, "tags", false),
            (GpuInstance, "capacity_provider", true),
            (Service, "desired_count", false),
            (TaskDefinition, "container", false),
            (Service, "no_such_attribute", false),
        ] {
            assert_eq!(forces_replacement(kind, attr), forces, "{kind:?} {attr}");
        }
    }

    #[test]
    fn attr_types_round_trip() {
        for t in [
            "string",
            "number",
            "bool",
            "list(string)",
            "map(string)",
            "list(map(number))",
        ] {
            assert_eq!(AttrType::parse(t).expect(t).to_string(), t);
        }
        assert_eq!(AttrType::parse("lisst(string)"), None);
    }

    // --- schema files vs model.rs -------------------------------------------------

    /// The keys the user may set (arguments and blocks) at this level; `name` at the
    /// top level is the block label, not a struct field.
    fn schema_keys(attrs: &[Attribute], blocks: &[Block], top: bool) -> BTreeSet<String> {
        attrs
            .iter()
            .filter(|a| a.is_argument() && !(top && a.name == "name"))
            .map(|a| a.name.clone())
            .chain(blocks.iter().map(|b| b.name.clone()))
            .collect()
    }

    fn object_keys(v: &serde_json::Value) -> BTreeSet<String> {
        v.as_object().expect("an object").keys().cloned().collect()
    }

    /// Compares key sets recursively, descending into blocks.
    fn compare(
        path: &str,
        attrs: &[Attribute],
        blocks: &[Block],
        v: &serde_json::Value,
        top: bool,
    ) {
        assert_eq!(
            schema_keys(attrs, blocks, top),
            object_keys(v),
            "keys of {path} differ between schema and model"
        );
        for b in blocks {
            let inner = &v[&b.name];
            let item = match b.nesting {
                Nesting::Single => inner,
                _ => inner
                    .get(0)
                    .unwrap_or_else(|| panic!("{path}.{} needs an item in the test value", b.name)),
            };
            assert!(
                item.is_object(),
                "{path}.{} must be set in the test value",
                b.name
            );
            compare(
                &format!("{path}.{}", b.name),
                &b.attributes,
                &b.blocks,
                item,
                false,
            );
        }
    }

    fn full_values() -> Vec<(ResourceKind, serde_json::Value)> {
        let tags: BTreeMap<String, String> = [("a".to_string(), "b".to_string())].into();
        let cp = CapacityProvider {
            host_port_range: Some("40000-40100".into()),
            instance_type: "g6.xlarge".into(),
            hosts: HostSource::Registered, // Non-default values: defaults are not serialised.
            host_hourly_cost: Some("1.5".into()),
            instance_types: vec!["g6.2xlarge".into()],
            market: Market::Spot,
            max_price: Some("0.5".into()),
            min_size: 0,
            max_size: 2,
            image: Some("ami-1".into()),
            subnets: vec!["s".into()],
            security_groups: vec!["g".into()],
            instance_profile: Some("p".into()),
            key_name: Some("k".into()),
            mps: MpsSettings {
                max_clients: 60,
                ..MpsSettings::default()
            },
            metadata_options: MetadataOptions::default(),
            root_volume: RootVolume::default(),
            agent: AgentSource::default(),
            tags: tags.clone(),
            max_draining_percent: 25,
            unhealthy_threshold_percent: 60,
            refresh: RefreshSettings {
                min_healthy_percent: 50,
                pause_seconds: 60,
                checkpoints: vec![50, 100],
            },
            // True: a false value is not serialised (absent = false).
            reserve_compute: true,
            auto_repair: false,
            deep_check: true,
        };
        let gi = GpuInstance {
            capacity_provider: "l4".into(),
            instance_type: None,
            availability_zone: None,
            tags: tags.clone(),
        };
        let td = TaskDefinition {
            containers: vec![Container {
                name: "c".into(),
                image: "i".into(),
                command: vec![],
                env: tags,
                secret_env: [("S".to_string(), crate::model::Secret::new("x"))].into(),
                cpu: 1,
                memory: 1,
                gpu: Some(GpuSpec {
                    count: None,
                    mps: Some(MpsShare {
                        processes: 2,
                        memory: 1,
                        max_compute_percent: None,
                    }),
                }),
                essential: true,
                // Every serving setting away from its default (defaults are not serialised).
                port_mappings: vec![crate::model::PortMapping {
                    name: Some("http".into()),
                    container_port: 8080,
                    host_port: 8080,
                    protocol: crate::model::Protocol::Udp,
                }],
                health_check: Some(crate::model::ContainerHealthCheck {
                    command: vec!["CMD".into(), "true".into()],
                    interval: 30,
                    timeout: 5,
                    retries: 3,
                    start_period: 0,
                }),
                mount_points: vec![crate::model::MountPoint {
                    source_volume: "v".into(),
                    container_path: "/m".into(),
                    read_only: true,
                }],
                shared_memory_size: Some(1024),
                ulimits: vec![crate::model::Ulimit {
                    name: "nofile".into(),
                    soft: 1,
                    hard: 2,
                }],
                init_process_enabled: true,
                stop_timeout: Some(10),
                user: Some("1000".into()),
                working_directory: Some("/w".into()),
                entry_point: vec!["/bin/sh".into()],
                docker_labels: [("l".to_string(), "v".to_string())].into(),
            }],
            network_mode: crate::model::NetworkMode::Host,
            volumes: vec![crate::model::Volume {
                name: "v".into(),
                host_path: Some("/h".into()),
                docker_volume: Some(crate::model::DockerVolume {
                    scope: crate::model::VolumeScope::Shared,
                    driver: Some("local".into()),
                    driver_opts: [("o".to_string(), "1".to_string())].into(),
                    labels: [("l".to_string(), "v".to_string())].into(),
                }),
            }],
        };
        let svc = Service {
            task_definition: "t".into(),
            capacity_provider: "c".into(),
            desired_count: 1,
            placement_strategy: PlacementStrategy::Binpack,
            distinct_host: false,
            instance_types: vec![],
            deployment: Deployment {
                circuit_breaker: Some(crate::model::CircuitBreaker {
                    enable: true,
                    rollback: true,
                }),
                ..Deployment::default()
            },
            reserve_compute: true,
        };
        let j = |v: serde_json::Result<serde_json::Value>| v.expect("serialises");
        vec![
            (ResourceKind::CapacityProvider, j(serde_json::to_value(cp))),
            (ResourceKind::GpuInstance, j(serde_json::to_value(gi))),
            (ResourceKind::TaskDefinition, j(serde_json::to_value(td))),
            (ResourceKind::Service, j(serde_json::to_value(svc))),
        ]
    }

    #[test]
    fn schema_attributes_equal_model_fields_both_ways() {
        for (kind, v) in full_values() {
            let s = schema(kind);
            compare(kind.as_str(), &s.attributes, &s.blocks, &v, true);
        }
        let settings = serde_json::to_value(Settings::default()).expect("serialises");
        let s = settings_schema();
        compare("gpushare", &s.attributes, &s.blocks, &settings, false);
    }

    /// A JSON object holding only the required arguments (with placeholder values) at this level.
    fn minimal(attrs: &[Attribute], blocks: &[Block], top: bool) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for a in attrs
            .iter()
            .filter(|a| a.required && !(top && a.name == "name"))
        {
            let v = match a.ty {
                AttrType::String => serde_json::json!("x"),
                AttrType::Number => {
                    serde_json::json!(a.validation.min.unwrap_or(1.0).max(1.0) as u64)
                }
                AttrType::Bool => serde_json::json!(true),
                AttrType::List(_) => serde_json::json!([]),
                AttrType::Map(_) => serde_json::json!({}),
            };
            m.insert(a.name.clone(), v);
        }
        for b in blocks.iter().filter(|b| b.min_items > 0) {
            m.insert(
                b.name.clone(),
                serde_json::json!([minimal(&b.attributes, &b.blocks, false)]),
            );
        }
        serde_json::Value::Object(m)
    }

    fn check_defaults(path: &str, attrs: &[Attribute], blocks: &[Block], v: &serde_json::Value) {
        for a in attrs.iter().filter(|a| a.optional) {
            let want = a.default.clone().unwrap_or(serde_json::Value::Null);
            // A bool the model leaves out when false (`reserve_compute`: so that
            // attributes stored before it existed compare equal) means false. So do
            // `instance_types`, `market`, `auto_repair`, `hosts` at their defaults;
            // `max_size` has none.
            let defaulted = [
                "instance_types",
                "market",
                "auto_repair",
                "hosts",
                "unhealthy_threshold_percent",
                // Serving settings, left out at their defaults (issue 47).
                "network_mode",
                "entry_point",
                "docker_labels",
                "host_port",
                "protocol",
                "scope",
                "driver_opts",
                "labels",
                // MPS client bounds (issue 50), left out at their defaults.
                "max_clients",
                "processes",
            ]
            .contains(&a.name.as_str());
            let got = match v.get(&a.name) {
                None if want == serde_json::Value::Bool(false) || defaulted => want.clone(),
                Some(_) if a.name == "max_size" => want.clone(),
                _ => v[&a.name].clone(),
            };
            assert_eq!(
                got, want,
                "default of {path}.{} differs between schema and model",
                a.name
            );
        }
        for b in blocks {
            let inner = &v[&b.name];
            let item = match b.nesting {
                Nesting::Single => inner.clone(),
                _ => inner.get(0).cloned().unwrap_or(serde_json::Value::Null),
            };
            if item.is_object() {
                check_defaults(
                    &format!("{path}.{}", b.name),
                    &b.attributes,
                    &b.blocks,
                    &item,
                );
            }
        }
    }

    fn round_trip<T: serde::de::DeserializeOwned + Serialize>(
        v: serde_json::Value,
    ) -> serde_json::Value {
        let t: T = serde_json::from_value(v).expect("the minimal value deserialises");
        serde_json::to_value(t).expect("serialises")
    }

    #[test]
    fn schema_defaults_equal_model_serde_defaults() {
        for kind in ResourceKind::ALL {
            let s = schema(kind);
            let min = minimal(&s.attributes, &s.blocks, true);
            let back = match kind {
                ResourceKind::CapacityProvider => round_trip::<CapacityProvider>(min),
                ResourceKind::GpuInstance => round_trip::<GpuInstance>(min),
                ResourceKind::TaskDefinition => round_trip::<TaskDefinition>(min),
                ResourceKind::Service => round_trip::<Service>(min),
            };
            check_defaults(kind.as_str(), &s.attributes, &s.blocks, &back);
        }
        // Nested single blocks left out take their Default; check those too.
        let mps = serde_json::to_value(MpsSettings::default()).expect("serialises");
        let b = schema(ResourceKind::CapacityProvider)
            .block("mps")
            .expect("mps");
        check_defaults("capacity_provider.mps", &b.attributes, &b.blocks, &mps);
        let s = settings_schema();
        let settings = serde_json::to_value(Settings::default()).expect("serialises");
        check_defaults("gpushare", &s.attributes, &s.blocks, &settings);
    }

    #[test]
    fn committed_docs_match_the_schemas() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/resources");
        let update = std::env::var_os("UPDATE_DOCS").is_some();
        let mut stale = vec![];
        for k in ResourceKind::ALL {
            let path = dir.join(format!("{}.md", k.as_str()));
            let want = render_docs(k);
            if update {
                std::fs::create_dir_all(&dir).expect("create docs/resources");
                std::fs::write(&path, &want).expect("write doc");
                continue;
            }
            let have = std::fs::read_to_string(&path).unwrap_or_default();
            if have != want {
                stale.push(path.display().to_string());
            }
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut generated = vec![("docs/index.md".to_string(), render_index())];
        for (path, text) in example_files() {
            generated.push((format!("examples/{path}"), text));
        }
        for (path, want) in generated {
            let path = root.join(path);
            if update {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).expect("create the directory");
                }
                std::fs::write(&path, &want).expect("write a generated file");
                continue;
            }
            if std::fs::read_to_string(&path).unwrap_or_default() != want {
                stale.push(path.display().to_string());
            }
        }
        assert!(stale.is_empty(), "docs differ from the schemas: {stale:?}; regenerate with UPDATE_DOCS=1 cargo test -p gpushare-core");
    }

    #[test]
    fn docs_have_the_provider_sections() {
        let d = render_docs(ResourceKind::TaskDefinition);
        for s in [
            "# Resource: gpushare_task_definition",
            "## Example Usage",
            "## Argument Reference",
            "## Attribute Reference",
            "## Import",
            "terraform import gpushare_task_definition.NAME NAME",
            "### mps",
            "* `revision` -",
        ] {
            assert!(d.contains(s), "missing {s:?} in\n{d}");
        }
    }
}

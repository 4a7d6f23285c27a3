//! Terraform schemas, derived from gpushare's one schema (`schemas/*.json` via
//! `gpushare_core::schema`): the resources, the provider block and the data sources.
//!
//! Mapping: `required` / `optional` / `computed` carry over; an attribute with a
//! default stays plain optional (the state keeps null and the engine applies the
//! default), so a configuration that omits it never shows a diff. Nested blocks
//! map to their nesting mode; a `single` block is sent with min/max items 0 as
//! Terraform requires.

use crate::cty::Type;
use crate::proto::tfplugin6 as pb;
use gpushare_core::model::ResourceKind;
use gpushare_core::schema::{
    self as core_schema, AttrType, Attribute, Block, BlockLike, Nesting, Schema,
};
use std::collections::BTreeMap;
use std::sync::OnceLock;

pub const INSTANCE_TYPE_DATA: &str = "gpushare_instance_type";
pub const PLACEMENTS_DATA: &str = "gpushare_placements";
/// The one managed resource that is not a resource of gpushare's model (Terraform only).
pub const JOIN_TOKEN: &str = "gpushare_join_token";

/// The cty type of an attribute type from the schema files.
pub fn attr_type(t: &AttrType) -> Type {
    match t {
        AttrType::String => Type::String,
        AttrType::Number => Type::Number,
        AttrType::Bool => Type::Bool,
        AttrType::List(t) => Type::list(attr_type(t)),
        AttrType::Map(t) => Type::map(attr_type(t)),
    }
}

/// The object type of a block's value: attributes and nested blocks by name.
pub fn object_type(block: &dyn BlockLike) -> Type {
    let mut attrs = BTreeMap::new();
    for a in block.attributes() {
        attrs.insert(a.name.clone(), attr_type(&a.ty));
    }
    for b in block.blocks() {
        attrs.insert(b.name.clone(), nested_type(b));
    }
    Type::Object(attrs)
}

/// The type of a nested block's value by nesting mode.
pub fn nested_type(b: &Block) -> Type {
    let o = object_type(b);
    match b.nesting {
        Nesting::Single => o,
        Nesting::List => Type::list(o),
        Nesting::Set => Type::set(o),
        Nesting::Map => Type::map(o),
    }
}

fn attribute_proto(a: &Attribute) -> pb::schema::Attribute {
    let mut description = a.description.clone();
    if let Some(d) = &a.default {
        description.push_str(&format!(" Defaults to `{d}`."));
    }
    pb::schema::Attribute {
        name: a.name.clone(),
        r#type: attr_type(&a.ty).to_json_bytes(),
        nested_type: None,
        description,
        required: a.required,
        optional: a.optional && !a.required,
        computed: a.computed && !a.required,
        sensitive: a.sensitive,
        description_kind: pb::StringKind::Markdown as i32,
        deprecated: false,
        write_only: false,
    }
}

fn block_proto(block: &dyn BlockLike, description: &str) -> pb::schema::Block {
    pb::schema::Block {
        version: 0,
        attributes: block.attributes().iter().map(attribute_proto).collect(),
        block_types: block
            .blocks()
            .iter()
            .map(|b| {
                let (nesting, min, max) = match b.nesting {
                    Nesting::Single => (pb::schema::nested_block::NestingMode::Single, 0, 0),
                    Nesting::List => (
                        pb::schema::nested_block::NestingMode::List,
                        b.min_items,
                        b.max_items.unwrap_or(0),
                    ),
                    Nesting::Set => (
                        pb::schema::nested_block::NestingMode::Set,
                        b.min_items,
                        b.max_items.unwrap_or(0),
                    ),
                    Nesting::Map => (pb::schema::nested_block::NestingMode::Map, 0, 0),
                };
                pb::schema::NestedBlock {
                    type_name: b.name.clone(),
                    block: Some(block_proto(b, &b.description)),
                    nesting: nesting as i32,
                    min_items: i64::from(min),
                    max_items: i64::from(max),
                }
            })
            .collect(),
        description: description.to_string(),
        description_kind: pb::StringKind::Markdown as i32,
        deprecated: false,
    }
}

/// The protocol form of a schema.
pub fn to_proto(s: &Schema) -> pb::Schema {
    pb::Schema {
        version: 0,
        block: Some(block_proto(s, &s.description)),
    }
}

pub use gpushare_core::schema::provider_schema;

/// `data "gpushare_instance_type"`: a lookup in the GPU catalogue.
pub fn instance_type_schema() -> &'static Schema {
    static S: OnceLock<Schema> = OnceLock::new();
    S.get_or_init(|| {
        let n = |name: &str, d: &str| Attribute::new(name, AttrType::Number, false, false, true, d);
        Schema {
            kind: INSTANCE_TYPE_DATA.into(),
            description: "Facts about an EC2 GPU instance type from gpushare's built-in catalogue."
                .into(),
            example: String::new(),
            terraform_example: String::new(),
            attributes: vec![
                Attribute::new(
                    "name",
                    AttrType::String,
                    true,
                    false,
                    false,
                    "Instance type, e.g. `g6.xlarge`.",
                ),
                Attribute::new(
                    "id",
                    AttrType::String,
                    false,
                    false,
                    true,
                    "Equal to `name`.",
                ),
                Attribute::new(
                    "gpu_model",
                    AttrType::String,
                    false,
                    false,
                    true,
                    "GPU model, e.g. `l4`.",
                ),
                n("gpu_count", "GPUs per instance."),
                n("gpu_memory_mib", "Memory of one GPU, MiB."),
                n("vcpus", "vCPUs."),
                n("memory_mib", "Host memory, MiB."),
                n(
                    "price_per_hour",
                    "On-demand price in USD per hour (null when unknown).",
                ),
                Attribute::new(
                    "fractional",
                    AttrType::Bool,
                    false,
                    false,
                    true,
                    "Whether the instance has a fraction of a GPU.",
                ),
            ],
            blocks: vec![],
        }
    })
}

/// `data "gpushare_placements"`: live tasks and hosts of a service or a pool.
pub fn placements_schema() -> &'static Schema {
    static S: OnceLock<Schema> = OnceLock::new();
    S.get_or_init(|| {
        let list = |name: &str, d: &str| Attribute::new(name, AttrType::List(Box::new(AttrType::String)), false, false, true, d);
        Schema {
            kind: PLACEMENTS_DATA.into(),
            description: "Where the tasks of a service, or of every service in a capacity provider, run now: task ids, hosts and GPUs, from the store.".into(),
            example: String::new(),
            terraform_example: String::new(),
            attributes: vec![
                Attribute::new("service", AttrType::String, false, true, false, "Only the tasks of this service."),
                Attribute::new("capacity_provider", AttrType::String, false, true, false, "Only the hosts (and their tasks) of this capacity provider."),
                Attribute::new("id", AttrType::String, false, false, true, "The filter, as `service/capacity_provider`."),
                list("placements", "One `task@host/gpu` entry per placed task (GPUs comma-separated; `-` for none), sorted."),
                list("task_ids", "Task ids, sorted."),
                list("host_ids", "Hosts running these tasks (or of the pool), sorted."),
                Attribute::new("gpus_in_use", AttrType::Number, false, false, true, "Distinct (host, GPU) pairs the tasks use."),
                Attribute::new("gpu_memory_mib", AttrType::Number, false, false, true, "GPU memory the tasks reserve, MiB."),
            ],
            blocks: vec![],
        }
    })
}

/// `resource "gpushare_join_token"` (`schemas/join_token.json`): a pool token for
/// your own servers, not a resource of gpushare's model.
pub fn join_token_schema() -> &'static Schema {
    static S: OnceLock<Schema> = OnceLock::new();
    S.get_or_init(|| {
        match serde_json::from_str(include_str!("../../schemas/join_token.json")) {
            Ok(s) => s,
            // Compiled in and checked by tests; a broken file is a build defect.
            Err(e) => panic!("schemas/join_token.json is invalid: {e}"),
        }
    })
}

pub fn join_token_type() -> &'static Type {
    static T: OnceLock<Type> = OnceLock::new();
    T.get_or_init(|| object_type(join_token_schema()))
}

/// The object type of any managed resource type this provider serves.
pub fn managed_type(type_name: &str) -> Option<&'static Type> {
    if type_name == JOIN_TOKEN {
        return Some(join_token_type());
    }
    resource_kind(type_name).map(resource_type)
}

/// Every managed resource type this provider serves.
pub fn managed_type_names() -> Vec<String> {
    ResourceKind::ALL
        .iter()
        .map(|k| k.terraform_type())
        .chain([JOIN_TOKEN.to_string()])
        .collect()
}

/// The schema of a managed resource type (`gpushare_service`, ...).
pub fn resource_kind(type_name: &str) -> Option<ResourceKind> {
    type_name
        .strip_prefix("gpushare_")
        .and_then(ResourceKind::parse)
}

pub fn data_source_schema(type_name: &str) -> Option<&'static Schema> {
    match type_name {
        INSTANCE_TYPE_DATA => Some(instance_type_schema()),
        PLACEMENTS_DATA => Some(placements_schema()),
        _ => None,
    }
}

/// Cached object types (computed once per schema).
pub fn resource_type(kind: ResourceKind) -> &'static Type {
    static T: OnceLock<BTreeMap<ResourceKind, Type>> = OnceLock::new();
    let m = T.get_or_init(|| {
        ResourceKind::ALL
            .iter()
            .map(|k| (*k, object_type(core_schema::schema(*k))))
            .collect()
    });
    &m[&kind]
}

pub fn provider_type() -> &'static Type {
    static T: OnceLock<Type> = OnceLock::new();
    T.get_or_init(|| object_type(provider_schema()))
}

pub fn data_source_type(type_name: &str) -> Option<&'static Type> {
    static A: OnceLock<Type> = OnceLock::new();
    static B: OnceLock<Type> = OnceLock::new();
    match type_name {
        INSTANCE_TYPE_DATA => Some(A.get_or_init(|| object_type(instance_type_schema()))),
        PLACEMENTS_DATA => Some(B.get_or_init(|| object_type(placements_schema()))),
        _ => None,
    }
}

/// The full GetProviderSchema answer.
pub fn provider_schema_response() -> pb::get_provider_schema::Response {
    let mut resources = std::collections::HashMap::new();
    for k in ResourceKind::ALL {
        resources.insert(k.terraform_type(), to_proto(core_schema::schema(k)));
    }
    resources.insert(JOIN_TOKEN.to_string(), to_proto(join_token_schema()));
    let mut data = std::collections::HashMap::new();
    data.insert(
        INSTANCE_TYPE_DATA.to_string(),
        to_proto(instance_type_schema()),
    );
    data.insert(PLACEMENTS_DATA.to_string(), to_proto(placements_schema()));
    pb::get_provider_schema::Response {
        provider: Some(to_proto(provider_schema())),
        resource_schemas: resources,
        data_source_schemas: data,
        diagnostics: vec![],
        provider_meta: None,
        server_capabilities: Some(server_capabilities()),
    }
}

/// What this provider tells Terraform it can do (GetMetadata and GetProviderSchema
/// say the same). `get_provider_schema_optional`: every RPC works without a
/// GetProviderSchema call first in the same process (the schemas are static), so
/// Terraform serves the second and third provider process of a plan from its
/// schema cache instead of asking each again.
pub fn server_capabilities() -> pb::ServerCapabilities {
    pb::ServerCapabilities {
        plan_destroy: true,
        get_provider_schema_optional: true,
        move_resource_state: false,
    }
}

/// An example for each data source (also the one in its doc page).
fn data_source_example(type_name: &str) -> &'static str {
    match type_name {
        INSTANCE_TYPE_DATA => {
            "data \"gpushare_instance_type\" \"l4\" {\n  name = \"g6.12xlarge\"\n}\n\noutput \"l4_gpu_memory_mib\" {\n  value = data.gpushare_instance_type.l4.gpu_memory_mib\n}\n"
        }
        _ => {
            "data \"gpushare_placements\" \"embedder\" {\n  service = gpushare_service.embedder.name\n}\n\noutput \"embedder_placements\" {\n  value = data.gpushare_placements.embedder.placements\n}\n"
        }
    }
}

/// `docs/data-sources/<name>.md` (the registry layout; name without the `gpushare_` prefix).
pub fn render_data_source_docs(type_name: &str) -> Option<String> {
    let s = data_source_schema(type_name)?;
    Some(render_docs(
        "Data Source",
        type_name,
        s,
        data_source_example(type_name),
        "schema::render_data_source_docs",
    ))
}

/// `docs/resources/join_token.md`, with its import section (refused, and why).
pub fn render_join_token_docs() -> String {
    let s = join_token_schema();
    let mut out = render_docs(
        "Resource",
        JOIN_TOKEN,
        s,
        &s.terraform_example,
        "schema::render_join_token_docs from schemas/join_token.json",
    );
    out.push_str("\n## Import\n\nImport is not supported: the store keeps only the hash of a join token, so its `value` cannot be read back. Let Terraform create a new token, and revoke an old one with `gpushare token revoke ID`.\n");
    out
}

/// A provider-only page (a data source, or a resource outside gpushare's model) in
/// the registry layout.
fn render_docs(heading: &str, type_name: &str, s: &Schema, example: &str, source: &str) -> String {
    let mut out = String::new();
    let first_sentence = core_schema::first_sentence(&s.description);
    out.push_str(&format!(
        "---\nsubcategory: \"gpushare\"\npage_title: \"gpushare: {type_name}\"\ndescription: |-\n  {first_sentence}.\n---\n\n"
    ));
    out.push_str(&format!(
        "<!-- Generated by terraform-provider-gpushare ({source}); do not edit. -->\n\n"
    ));
    out.push_str(&format!(
        "# {heading}: {type_name}\n\n{}\n\n## Example Usage\n\n```terraform\n{example}```\n\n",
        s.description,
    ));
    out.push_str("## Argument Reference\n\n");
    for a in s.attributes.iter().filter(|a| a.is_argument()) {
        let default = a
            .default
            .as_ref()
            .map(|d| {
                format!(
                    " Defaults to `{}`.",
                    d.as_str().map_or_else(|| d.to_string(), str::to_string)
                )
            })
            .unwrap_or_default();
        let replaces = if a.forces_replacement && heading == "Resource" {
            " Changing it creates a new one."
        } else {
            ""
        };
        out.push_str(&format!(
            "* `{}` - ({}) {}{default}{replaces}\n",
            a.name,
            if a.required { "Required" } else { "Optional" },
            a.description
        ));
    }
    out.push_str("\n## Attribute Reference\n\nIn addition to the arguments above, these attributes are exported:\n\n");
    for a in s.attributes.iter().filter(|a| a.is_computed_only()) {
        let sensitive = if a.sensitive { ", sensitive" } else { "" };
        out.push_str(&format!(
            "* `{}` ({}{sensitive}) - {}\n",
            a.name, a.ty, a.description
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed docs are what the schemas generate (`UPDATE_DOCS=1` rewrites them).
    #[test]
    fn data_source_docs_are_up_to_date() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/data-sources");
        for t in [INSTANCE_TYPE_DATA, PLACEMENTS_DATA] {
            let want = render_data_source_docs(t).unwrap();
            let path = dir.join(format!("{}.md", t.trim_start_matches("gpushare_")));
            if std::env::var_os("UPDATE_DOCS").is_some() {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, &want).unwrap();
            }
            let have = std::fs::read_to_string(&path).unwrap_or_default();
            assert_eq!(
                have,
                want,
                "{} is stale: run UPDATE_DOCS=1 cargo test -p terraform-provider-gpushare",
                path.display()
            );
        }
    }

    /// docs/resources/join_token.md is what schemas/join_token.json generates
    /// (`UPDATE_DOCS=1` rewrites it); the value is sensitive, every argument replaces.
    #[test]
    fn join_token_docs_are_up_to_date_and_its_value_is_sensitive() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../docs/resources/join_token.md");
        let want = render_join_token_docs();
        if std::env::var_os("UPDATE_DOCS").is_some() {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            have,
            want,
            "{} is stale: run UPDATE_DOCS=1 cargo test -p terraform-provider-gpushare --lib schema",
            path.display()
        );
        let block = to_proto(join_token_schema()).block.unwrap();
        let attr = |n: &str| block.attributes.iter().find(|a| a.name == n).unwrap();
        assert!(attr("value").sensitive && attr("value").computed && !attr("value").optional);
        assert!(attr("pool").required);
        assert!(attr("uses").optional && attr("ttl").optional);
        for a in &join_token_schema().attributes {
            assert!(
                a.is_computed_only() || a.forces_replacement,
                "{}: every argument of a token replaces it (it has no update)",
                a.name
            );
        }
        assert!(want.contains("* `value` (string, sensitive)"), "{want}");
        assert!(want.contains("## Import"), "{want}");
    }

    /// Terraform's own rules for schemas (configschema InternalValidate), checked here.
    fn check_block(b: &pb::schema::Block, path: &str) {
        for a in &b.attributes {
            let p = format!("{path}.{}", a.name);
            assert!(
                a.required || a.optional || a.computed,
                "{p}: one of required/optional/computed"
            );
            assert!(
                !(a.required && (a.optional || a.computed)),
                "{p}: required excludes optional/computed"
            );
            assert!(Type::from_json_bytes(&a.r#type).is_ok(), "{p}: type");
        }
        let mut names: Vec<&str> = b
            .attributes
            .iter()
            .map(|a| a.name.as_str())
            .chain(b.block_types.iter().map(|n| n.type_name.as_str()))
            .collect();
        let before = names.len();
        names.sort();
        names.dedup();
        assert_eq!(before, names.len(), "{path}: duplicate names");
        for n in &b.block_types {
            if n.nesting == pb::schema::nested_block::NestingMode::Single as i32 {
                assert!(
                    n.min_items == n.max_items && n.min_items <= 1,
                    "{path}.{}: single nesting min/max",
                    n.type_name
                );
            }
            check_block(
                n.block.as_ref().unwrap(),
                &format!("{path}.{}", n.type_name),
            );
        }
    }

    #[test]
    fn every_schema_obeys_terraform_rules() {
        let r = provider_schema_response();
        assert_eq!(r.resource_schemas.len(), 6);
        assert!(r.resource_schemas.contains_key(JOIN_TOKEN));
        for (name, s) in r
            .resource_schemas
            .iter()
            .chain(r.data_source_schemas.iter())
        {
            check_block(s.block.as_ref().unwrap(), name);
            // Terraform reserves these top-level names in resource blocks.
            for reserved in [
                "count",
                "for_each",
                "depends_on",
                "lifecycle",
                "provider",
                "provisioner",
                "connection",
            ] {
                assert!(
                    s.block
                        .as_ref()
                        .unwrap()
                        .attributes
                        .iter()
                        .all(|a| a.name != reserved),
                    "{name}: {reserved}"
                );
            }
        }
        check_block(
            r.provider.as_ref().unwrap().block.as_ref().unwrap(),
            "provider",
        );
    }

    #[test]
    fn resource_schema_matches_schema_files() {
        let td = to_proto(core_schema::schema(ResourceKind::TaskDefinition));
        let block = td.block.unwrap();
        let name = block.attributes.iter().find(|a| a.name == "name").unwrap();
        assert!(name.required);
        let revision = block
            .attributes
            .iter()
            .find(|a| a.name == "revision")
            .unwrap();
        assert!(revision.computed && !revision.optional);
        let container = block
            .block_types
            .iter()
            .find(|b| b.type_name == "container")
            .unwrap();
        assert_eq!(
            container.nesting,
            pb::schema::nested_block::NestingMode::List as i32
        );
        assert_eq!(container.min_items, 1);
        let gpu = container
            .block
            .as_ref()
            .unwrap()
            .block_types
            .iter()
            .find(|b| b.type_name == "gpu")
            .unwrap();
        assert_eq!(
            gpu.nesting,
            pb::schema::nested_block::NestingMode::Single as i32
        );
        // The object type follows the blocks.
        let Type::Object(attrs) = resource_type(ResourceKind::TaskDefinition) else {
            panic!()
        };
        assert!(
            matches!(&attrs["container"], Type::List(inner) if matches!(**inner, Type::Object(_)))
        );
    }

    #[test]
    fn every_nesting_mode_maps_to_its_type() {
        let mk = |nesting| Block {
            name: "b".into(),
            nesting,
            min_items: 0,
            max_items: None,
            description: String::new(),
            forces_replacement: false,
            label: None,
            attributes: vec![Attribute::new(
                "x",
                AttrType::String,
                false,
                true,
                false,
                "",
            )],
            blocks: vec![],
        };
        let o = Type::Object(BTreeMap::from([("x".to_string(), Type::String)]));
        assert_eq!(nested_type(&mk(Nesting::Single)), o);
        assert_eq!(nested_type(&mk(Nesting::List)), Type::list(o.clone()));
        assert_eq!(nested_type(&mk(Nesting::Set)), Type::set(o.clone()));
        assert_eq!(nested_type(&mk(Nesting::Map)), Type::map(o));
    }
}

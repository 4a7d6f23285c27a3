//! Machine-readable resource schemas (`schemas/*.json`), embedded at build time.
//!
//! (Provisional: the full schema model lands with the schema files.)

use crate::model::ResourceKind;

/// Whether changing top-level attribute (or block) `attr` of a `kind` resource forces replacement.
pub fn forces_replacement(kind: ResourceKind, attr: &str) -> bool {
    matches!(
        (kind, attr),
        (ResourceKind::CapacityProvider, "instance_type" | "image" | "subnets" | "security_groups" | "instance_profile" | "key_name" | "mps" | "metadata_options" | "root_volume" | "agent")
            | (ResourceKind::GpuInstance, "capacity_provider" | "instance_type" | "availability_zone")
    )
}

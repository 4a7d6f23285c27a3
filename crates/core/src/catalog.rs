//! Built-in catalogue of EC2 NVIDIA GPU instance types.
//!
//! Facts taken from the EC2 NVIDIA instance catalogue (`shared/data/ec2_gpu_instances.csv`):
//! GPU model, GPUs per instance, MiB per GPU as EC2 reports it, vCPUs, memory and the
//! us-east-1 on-demand price. Fractional-GPU types (g6f, gr6f: a slice of one L4) are
//! listed with one GPU of the slice's memory and `fractional: true`.

use crate::model::GpuInfo;
use serde::Serialize;

mod data;
pub mod prices;
pub use data::{INSTANCE_TYPES, PRICES_AS_OF, PRICE_REGION};
pub use prices::{PriceBook, PriceSource};

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct InstanceType {
    pub name: &'static str,
    pub gpu_model: &'static str,
    pub gpu_count: u32,
    pub gpu_memory_mib: u64,
    pub vcpus: u32,
    pub memory_mib: u64,
    pub price_per_hour: Option<f64>,
    pub fractional: bool,
}

impl InstanceType {
    /// CPU units (1024 per vCPU, as in ECS).
    pub fn cpu_units(&self) -> u32 {
        self.vcpus * 1024
    }
    /// The shape the placement engine works with.
    pub fn shape(&self) -> crate::placement::InstanceShape {
        crate::placement::InstanceShape {
            instance_type: self.name.to_string(),
            gpu_model: self.gpu_model.to_string(),
            gpu_count: self.gpu_count,
            gpu_memory_mib: self.gpu_memory_mib,
            cpu_units: self.cpu_units(),
            memory_mib: self.memory_mib,
            price_per_hour: self.price_per_hour,
        }
    }
}

/// Look up an instance type by exact name.
pub fn lookup(name: &str) -> Option<&'static InstanceType> {
    INSTANCE_TYPES
        .binary_search_by(|t| t.name.cmp(name))
        .ok()
        .map(|i| &INSTANCE_TYPES[i])
}

/// An instance type the catalogue does not know, with the closest names it does:
/// the one "unknown instance type" finding every layer reports (validation, the
/// planner, the clouds), each adding where it was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown instance type {name:?}{}", self.did_you_mean())]
pub struct UnknownInstanceType {
    pub name: String,
    /// Up to three known names closest to `name`.
    pub close: Vec<&'static str>,
}

impl UnknownInstanceType {
    /// `" (did you mean a, b?)"`, or nothing when no name is close.
    pub fn did_you_mean(&self) -> String {
        if self.close.is_empty() {
            String::new()
        } else {
            format!(" (did you mean {}?)", self.close.join(", "))
        }
    }
}

/// The catalogue's entry for `name`, or the error naming the closest known ones.
/// A reported GPU inventory held against the catalogue's entry for `instance_type`:
/// a host is never trusted to hold more GPUs, or more memory per GPU, than its type
/// has (an agent, or whoever writes its report, could otherwise make the planner pack
/// tasks onto GPUs that do not exist). Returns the inventory to plan with (GPUs past
/// the type's count dropped, memory cut to the catalogue's) and, when anything was cut,
/// why. A type the catalogue lacks is taken as reported.
pub fn clamp_inventory(
    instance_type: &str,
    reported: &[GpuInfo],
) -> (Vec<GpuInfo>, Option<String>) {
    let Some(t) = lookup(instance_type) else {
        return (reported.to_vec(), None);
    };
    let mut problems = Vec::new();
    let extra = reported.iter().filter(|g| g.index >= t.gpu_count).count();
    if extra > 0 {
        problems.push(format!(
            "{} GPU(s) beyond the {} of a {}",
            extra, t.gpu_count, t.name
        ));
    }
    let mut out: Vec<GpuInfo> = Vec::with_capacity(reported.len());
    for g in reported.iter().filter(|g| g.index < t.gpu_count) {
        if out.iter().any(|o| o.index == g.index) {
            problems.push(format!("GPU {} twice", g.index));
            continue;
        }
        let mut g = g.clone();
        if g.memory_mib > t.gpu_memory_mib {
            problems.push(format!(
                "GPU {} with {} MiB, more than a {}'s {} MiB",
                g.index, g.memory_mib, t.gpu_model, t.gpu_memory_mib
            ));
            g.memory_mib = t.gpu_memory_mib;
        }
        out.push(g);
    }
    let why = (!problems.is_empty()).then(|| {
        format!(
            "the report claims {}; held to the catalogue's {}",
            problems.join(", "),
            t.name
        )
    });
    (out, why)
}

pub fn require(name: &str) -> Result<&'static InstanceType, UnknownInstanceType> {
    lookup(name).ok_or_else(|| UnknownInstanceType {
        name: name.to_string(),
        close: close_matches(name, 3),
    })
}

/// Up to `n` known names closest to `name` (edit distance, then shared family prefix).
pub fn close_matches(name: &str, n: usize) -> Vec<&'static str> {
    let mut scored: Vec<(usize, &'static str)> = INSTANCE_TYPES
        .iter()
        .map(|t| (edit_distance(name, t.name), t.name))
        .collect();
    scored.sort();
    scored.into_iter().take(n).map(|(_, s)| s).collect()
}

/// The cheapest priced instance type with at least one whole GPU of `model`, for the
/// "one GPU per task" cost comparison.
pub fn cheapest_with_model(model: &str) -> Option<&'static InstanceType> {
    INSTANCE_TYPES
        .iter()
        .filter(|t| t.gpu_model == model && !t.fractional && t.price_per_hour.is_some())
        .min_by(|a, b| {
            let pa = a.price_per_hour.unwrap_or(f64::MAX) / f64::from(a.gpu_count);
            let pb = b.price_per_hour.unwrap_or(f64::MAX) / f64::from(b.gpu_count);
            pa.total_cmp(&pb)
        })
}

/// Levenshtein distance, for "did you mean" hints.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_for_binary_search() {
        assert!(INSTANCE_TYPES.windows(2).all(|w| w[0].name < w[1].name));
    }

    #[test]
    fn lookup_known_and_unknown() {
        let t = lookup("g6.12xlarge").expect("g6.12xlarge is in the catalogue");
        assert_eq!(
            (t.gpu_model, t.gpu_count, t.gpu_memory_mib, t.vcpus),
            ("l4", 4, 22888, 48)
        );
        assert!(lookup("g6.13xlarge").is_none());
        assert!(close_matches("g6.13xlarge", 3).contains(&"g6.12xlarge"));
    }

    #[test]
    fn cheapest_l4_is_per_gpu() {
        let t = cheapest_with_model("l4").expect("l4 types exist");
        assert_eq!(t.name, "g6.xlarge");
    }
}

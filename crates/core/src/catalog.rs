//! Built-in catalogue of EC2 NVIDIA GPU instance types.
//!
//! Facts taken from the EC2 NVIDIA instance catalogue (`shared/data/ec2_gpu_instances.csv`):
//! GPU model, GPUs per instance, MiB per GPU as EC2 reports it, vCPUs, memory and the
//! us-east-1 on-demand price. Fractional-GPU types (g6f, gr6f: a slice of one L4) are
//! listed with one GPU of the slice's memory and `fractional: true`.

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

/// What a task needs of an instance type to run on it alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    /// MiB of one GPU.
    pub gpu_memory_mib: u64,
    pub cpu_units: u32,
    pub memory_mib: u64,
}

impl InstanceType {
    /// Whether this type's whole GPUs are of `model` and it holds `needs`.
    pub fn holds(&self, model: &str, needs: &Needs) -> bool {
        self.gpu_model == model
            && !self.fractional
            && self.gpu_count >= 1
            && self.gpu_memory_mib >= needs.gpu_memory_mib
            && self.cpu_units() >= needs.cpu_units
            && self.memory_mib >= needs.memory_mib
    }
}

/// The cheapest instance type with whole GPUs of `model` that holds `needs`, by
/// `price` (types it prices `None` are left out), with that price: the one search
/// behind the plan's "each alone on the cheapest type that fits it" and evaluate's
/// pools and today's cost ([`cheapest_with_model`]).
pub fn cheapest_holding(
    model: &str,
    needs: &Needs,
    price: impl Fn(&InstanceType) -> Option<f64>,
) -> Option<(&'static InstanceType, f64)> {
    INSTANCE_TYPES
        .iter()
        .filter(|t| t.holds(model, needs))
        .filter_map(|t| price(t).map(|p| (t, p)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// The instance type with whole GPUs of `model` of the lowest catalogue price per
/// GPU, for the "one GPU per task" cost comparison.
pub fn cheapest_with_model(model: &str) -> Option<&'static InstanceType> {
    cheapest_holding(model, &Needs::default(), |t| {
        t.price_per_hour.map(|p| p / f64::from(t.gpu_count))
    })
    .map(|(t, _)| t)
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

//! Checks of a capacity provider's launch options (`instance_types`, `market`,
//! `max_price`), shared by the HCL validator, the Terraform provider and the planner.

use crate::catalog::{self, InstanceType};
use crate::model::Market;

pub use crate::model::parse_price;

/// One problem with a pool's launch options.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolIssue {
    /// The attribute at fault: `instance_types` or `max_price`.
    pub attribute: &'static str,
    pub summary: String,
    pub detail: String,
    pub hint: String,
}

/// Directories where anyone may create files: an MPS pipe or log directory there
/// could be created first by another user (issue 46 item 12).
const WORLD_WRITABLE: [&str; 6] = [
    "/tmp",
    "/var/tmp",
    "/dev/shm",
    "/run/lock",
    "/var/lock",
    "/dev/mqueue",
];

/// `path` normalised: absolute, `//` and `/./` collapsed, no trailing `/`; `None`
/// when it is relative or goes up with `..`.
pub fn normal_dir(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    let mut parts = vec![];
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => return None,
            p => parts.push(p),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// Why `path` may not be an MPS pipe or log directory: not an absolute path without
/// `..`, or inside a world-writable directory once normalised (so `//tmp/x`,
/// `/./tmp/mps`, `/dev/shm/mps` and `/run/lock/mps` are refused as `/tmp/mps` is).
pub fn mps_dir_issue(path: &str) -> Option<String> {
    let Some(norm) = normal_dir(path) else {
        return Some(format!("{path:?} must be an absolute path without \"..\""));
    };
    WORLD_WRITABLE
        .iter()
        .find(|w| norm == **w || norm.starts_with(&format!("{w}/")))
        .map(|w| {
            format!(
                "{path:?} is in the world-writable directory {w}, where another user could create it first (use a directory under /run, such as the default /run/gpushare-mps)"
            )
        })
}

/// A pool whose `min_size` is above its `max_size` can never be sized: the one
/// message for it, used by the configuration's validation, the provider's and the
/// planner's.
pub fn size_issue(min_size: u64, max_size: u64) -> Option<String> {
    (min_size > max_size)
        .then(|| format!("min_size ({min_size}) is larger than max_size ({max_size})"))
}

/// What is wrong with `instance_types` (fallbacks tried after `instance_type`, in
/// order), `market` and `max_price`. An unknown `instance_type` or fallback is left
/// to the caller's unknown-type check; only known types are compared.
///
/// A fallback must be listed once, be neither `instance_type` nor another fallback,
/// have `instance_type`'s GPU model and count, and at least its vCPUs and memory:
/// hosts are planned with the shape of `instance_type`, so tasks placed on a planned
/// host fit whichever type EC2 had capacity for. `max_price` is for Spot pools only
/// and above 0.
pub fn launch_option_issues(
    addr: &str,
    instance_type: &str,
    instance_types: &[String],
    market: Market,
    max_price: Option<&str>,
) -> Vec<PoolIssue> {
    let mut out = Vec::new();
    let first: Option<&InstanceType> = catalog::lookup(instance_type);
    let mut seen: Vec<&str> = vec![instance_type];
    for t in instance_types {
        if seen.contains(&t.as_str()) {
            out.push(PoolIssue {
                attribute: "instance_types",
                summary: format!("instance type `{t}` is listed twice in {addr} (instance_type and instance_types)"),
                detail: "instance_types lists the fallbacks tried after instance_type, in order".into(),
                hint: format!("remove the second `{t}`"),
            });
            continue;
        }
        seen.push(t);
        let (Some(f), Some(it)) = (first, catalog::lookup(t)) else {
            continue;
        };
        if !it.gpu_model.eq_ignore_ascii_case(f.gpu_model) || it.gpu_count != f.gpu_count {
            out.push(PoolIssue {
                attribute: "instance_types",
                summary: format!(
                    "fallback instance type `{t}` of {addr} has {} x {}, but instance_type `{}` has {} x {}",
                    it.gpu_count, it.gpu_model, f.name, f.gpu_count, f.gpu_model
                ),
                detail: "every instance type of a pool has the same GPU model and GPU count, so the tasks placed for one fit on any".into(),
                hint: format!(
                    "list only instance types with {} x {}, or declare another capacity_provider",
                    f.gpu_count, f.gpu_model
                ),
            });
        } else if it.vcpus < f.vcpus || it.memory_mib < f.memory_mib {
            out.push(PoolIssue {
                attribute: "instance_types",
                summary: format!(
                    "fallback instance type `{t}` of {addr} is smaller than instance_type `{}` ({} vCPUs and {} MiB against {} vCPUs and {} MiB)",
                    f.name, it.vcpus, it.memory_mib, f.vcpus, f.memory_mib
                ),
                detail: "tasks are placed by the vCPUs and memory of instance_type; a smaller fallback might not hold them".into(),
                hint: format!("put the smallest type first (instance_type = \"{t}\")"),
            });
        }
    }
    if let Some(price) = max_price {
        if market != Market::Spot {
            out.push(PoolIssue {
                attribute: "max_price",
                summary: format!("max_price is set but {addr} is not a Spot pool"),
                detail: "max_price is the most a Spot host may cost per hour".into(),
                hint: "set market = \"spot\", or remove max_price".into(),
            });
        } else if parse_price(price).is_none() {
            out.push(PoolIssue {
                attribute: "max_price",
                summary: format!(
                    "max_price of {addr} must be a price in USD per host and hour greater than 0, not {price:?}"
                ),
                detail: "EC2 takes a decimal number such as \"1.25\", and launches no Spot instance at a maximum price of 0".into(),
                hint: "set a price such as \"1.5\", or remove max_price to pay at most the On-Demand price".into(),
            });
        }
    }
    out
}

/// MPS memory is proposed in steps of this many MiB.
pub const MEMORY_STEP_MIB: u64 = 256;

/// The MPS memory to declare for a workload seen to peak at `peak_mib`: the peak
/// times `headroom`, rounded up to [`MEMORY_STEP_MIB`] (`gpushare evaluate`'s
/// proposals and the plan's right-sizing from use).
pub fn memory_with_headroom(peak_mib: u64, headroom: f64) -> u64 {
    ((peak_mib as f64 * headroom).ceil() as u64).div_ceil(MEMORY_STEP_MIB) * MEMORY_STEP_MIB
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 46 item 12, regression: the pipe directory rule compared raw prefixes.
    #[test]
    fn mps_directories_are_judged_normalised() {
        for bad in [
            "/tmp",
            "/tmp/x",
            "//tmp/x",
            "/./tmp/mps",
            "/dev/shm/mps",
            "/run/lock/mps",
            "/var/tmp/",
            "rel/dir",
            "/run/../tmp",
        ] {
            assert!(mps_dir_issue(bad).is_some(), "{bad}");
        }
        for good in [
            "/run/gpushare-mps/pipe",
            "/var/run/mps",
            "/run//gpushare-mps/./log",
        ] {
            assert_eq!(mps_dir_issue(good), None, "{good}");
        }
        assert_eq!(normal_dir("//a/./b/").as_deref(), Some("/a/b"));
    }

    fn issues(it: &str, its: &[&str], market: Market, price: Option<&str>) -> Vec<String> {
        let its: Vec<String> = its.iter().map(|s| s.to_string()).collect();
        launch_option_issues("capacity_provider.p", it, &its, market, price)
            .into_iter()
            .map(|i| format!("{}: {}", i.attribute, i.summary))
            .collect()
    }

    #[test]
    fn fallbacks_of_the_same_gpus_and_at_least_the_shape_pass() {
        assert!(issues(
            "g6.xlarge",
            &["g6.2xlarge", "g6.4xlarge"],
            Market::Spot,
            Some("0.5")
        )
        .is_empty());
        assert!(issues("g6.xlarge", &[], Market::OnDemand, None).is_empty());
    }

    #[test]
    fn fallbacks_of_another_gpu_model_or_count_or_smaller_are_refused() {
        let e = issues("g6.xlarge", &["g5.xlarge"], Market::OnDemand, None);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].contains("`g5.xlarge`") && e[0].contains("1 x a10g"),
            "{e:?}"
        );
        let e = issues("g6.xlarge", &["g6.12xlarge"], Market::OnDemand, None);
        assert!(e[0].contains("4 x l4"), "{e:?}");
        let e = issues("g6.2xlarge", &["g6.xlarge"], Market::OnDemand, None);
        assert!(e[0].contains("smaller"), "{e:?}");
        let e = issues(
            "g6.xlarge",
            &["g6.2xlarge", "g6.xlarge"],
            Market::OnDemand,
            None,
        );
        assert!(e[0].contains("listed twice"), "{e:?}");
    }

    #[test]
    fn max_price_must_be_positive_and_only_for_spot() {
        for bad in ["0", "0.0", "-1", "NaN", "inf", "1e3", "1.2.3", "", "$1"] {
            let e = issues("g6.xlarge", &[], Market::Spot, Some(bad));
            assert!(
                e.len() == 1 && e[0].starts_with("max_price: "),
                "{bad}: {e:?}"
            );
        }
        assert_eq!(parse_price(" 1.25 "), Some(1.25));
        assert_eq!(parse_price("2"), Some(2.0));
        let e = issues("g6.xlarge", &[], Market::OnDemand, Some("1"));
        assert!(e[0].contains("not a Spot pool"), "{e:?}");
    }
}

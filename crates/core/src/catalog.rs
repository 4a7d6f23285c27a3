//! Built-in catalogue of EC2 NVIDIA GPU instance types.
//!
//! Facts taken from the EC2 NVIDIA instance catalogue (`shared/data/ec2_gpu_instances.csv`):
//! GPU model, GPUs per instance, MiB per GPU as EC2 reports it, vCPUs, memory and the
//! us-east-1 on-demand price. Fractional-GPU types (g6f, gr6f: a slice of one L4) are
//! listed with one GPU of the slice's memory and `fractional: true`.

use serde::Serialize;

/// When the prices below were recorded (us-east-1, on-demand, Linux).
pub const PRICES_AS_OF: &str = "2026-11-29";
/// Region the prices are for.
pub const PRICE_REGION: &str = "us-east-1";

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

/// Every known type, sorted by name.
pub static INSTANCE_TYPES: &[InstanceType] = &[
    InstanceType {
        name: "g3.16xlarge",
        gpu_model: "m60",
        gpu_count: 4,
        gpu_memory_mib: 8192,
        vcpus: 64,
        memory_mib: 499712,
        price_per_hour: Some(4.56),
        fractional: false,
    },
    InstanceType {
        name: "g3.4xlarge",
        gpu_model: "m60",
        gpu_count: 1,
        gpu_memory_mib: 8192,
        vcpus: 16,
        memory_mib: 124928,
        price_per_hour: Some(1.14),
        fractional: false,
    },
    InstanceType {
        name: "g3.8xlarge",
        gpu_model: "m60",
        gpu_count: 2,
        gpu_memory_mib: 8192,
        vcpus: 32,
        memory_mib: 249856,
        price_per_hour: Some(2.28),
        fractional: false,
    },
    InstanceType {
        name: "g3s.xlarge",
        gpu_model: "m60",
        gpu_count: 1,
        gpu_memory_mib: 8192,
        vcpus: 4,
        memory_mib: 31232,
        price_per_hour: Some(0.75),
        fractional: false,
    },
    InstanceType {
        name: "g4dn.12xlarge",
        gpu_model: "t4",
        gpu_count: 4,
        gpu_memory_mib: 16384,
        vcpus: 48,
        memory_mib: 196608,
        price_per_hour: Some(3.912),
        fractional: false,
    },
    InstanceType {
        name: "g4dn.16xlarge",
        gpu_model: "t4",
        gpu_count: 1,
        gpu_memory_mib: 16384,
        vcpus: 64,
        memory_mib: 262144,
        price_per_hour: Some(4.352),
        fractional: false,
    },
    InstanceType {
        name: "g4dn.2xlarge",
        gpu_model: "t4",
        gpu_count: 1,
        gpu_memory_mib: 16384,
        vcpus: 8,
        memory_mib: 32768,
        price_per_hour: Some(0.752),
        fractional: false,
    },
    InstanceType {
        name: "g4dn.4xlarge",
        gpu_model: "t4",
        gpu_count: 1,
        gpu_memory_mib: 16384,
        vcpus: 16,
        memory_mib: 65536,
        price_per_hour: Some(1.204),
        fractional: false,
    },
    InstanceType {
        name: "g4dn.8xlarge",
        gpu_model: "t4",
        gpu_count: 1,
        gpu_memory_mib: 16384,
        vcpus: 32,
        memory_mib: 131072,
        price_per_hour: Some(2.176),
        fractional: false,
    },
    InstanceType {
        name: "g4dn.metal",
        gpu_model: "t4",
        gpu_count: 8,
        gpu_memory_mib: 16384,
        vcpus: 96,
        memory_mib: 393216,
        price_per_hour: Some(7.824),
        fractional: false,
    },
    InstanceType {
        name: "g4dn.xlarge",
        gpu_model: "t4",
        gpu_count: 1,
        gpu_memory_mib: 16384,
        vcpus: 4,
        memory_mib: 16384,
        price_per_hour: Some(0.526),
        fractional: false,
    },
    InstanceType {
        name: "g5.12xlarge",
        gpu_model: "a10g",
        gpu_count: 4,
        gpu_memory_mib: 22888,
        vcpus: 48,
        memory_mib: 196608,
        price_per_hour: Some(5.672),
        fractional: false,
    },
    InstanceType {
        name: "g5.16xlarge",
        gpu_model: "a10g",
        gpu_count: 1,
        gpu_memory_mib: 22888,
        vcpus: 64,
        memory_mib: 262144,
        price_per_hour: Some(4.096),
        fractional: false,
    },
    InstanceType {
        name: "g5.24xlarge",
        gpu_model: "a10g",
        gpu_count: 4,
        gpu_memory_mib: 22888,
        vcpus: 96,
        memory_mib: 393216,
        price_per_hour: Some(8.144),
        fractional: false,
    },
    InstanceType {
        name: "g5.2xlarge",
        gpu_model: "a10g",
        gpu_count: 1,
        gpu_memory_mib: 22888,
        vcpus: 8,
        memory_mib: 32768,
        price_per_hour: Some(1.212),
        fractional: false,
    },
    InstanceType {
        name: "g5.48xlarge",
        gpu_model: "a10g",
        gpu_count: 8,
        gpu_memory_mib: 22888,
        vcpus: 192,
        memory_mib: 786432,
        price_per_hour: Some(16.288),
        fractional: false,
    },
    InstanceType {
        name: "g5.4xlarge",
        gpu_model: "a10g",
        gpu_count: 1,
        gpu_memory_mib: 22888,
        vcpus: 16,
        memory_mib: 65536,
        price_per_hour: Some(1.624),
        fractional: false,
    },
    InstanceType {
        name: "g5.8xlarge",
        gpu_model: "a10g",
        gpu_count: 1,
        gpu_memory_mib: 22888,
        vcpus: 32,
        memory_mib: 131072,
        price_per_hour: Some(2.448),
        fractional: false,
    },
    InstanceType {
        name: "g5.xlarge",
        gpu_model: "a10g",
        gpu_count: 1,
        gpu_memory_mib: 22888,
        vcpus: 4,
        memory_mib: 16384,
        price_per_hour: Some(1.006),
        fractional: false,
    },
    InstanceType {
        name: "g5g.16xlarge",
        gpu_model: "t4g",
        gpu_count: 2,
        gpu_memory_mib: 16384,
        vcpus: 64,
        memory_mib: 131072,
        price_per_hour: Some(2.744),
        fractional: false,
    },
    InstanceType {
        name: "g5g.2xlarge",
        gpu_model: "t4g",
        gpu_count: 1,
        gpu_memory_mib: 16384,
        vcpus: 8,
        memory_mib: 16384,
        price_per_hour: Some(0.556),
        fractional: false,
    },
    InstanceType {
        name: "g5g.4xlarge",
        gpu_model: "t4g",
        gpu_count: 1,
        gpu_memory_mib: 16384,
        vcpus: 16,
        memory_mib: 32768,
        price_per_hour: Some(0.828),
        fractional: false,
    },
    InstanceType {
        name: "g5g.8xlarge",
        gpu_model: "t4g",
        gpu_count: 1,
        gpu_memory_mib: 16384,
        vcpus: 32,
        memory_mib: 65536,
        price_per_hour: Some(1.372),
        fractional: false,
    },
    InstanceType {
        name: "g5g.metal",
        gpu_model: "t4g",
        gpu_count: 2,
        gpu_memory_mib: 16384,
        vcpus: 64,
        memory_mib: 131072,
        price_per_hour: Some(2.744),
        fractional: false,
    },
    InstanceType {
        name: "g5g.xlarge",
        gpu_model: "t4g",
        gpu_count: 1,
        gpu_memory_mib: 16384,
        vcpus: 4,
        memory_mib: 8192,
        price_per_hour: Some(0.42),
        fractional: false,
    },
    InstanceType {
        name: "g6.12xlarge",
        gpu_model: "l4",
        gpu_count: 4,
        gpu_memory_mib: 22888,
        vcpus: 48,
        memory_mib: 196608,
        price_per_hour: Some(4.6016),
        fractional: false,
    },
    InstanceType {
        name: "g6.16xlarge",
        gpu_model: "l4",
        gpu_count: 1,
        gpu_memory_mib: 22888,
        vcpus: 64,
        memory_mib: 262144,
        price_per_hour: Some(3.3968),
        fractional: false,
    },
    InstanceType {
        name: "g6.24xlarge",
        gpu_model: "l4",
        gpu_count: 4,
        gpu_memory_mib: 22888,
        vcpus: 96,
        memory_mib: 393216,
        price_per_hour: Some(6.6752),
        fractional: false,
    },
    InstanceType {
        name: "g6.2xlarge",
        gpu_model: "l4",
        gpu_count: 1,
        gpu_memory_mib: 22888,
        vcpus: 8,
        memory_mib: 32768,
        price_per_hour: Some(0.9776),
        fractional: false,
    },
    InstanceType {
        name: "g6.48xlarge",
        gpu_model: "l4",
        gpu_count: 8,
        gpu_memory_mib: 22888,
        vcpus: 192,
        memory_mib: 786432,
        price_per_hour: Some(13.3504),
        fractional: false,
    },
    InstanceType {
        name: "g6.4xlarge",
        gpu_model: "l4",
        gpu_count: 1,
        gpu_memory_mib: 22888,
        vcpus: 16,
        memory_mib: 65536,
        price_per_hour: Some(1.3232),
        fractional: false,
    },
    InstanceType {
        name: "g6.8xlarge",
        gpu_model: "l4",
        gpu_count: 1,
        gpu_memory_mib: 22888,
        vcpus: 32,
        memory_mib: 131072,
        price_per_hour: Some(2.0144),
        fractional: false,
    },
    InstanceType {
        name: "g6.xlarge",
        gpu_model: "l4",
        gpu_count: 1,
        gpu_memory_mib: 22888,
        vcpus: 4,
        memory_mib: 16384,
        price_per_hour: Some(0.8048),
        fractional: false,
    },
    InstanceType {
        name: "g6e.12xlarge",
        gpu_model: "l40s",
        gpu_count: 4,
        gpu_memory_mib: 45776,
        vcpus: 48,
        memory_mib: 393216,
        price_per_hour: Some(10.4926),
        fractional: false,
    },
    InstanceType {
        name: "g6e.16xlarge",
        gpu_model: "l40s",
        gpu_count: 1,
        gpu_memory_mib: 45776,
        vcpus: 64,
        memory_mib: 524288,
        price_per_hour: Some(7.57719),
        fractional: false,
    },
    InstanceType {
        name: "g6e.24xlarge",
        gpu_model: "l40s",
        gpu_count: 4,
        gpu_memory_mib: 45776,
        vcpus: 96,
        memory_mib: 786432,
        price_per_hour: Some(15.0656),
        fractional: false,
    },
    InstanceType {
        name: "g6e.2xlarge",
        gpu_model: "l40s",
        gpu_count: 1,
        gpu_memory_mib: 45776,
        vcpus: 8,
        memory_mib: 65536,
        price_per_hour: Some(2.24208),
        fractional: false,
    },
    InstanceType {
        name: "g6e.48xlarge",
        gpu_model: "l40s",
        gpu_count: 8,
        gpu_memory_mib: 45776,
        vcpus: 192,
        memory_mib: 1572864,
        price_per_hour: Some(30.1312),
        fractional: false,
    },
    InstanceType {
        name: "g6e.4xlarge",
        gpu_model: "l40s",
        gpu_count: 1,
        gpu_memory_mib: 45776,
        vcpus: 16,
        memory_mib: 131072,
        price_per_hour: Some(3.00424),
        fractional: false,
    },
    InstanceType {
        name: "g6e.8xlarge",
        gpu_model: "l40s",
        gpu_count: 1,
        gpu_memory_mib: 45776,
        vcpus: 32,
        memory_mib: 262144,
        price_per_hour: Some(4.52856),
        fractional: false,
    },
    InstanceType {
        name: "g6e.xlarge",
        gpu_model: "l40s",
        gpu_count: 1,
        gpu_memory_mib: 45776,
        vcpus: 4,
        memory_mib: 32768,
        price_per_hour: Some(1.861),
        fractional: false,
    },
    InstanceType {
        name: "g6f.2xlarge",
        gpu_model: "l4",
        gpu_count: 1,
        gpu_memory_mib: 5722,
        vcpus: 8,
        memory_mib: 32768,
        price_per_hour: Some(0.475),
        fractional: true,
    },
    InstanceType {
        name: "g6f.4xlarge",
        gpu_model: "l4",
        gpu_count: 1,
        gpu_memory_mib: 11444,
        vcpus: 16,
        memory_mib: 65536,
        price_per_hour: Some(0.95),
        fractional: true,
    },
    InstanceType {
        name: "g6f.large",
        gpu_model: "l4",
        gpu_count: 1,
        gpu_memory_mib: 2861,
        vcpus: 2,
        memory_mib: 8192,
        price_per_hour: Some(0.202),
        fractional: true,
    },
    InstanceType {
        name: "g6f.xlarge",
        gpu_model: "l4",
        gpu_count: 1,
        gpu_memory_mib: 2861,
        vcpus: 4,
        memory_mib: 16384,
        price_per_hour: Some(0.2375),
        fractional: true,
    },
    InstanceType {
        name: "g7.12xlarge",
        gpu_model: "rtx-pro-4500",
        gpu_count: 2,
        gpu_memory_mib: 32768,
        vcpus: 48,
        memory_mib: 196608,
        price_per_hour: Some(7.12832),
        fractional: false,
    },
    InstanceType {
        name: "g7.24xlarge",
        gpu_model: "rtx-pro-4500",
        gpu_count: 4,
        gpu_memory_mib: 32768,
        vcpus: 96,
        memory_mib: 393216,
        price_per_hour: Some(14.2566),
        fractional: false,
    },
    InstanceType {
        name: "g7.2xlarge",
        gpu_model: "rtx-pro-4500",
        gpu_count: 1,
        gpu_memory_mib: 32768,
        vcpus: 8,
        memory_mib: 32768,
        price_per_hour: Some(2.52),
        fractional: false,
    },
    InstanceType {
        name: "g7.48xlarge",
        gpu_model: "rtx-pro-4500",
        gpu_count: 8,
        gpu_memory_mib: 32768,
        vcpus: 192,
        memory_mib: 786432,
        price_per_hour: Some(28.5133),
        fractional: false,
    },
    InstanceType {
        name: "g7.4xlarge",
        gpu_model: "rtx-pro-4500",
        gpu_count: 1,
        gpu_memory_mib: 32768,
        vcpus: 16,
        memory_mib: 65536,
        price_per_hour: Some(3.04208),
        fractional: false,
    },
    InstanceType {
        name: "g7.8xlarge",
        gpu_model: "rtx-pro-4500",
        gpu_count: 1,
        gpu_memory_mib: 32768,
        vcpus: 32,
        memory_mib: 131072,
        price_per_hour: Some(4.08624),
        fractional: false,
    },
    InstanceType {
        name: "g7e.12xlarge",
        gpu_model: "rtx-pro-server-6000",
        gpu_count: 2,
        gpu_memory_mib: 98304,
        vcpus: 48,
        memory_mib: 524288,
        price_per_hour: Some(8.28608),
        fractional: false,
    },
    InstanceType {
        name: "g7e.24xlarge",
        gpu_model: "rtx-pro-server-6000",
        gpu_count: 4,
        gpu_memory_mib: 98304,
        vcpus: 96,
        memory_mib: 1048576,
        price_per_hour: Some(16.5722),
        fractional: false,
    },
    InstanceType {
        name: "g7e.2xlarge",
        gpu_model: "rtx-pro-server-6000",
        gpu_count: 1,
        gpu_memory_mib: 98304,
        vcpus: 8,
        memory_mib: 65536,
        price_per_hour: Some(3.36312),
        fractional: false,
    },
    InstanceType {
        name: "g7e.48xlarge",
        gpu_model: "rtx-pro-server-6000",
        gpu_count: 8,
        gpu_memory_mib: 98304,
        vcpus: 192,
        memory_mib: 2097152,
        price_per_hour: Some(33.1443),
        fractional: false,
    },
    InstanceType {
        name: "g7e.4xlarge",
        gpu_model: "rtx-pro-server-6000",
        gpu_count: 1,
        gpu_memory_mib: 98304,
        vcpus: 16,
        memory_mib: 131072,
        price_per_hour: Some(3.99816),
        fractional: false,
    },
    InstanceType {
        name: "g7e.8xlarge",
        gpu_model: "rtx-pro-server-6000",
        gpu_count: 1,
        gpu_memory_mib: 98304,
        vcpus: 32,
        memory_mib: 262144,
        price_per_hour: Some(5.26824),
        fractional: false,
    },
    InstanceType {
        name: "gr6.4xlarge",
        gpu_model: "l4",
        gpu_count: 1,
        gpu_memory_mib: 22888,
        vcpus: 16,
        memory_mib: 131072,
        price_per_hour: Some(1.5392),
        fractional: false,
    },
    InstanceType {
        name: "gr6.8xlarge",
        gpu_model: "l4",
        gpu_count: 1,
        gpu_memory_mib: 22888,
        vcpus: 32,
        memory_mib: 262144,
        price_per_hour: Some(2.4464),
        fractional: false,
    },
    InstanceType {
        name: "gr6f.4xlarge",
        gpu_model: "l4",
        gpu_count: 1,
        gpu_memory_mib: 11444,
        vcpus: 16,
        memory_mib: 131072,
        price_per_hour: Some(1.066),
        fractional: true,
    },
    InstanceType {
        name: "p2.16xlarge",
        gpu_model: "k80",
        gpu_count: 16,
        gpu_memory_mib: 12288,
        vcpus: 64,
        memory_mib: 749568,
        price_per_hour: Some(14.4),
        fractional: false,
    },
    InstanceType {
        name: "p2.8xlarge",
        gpu_model: "k80",
        gpu_count: 8,
        gpu_memory_mib: 12288,
        vcpus: 32,
        memory_mib: 499712,
        price_per_hour: Some(7.2),
        fractional: false,
    },
    InstanceType {
        name: "p2.xlarge",
        gpu_model: "k80",
        gpu_count: 1,
        gpu_memory_mib: 12288,
        vcpus: 4,
        memory_mib: 62464,
        price_per_hour: Some(0.9),
        fractional: false,
    },
    InstanceType {
        name: "p3.16xlarge",
        gpu_model: "v100",
        gpu_count: 8,
        gpu_memory_mib: 16384,
        vcpus: 64,
        memory_mib: 499712,
        price_per_hour: Some(24.48),
        fractional: false,
    },
    InstanceType {
        name: "p3.2xlarge",
        gpu_model: "v100",
        gpu_count: 1,
        gpu_memory_mib: 16384,
        vcpus: 8,
        memory_mib: 62464,
        price_per_hour: Some(3.06),
        fractional: false,
    },
    InstanceType {
        name: "p3.8xlarge",
        gpu_model: "v100",
        gpu_count: 4,
        gpu_memory_mib: 16384,
        vcpus: 32,
        memory_mib: 249856,
        price_per_hour: Some(12.24),
        fractional: false,
    },
    InstanceType {
        name: "p3dn.24xlarge",
        gpu_model: "v100",
        gpu_count: 8,
        gpu_memory_mib: 32768,
        vcpus: 96,
        memory_mib: 786432,
        price_per_hour: Some(31.212),
        fractional: false,
    },
    InstanceType {
        name: "p4d.24xlarge",
        gpu_model: "a100",
        gpu_count: 8,
        gpu_memory_mib: 40960,
        vcpus: 96,
        memory_mib: 1179648,
        price_per_hour: Some(21.9576),
        fractional: false,
    },
    InstanceType {
        name: "p4de.24xlarge",
        gpu_model: "a100",
        gpu_count: 8,
        gpu_memory_mib: 81920,
        vcpus: 96,
        memory_mib: 1179648,
        price_per_hour: Some(27.4471),
        fractional: false,
    },
    InstanceType {
        name: "p5.48xlarge",
        gpu_model: "h100",
        gpu_count: 8,
        gpu_memory_mib: 81920,
        vcpus: 192,
        memory_mib: 2097152,
        price_per_hour: Some(55.04),
        fractional: false,
    },
    InstanceType {
        name: "p5.4xlarge",
        gpu_model: "h100",
        gpu_count: 1,
        gpu_memory_mib: 81920,
        vcpus: 16,
        memory_mib: 262144,
        price_per_hour: Some(6.88),
        fractional: false,
    },
    InstanceType {
        name: "p5e.48xlarge",
        gpu_model: "h200",
        gpu_count: 8,
        gpu_memory_mib: 144384,
        vcpus: 192,
        memory_mib: 2097152,
        price_per_hour: None,
        fractional: false,
    },
    InstanceType {
        name: "p5en.48xlarge",
        gpu_model: "h200",
        gpu_count: 8,
        gpu_memory_mib: 144384,
        vcpus: 192,
        memory_mib: 2097152,
        price_per_hour: Some(63.296),
        fractional: false,
    },
    InstanceType {
        name: "p6-b200.48xlarge",
        gpu_model: "b200",
        gpu_count: 8,
        gpu_memory_mib: 183359,
        vcpus: 192,
        memory_mib: 2097152,
        price_per_hour: Some(113.933),
        fractional: false,
    },
    InstanceType {
        name: "p6-b300.48xlarge",
        gpu_model: "b300",
        gpu_count: 8,
        gpu_memory_mib: 275040,
        vcpus: 192,
        memory_mib: 4194304,
        price_per_hour: Some(142.416),
        fractional: false,
    },
];

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

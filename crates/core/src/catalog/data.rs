//! The table of the catalogue: one row per instance type, as in
//! `shared/data/ec2_gpu_instances.csv` (where a fractional type has 0 GPUs; here it is
//! one GPU of the slice's memory, marked `fractional`).

use super::InstanceType;

/// When the prices below were recorded (us-east-1, on-demand, Linux).
pub const PRICES_AS_OF: &str = "2026-11-29";
/// Region the prices are for.
pub const PRICE_REGION: &str = "us-east-1";

/// Every known type, sorted by name.
#[rustfmt::skip]
pub static INSTANCE_TYPES: &[InstanceType] = &[
    // name, GPU model, GPUs (none given for a slice), MiB per GPU, vCPUs, memory MiB, $ per hour
    whole("g3.16xlarge",      "m60",                  4,   8192,  64,  499712, Some(4.56)),
    whole("g3.4xlarge",       "m60",                  1,   8192,  16,  124928, Some(1.14)),
    whole("g3.8xlarge",       "m60",                  2,   8192,  32,  249856, Some(2.28)),
    whole("g3s.xlarge",       "m60",                  1,   8192,   4,   31232, Some(0.75)),
    whole("g4dn.12xlarge",    "t4",                   4,  16384,  48,  196608, Some(3.912)),
    whole("g4dn.16xlarge",    "t4",                   1,  16384,  64,  262144, Some(4.352)),
    whole("g4dn.2xlarge",     "t4",                   1,  16384,   8,   32768, Some(0.752)),
    whole("g4dn.4xlarge",     "t4",                   1,  16384,  16,   65536, Some(1.204)),
    whole("g4dn.8xlarge",     "t4",                   1,  16384,  32,  131072, Some(2.176)),
    whole("g4dn.metal",       "t4",                   8,  16384,  96,  393216, Some(7.824)),
    whole("g4dn.xlarge",      "t4",                   1,  16384,   4,   16384, Some(0.526)),
    whole("g5.12xlarge",      "a10g",                 4,  22888,  48,  196608, Some(5.672)),
    whole("g5.16xlarge",      "a10g",                 1,  22888,  64,  262144, Some(4.096)),
    whole("g5.24xlarge",      "a10g",                 4,  22888,  96,  393216, Some(8.144)),
    whole("g5.2xlarge",       "a10g",                 1,  22888,   8,   32768, Some(1.212)),
    whole("g5.48xlarge",      "a10g",                 8,  22888, 192,  786432, Some(16.288)),
    whole("g5.4xlarge",       "a10g",                 1,  22888,  16,   65536, Some(1.624)),
    whole("g5.8xlarge",       "a10g",                 1,  22888,  32,  131072, Some(2.448)),
    whole("g5.xlarge",        "a10g",                 1,  22888,   4,   16384, Some(1.006)),
    whole("g5g.16xlarge",     "t4g",                  2,  16384,  64,  131072, Some(2.744)),
    whole("g5g.2xlarge",      "t4g",                  1,  16384,   8,   16384, Some(0.556)),
    whole("g5g.4xlarge",      "t4g",                  1,  16384,  16,   32768, Some(0.828)),
    whole("g5g.8xlarge",      "t4g",                  1,  16384,  32,   65536, Some(1.372)),
    whole("g5g.metal",        "t4g",                  2,  16384,  64,  131072, Some(2.744)),
    whole("g5g.xlarge",       "t4g",                  1,  16384,   4,    8192, Some(0.42)),
    whole("g6.12xlarge",      "l4",                   4,  22888,  48,  196608, Some(4.6016)),
    whole("g6.16xlarge",      "l4",                   1,  22888,  64,  262144, Some(3.3968)),
    whole("g6.24xlarge",      "l4",                   4,  22888,  96,  393216, Some(6.6752)),
    whole("g6.2xlarge",       "l4",                   1,  22888,   8,   32768, Some(0.9776)),
    whole("g6.48xlarge",      "l4",                   8,  22888, 192,  786432, Some(13.3504)),
    whole("g6.4xlarge",       "l4",                   1,  22888,  16,   65536, Some(1.3232)),
    whole("g6.8xlarge",       "l4",                   1,  22888,  32,  131072, Some(2.0144)),
    whole("g6.xlarge",        "l4",                   1,  22888,   4,   16384, Some(0.8048)),
    whole("g6e.12xlarge",     "l40s",                 4,  45776,  48,  393216, Some(10.4926)),
    whole("g6e.16xlarge",     "l40s",                 1,  45776,  64,  524288, Some(7.57719)),
    whole("g6e.24xlarge",     "l40s",                 4,  45776,  96,  786432, Some(15.0656)),
    whole("g6e.2xlarge",      "l40s",                 1,  45776,   8,   65536, Some(2.24208)),
    whole("g6e.48xlarge",     "l40s",                 8,  45776, 192, 1572864, Some(30.1312)),
    whole("g6e.4xlarge",      "l40s",                 1,  45776,  16,  131072, Some(3.00424)),
    whole("g6e.8xlarge",      "l40s",                 1,  45776,  32,  262144, Some(4.52856)),
    whole("g6e.xlarge",       "l40s",                 1,  45776,   4,   32768, Some(1.861)),
    slice("g6f.2xlarge",      "l4",                        5722,   8,   32768, Some(0.475)),
    slice("g6f.4xlarge",      "l4",                       11444,  16,   65536, Some(0.95)),
    slice("g6f.large",        "l4",                        2861,   2,    8192, Some(0.202)),
    slice("g6f.xlarge",       "l4",                        2861,   4,   16384, Some(0.2375)),
    whole("g7.12xlarge",      "rtx-pro-4500",         2,  32768,  48,  196608, Some(7.12832)),
    whole("g7.24xlarge",      "rtx-pro-4500",         4,  32768,  96,  393216, Some(14.2566)),
    whole("g7.2xlarge",       "rtx-pro-4500",         1,  32768,   8,   32768, Some(2.52)),
    whole("g7.48xlarge",      "rtx-pro-4500",         8,  32768, 192,  786432, Some(28.5133)),
    whole("g7.4xlarge",       "rtx-pro-4500",         1,  32768,  16,   65536, Some(3.04208)),
    whole("g7.8xlarge",       "rtx-pro-4500",         1,  32768,  32,  131072, Some(4.08624)),
    whole("g7e.12xlarge",     "rtx-pro-server-6000",  2,  98304,  48,  524288, Some(8.28608)),
    whole("g7e.24xlarge",     "rtx-pro-server-6000",  4,  98304,  96, 1048576, Some(16.5722)),
    whole("g7e.2xlarge",      "rtx-pro-server-6000",  1,  98304,   8,   65536, Some(3.36312)),
    whole("g7e.48xlarge",     "rtx-pro-server-6000",  8,  98304, 192, 2097152, Some(33.1443)),
    whole("g7e.4xlarge",      "rtx-pro-server-6000",  1,  98304,  16,  131072, Some(3.99816)),
    whole("g7e.8xlarge",      "rtx-pro-server-6000",  1,  98304,  32,  262144, Some(5.26824)),
    whole("gr6.4xlarge",      "l4",                   1,  22888,  16,  131072, Some(1.5392)),
    whole("gr6.8xlarge",      "l4",                   1,  22888,  32,  262144, Some(2.4464)),
    slice("gr6f.4xlarge",     "l4",                       11444,  16,  131072, Some(1.066)),
    whole("p2.16xlarge",      "k80",                 16,  12288,  64,  749568, Some(14.4)),
    whole("p2.8xlarge",       "k80",                  8,  12288,  32,  499712, Some(7.2)),
    whole("p2.xlarge",        "k80",                  1,  12288,   4,   62464, Some(0.9)),
    whole("p3.16xlarge",      "v100",                 8,  16384,  64,  499712, Some(24.48)),
    whole("p3.2xlarge",       "v100",                 1,  16384,   8,   62464, Some(3.06)),
    whole("p3.8xlarge",       "v100",                 4,  16384,  32,  249856, Some(12.24)),
    whole("p3dn.24xlarge",    "v100",                 8,  32768,  96,  786432, Some(31.212)),
    whole("p4d.24xlarge",     "a100",                 8,  40960,  96, 1179648, Some(21.9576)),
    whole("p4de.24xlarge",    "a100",                 8,  81920,  96, 1179648, Some(27.4471)),
    whole("p5.48xlarge",      "h100",                 8,  81920, 192, 2097152, Some(55.04)),
    whole("p5.4xlarge",       "h100",                 1,  81920,  16,  262144, Some(6.88)),
    whole("p5e.48xlarge",     "h200",                 8, 144384, 192, 2097152, None),
    whole("p5en.48xlarge",    "h200",                 8, 144384, 192, 2097152, Some(63.296)),
    whole("p6-b200.48xlarge", "b200",                 8, 183359, 192, 2097152, Some(113.933)),
    whole("p6-b300.48xlarge", "b300",                 8, 275040, 192, 4194304, Some(142.416)),
];

/// A type with `gpu_count` whole GPUs.
const fn whole(
    name: &'static str,
    gpu_model: &'static str,
    gpu_count: u32,
    gpu_memory_mib: u64,
    vcpus: u32,
    memory_mib: u64,
    price_per_hour: Option<f64>,
) -> InstanceType {
    InstanceType {
        name,
        gpu_model,
        gpu_count,
        gpu_memory_mib,
        vcpus,
        memory_mib,
        price_per_hour,
        fractional: false,
    }
}

/// A fractional-GPU type: a slice of `gpu_memory_mib` of one GPU, listed as one GPU.
const fn slice(
    name: &'static str,
    gpu_model: &'static str,
    gpu_memory_mib: u64,
    vcpus: u32,
    memory_mib: u64,
    price_per_hour: Option<f64>,
) -> InstanceType {
    InstanceType {
        name,
        gpu_model,
        gpu_count: 1,
        gpu_memory_mib,
        vcpus,
        memory_mib,
        price_per_hour,
        fractional: true,
    }
}

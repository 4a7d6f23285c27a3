use super::*;
use crate::api::InstanceTypeInfo;
use api::model::{GpuDeviceInfo, GpuInfo, MemoryInfo, VCpuInfo};
use gpushare_core::catalog;
use gpushare_core::model::HostState;

fn info(name: &str, maker: &str, model: &str, count: i32, mib: i64) -> InstanceTypeInfo {
    InstanceTypeInfo {
        instance_type: Some(name.into()),
        v_cpu_info: Some(VCpuInfo {
            default_v_cpus: Some(4),
        }),
        memory_info: Some(MemoryInfo {
            size_in_mib: Some(16384),
        }),
        gpu_info: Some(GpuInfo {
            gpus: vec![GpuDeviceInfo {
                name: Some(model.into()),
                manufacturer: Some(maker.into()),
                count: Some(count),
                memory_info: Some(MemoryInfo {
                    size_in_mib: Some(mib),
                }),
            }],
        }),
        processor_info: None,
    }
}

#[test]
fn merge_takes_gpu_facts_from_the_api_and_price_from_the_catalogue() {
    let t = merge_instance_type(&info("g6.xlarge", "NVIDIA", "L4", 1, 22888)).expect("nvidia");
    assert_eq!(t.gpu_model, "l4");
    assert_eq!(t.gpu_count, 1);
    assert_eq!(t.gpu_memory_mib, 22888);
    assert_eq!(t.vcpus, 4);
    assert_eq!(
        t.price_per_hour,
        catalog::lookup("g6.xlarge").and_then(|b| b.price_per_hour)
    );
    // A type the catalogue lacks still merges, without a price.
    let t = merge_instance_type(&info("g99.xlarge", "NVIDIA", "B300", 2, 100000)).expect("nvidia");
    assert_eq!(
        (t.name, t.gpu_model, t.gpu_count, t.price_per_hour),
        ("g99.xlarge", "b300", 2, None)
    );
}

#[test]
fn merge_refuses_types_without_nvidia_gpus() {
    let amd = merge_instance_type(&info("g4ad.xlarge", "AMD", "Radeon Pro V520", 1, 8192))
        .expect_err("amd");
    assert!(amd.contains("not NVIDIA"), "{amd}");
    let cpu = InstanceTypeInfo {
        instance_type: Some("m5.large".into()),
        ..InstanceTypeInfo::default()
    };
    assert!(merge_instance_type(&cpu)
        .expect_err("cpu")
        .contains("no GPU"));
}

#[test]
fn client_tokens_are_deterministic_short_and_distinct_per_subnet() {
    let a = client_token("prod", "", "tok-1", Some("subnet-a"), None);
    assert_eq!(a, client_token("prod", "", "tok-1", Some("subnet-a"), None));
    assert_ne!(a, client_token("prod", "", "tok-1", Some("subnet-b"), None));
    assert_ne!(a, client_token("prod", "", "tok-2", Some("subnet-a"), None));
    // Another store's launch of the same token never shares the client token.
    let s1 = client_token("prod", "s1", "tok-1", Some("subnet-a"), None);
    assert_ne!(a, s1);
    assert_ne!(
        s1,
        client_token("prod", "s2", "tok-1", Some("subnet-a"), None)
    );
    assert!(a.len() <= 64 && a.is_ascii());
    // A fallback instance type never reuses the first type's token.
    assert_ne!(
        a,
        client_token("prod", "", "tok-1", Some("subnet-a"), Some("g6.2xlarge"))
    );
}

#[test]
fn ec2_states_map_onto_host_states() {
    assert_eq!(host_state(&InstanceStateName::Pending), HostState::Pending);
    assert_eq!(host_state(&InstanceStateName::Running), HostState::Running);
    assert_eq!(
        host_state(&InstanceStateName::Stopped),
        HostState::ShuttingDown
    );
    assert_eq!(
        host_state(&InstanceStateName::ShuttingDown),
        HostState::ShuttingDown
    );
    assert_eq!(
        host_state(&InstanceStateName::Terminated),
        HostState::Terminated
    );
}

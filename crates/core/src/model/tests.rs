use super::*;

#[test]
fn resource_addr_round_trips_as_a_json_map_key() {
    let mut m = BTreeMap::new();
    m.insert(ResourceAddr::new(ResourceKind::Service, "embedder"), 1);
    let j = serde_json::to_string(&m).expect("serialises");
    assert_eq!(j, r#"{"service.embedder":1}"#);
    let back: BTreeMap<ResourceAddr, i32> = serde_json::from_str(&j).expect("parses");
    assert_eq!(back, m);
    assert!("nope.x".parse::<ResourceAddr>().is_err());
    assert!("service.".parse::<ResourceAddr>().is_err());
}

fn container(gpu: Option<GpuSpec>) -> Container {
    Container {
        name: "c".into(),
        image: "i".into(),
        command: vec![],
        env: BTreeMap::new(),
        secret_env: BTreeMap::new(),
        cpu: 1024,
        memory: 512,
        gpu,
        essential: true,
        ..Default::default()
    }
}

#[test]
fn task_shape_sums_mps_containers_and_rejects_mixing() {
    let mps = |m, p| {
        Some(GpuSpec {
            count: None,
            mps: Some(MpsShare {
                processes: 1,
                memory: m,
                max_compute_percent: p,
            }),
        })
    };
    let td = TaskDefinition {
        containers: vec![
            container(mps(1000, Some(20))),
            container(mps(500, None)),
            container(None),
        ],
        ..Default::default()
    };
    let s = td.shape().expect("valid");
    assert_eq!(s.cpu_units, 3072);
    assert_eq!(s.memory_mib, 1536);
    assert_eq!(
        s.gpu,
        TaskGpu::Mps {
            clients: 2,
            memory_mib: 1500,
            compute_percent: 20,
            capped: true
        }
    );
    let mixed = TaskDefinition {
        containers: vec![
            container(mps(1000, None)),
            container(Some(GpuSpec {
                count: Some(1),
                mps: None,
            })),
        ],
        ..Default::default()
    };
    assert_eq!(mixed.shape(), Err(ShapeError::MixedGpuModes));
}

//! The schemas against the model, the docs generated from them, and their rules.
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
fn compare(path: &str, attrs: &[Attribute], blocks: &[Block], v: &serde_json::Value, top: bool) {
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

#[allow(
    clippy::too_many_lines,
    reason = "a literal value of every resource kind"
)]
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
            user: Some(1000),
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
        load_balancers: vec![crate::model::LoadBalancer {
            target_group_arn:
                "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/web/0123456789abcdef"
                    .into(),
            container_name: "main".into(),
            container_port: 8080,
        }],
        auto_scaling: Some(crate::model::AutoScaling {
            min_count: 1,
            max_count: 4,
            target: crate::model::ScalingTarget {
                metric: "vllm:num_requests_waiting".into(),
                value: 5,
                port: Some("http".into()),
                path: "/stats/metrics".into(),
            },
            scale_out_cooldown: 60,
            scale_in_cooldown: 600,
        }),
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
            ResourceKind::Job => round_trip::<crate::model::Job>(min),
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

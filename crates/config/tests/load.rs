//! Valid configurations, one fixture per feature (`tests/fixtures/<feature>/`),
//! and what they load to.

use gpushare_config::{format_source, load_dir, load_sources, validate, LoadOptions, Source};
use gpushare_core::schema;
use gpushare_core::{CloudKind, Desired, PlacementStrategy, ResourceKind};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn load(name: &str, opts: &LoadOptions) -> Desired {
    match load_dir(&fixture(name), opts) {
        Ok(l) => {
            let problems: Vec<String> = validate(&l.desired)
                .iter()
                .filter(|d| d.is_error())
                .map(ToString::to_string)
                .collect();
            assert!(
                problems.is_empty(),
                "{name} does not validate:\n{}",
                problems.join("\n")
            );
            l.desired
        }
        Err(e) => panic!("{name} does not load:\n{e}"),
    }
}

#[test]
fn variables_take_defaults_then_env_then_var_overrides() {
    let d = load("variables", &LoadOptions::default());
    assert_eq!(d.settings.cluster, "inference");
    assert_eq!(d.services["embedder"].desired_count, 2);
    assert_eq!(d.capacity_providers["l4"].max_size, 4);
    assert_eq!(d.capacity_providers["l4"].subnets, vec!["subnet-a"]);

    // The environment (only when asked to read it) beats the default...
    std::env::set_var("GPUSHARE_VAR_pool_size", "6");
    let d = load("variables", &LoadOptions::default());
    assert_eq!(
        d.capacity_providers["l4"].max_size, 4,
        "env is read only with read_env"
    );
    let env = LoadOptions {
        vars: vec![],
        read_env: true,
        ..Default::default()
    };
    let d = load("variables", &env);
    assert_eq!(d.capacity_providers["l4"].max_size, 6);

    // ... and -var beats the environment; the last -var wins; lists parse as HCL.
    let opts = LoadOptions {
        vars: vec![
            ("pool_size".into(), "7".into()),
            ("pool_size".into(), "8".into()),
            ("replicas".into(), "5".into()),
            ("subnets".into(), "[\"subnet-x\", \"subnet-y\"]".into()),
            ("cluster".into(), "other".into()),
        ],
        read_env: true,
        ..Default::default()
    };
    let d = load("variables", &opts);
    std::env::remove_var("GPUSHARE_VAR_pool_size");
    assert_eq!(d.capacity_providers["l4"].max_size, 8);
    assert_eq!(d.services["embedder"].desired_count, 5);
    assert_eq!(
        d.capacity_providers["l4"].subnets,
        vec!["subnet-x", "subnet-y"]
    );
    assert_eq!(d.settings.cluster, "other");
}

#[test]
fn var_errors_name_the_variable() {
    let bad_number = LoadOptions {
        vars: vec![("replicas".into(), "lots".into())],
        read_env: false,
        ..Default::default()
    };
    let e = load_dir(&fixture("variables"), &bad_number)
        .expect_err("not a number")
        .to_string();
    assert!(
        e.contains("invalid value for variable \"replicas\"") && e.contains("\"lots\""),
        "{e}"
    );
    let undeclared = LoadOptions {
        vars: vec![("replica".into(), "1".into())],
        read_env: false,
        ..Default::default()
    };
    let e = load_dir(&fixture("variables"), &undeclared)
        .expect_err("undeclared")
        .to_string();
    assert!(
        e.contains("-var sets an undeclared variable `replica`"),
        "{e}"
    );
    // Issue 45 item 5, regression: the did-you-mean was lost behind the second hint.
    assert!(e.contains("did you mean `replicas`?"), "{e}");
}

#[test]
fn locals_reference_each_other_in_any_order() {
    let d = load("locals", &LoadOptions::default());
    let c = &d.task_definitions["embedder"].containers[0];
    assert_eq!(c.image, "ghcr.io/example/embedder:1.4");
    assert_eq!(c.env["ENV"], "prod");
    let mps = c.gpu.as_ref().and_then(|g| g.mps.as_ref()).expect("mps");
    assert_eq!(mps.memory, 4096);
    assert_eq!(mps.max_compute_percent, Some(50));
    assert_eq!(d.capacity_providers["l4"].tags["team"], "ml");
    assert_eq!(d.capacity_providers["l4"].tags["env"], "prod");
}

#[test]
fn local_cycles_are_reported() {
    let src = Source {
        name: "main.hcl".into(),
        text: "locals {\n  a = local.b\n  b = local.a\n}\n".into(),
    };
    let e = load_sources(&[src], &LoadOptions::default())
        .expect_err("cycle")
        .to_string();
    assert!(
        e.contains("depends on itself") && e.contains("main.hcl:2:7"),
        "{e}"
    );
}

#[test]
fn functions_evaluate() {
    let d = load("functions", &LoadOptions::default());
    let cp = &d.capacity_providers["l4"];
    assert_eq!(cp.instance_type, "g6.12xlarge");
    assert_eq!((cp.min_size, cp.max_size), (3, 9));
    assert_eq!(cp.subnets, vec!["subnet-a", "subnet-b", "subnet-c"]);
    assert_eq!(cp.tags["owner"], "ANA");
    assert_eq!(cp.tags["team"], "ml");
    assert_eq!(cp.tags["size"], "3-hosts");
    let c = &d.task_definitions["embedder"].containers[0];
    assert_eq!(c.image, "ghcr.io/example/embedder:1.4");
    assert_eq!(c.command, vec!["serve", "a,b"]);
    assert_eq!(c.env["MODE"], "fast");
}

#[test]
fn references_resolve_to_names_and_blocks_fill_defaults() {
    let d = load("references", &LoadOptions::default());
    assert_eq!(d.gpu_instances["reserved"].capacity_provider, "a10g");
    let s = &d.services["ocr"];
    assert_eq!(s.task_definition, "ocr");
    assert_eq!(s.capacity_provider, "a10g");
    assert_eq!(s.placement_strategy, PlacementStrategy::Spread);
    assert!(s.distinct_host);
    assert_eq!(s.deployment.max_surge_percent, 50);
    assert_eq!(s.deployment.min_healthy_percent, 100, "schema default");
    let td = &d.task_definitions["ocr"];
    assert_eq!(
        td.containers
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        vec!["server", "sidecar"]
    );
    assert_eq!(td.containers[0].gpu.as_ref().and_then(|g| g.count), Some(1));
    assert!(td.containers[1].essential, "schema default");
    // Locations of blocks and attributes are recorded.
    let loc = &d.locations["service.ocr"];
    assert!(
        loc.file.ends_with("main.hcl") && (loc.line, loc.col) == (25, 1),
        "{loc}"
    );
    let loc = &d.locations["service.ocr.desired_count"];
    assert_eq!((loc.line, loc.col), (28, 3));
    assert!(d
        .locations
        .contains_key("task_definition.ocr.container.sidecar.cpu"));
}

#[test]
fn several_files_merge() {
    let l = load_dir(&fixture("multi_file"), &LoadOptions::default()).expect("loads");
    assert_eq!(l.files.len(), 3);
    assert!(l.files.windows(2).all(|w| w[0] < w[1]), "sorted");
    let d = l.desired;
    assert_eq!(d.settings.cluster, "multi");
    assert_eq!(d.settings.seed, 7);
    assert_eq!(d.settings.cloud, CloudKind::Local);
    assert_eq!(d.services["embedder"].desired_count, 3);
    assert!(d.locations["service.embedder"]
        .file
        .ends_with("c_services.hcl"));
}

#[test]
fn load_dir_skips_hidden_and_other_files_and_needs_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = load_dir(dir.path(), &LoadOptions::default())
        .expect_err("empty")
        .to_string();
    assert!(e.contains("no configuration files"), "{e}");
    let pool = "capacity_provider \"l4\" {\n  instance_type = \"g6.xlarge\"\n  max_size = 1\n}\n";
    std::fs::write(dir.path().join("main.hcl"), format!("\u{feff}{pool}")).expect("write");
    std::fs::write(dir.path().join(".main.hcl"), pool).expect("write");
    std::fs::write(dir.path().join("notes.txt"), "not hcl {").expect("write");
    let l = load_dir(dir.path(), &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(l.files, vec![dir.path().join("main.hcl")]);
}

#[test]
fn duplicates_across_files_name_both_places() {
    let a = Source {
        name: "a.hcl".into(),
        text: "capacity_provider \"l4\" {\n  instance_type = \"g6.xlarge\"\n  max_size = 1\n}\n"
            .into(),
    };
    let b = Source { name: "b.tf".into(), text: "resource \"gpushare_capacity_provider\" \"x\" {\n  name = \"l4\"\n  instance_type = \"g6.xlarge\"\n  max_size = 1\n}\n".into() };
    let e = load_sources(&[a, b], &LoadOptions::default())
        .expect_err("duplicate")
        .to_string();
    assert!(
        e.contains("duplicate capacity_provider \"l4\"")
            && e.contains("b.tf:1:1")
            && e.contains("a.hcl:1:1"),
        "{e}"
    );
}

/// `gpushare_join_token` is a Terraform-only resource (the provider mints the token):
/// gpushare reads the rest of the file and leaves it alone.
#[test]
fn a_terraform_join_token_is_left_to_terraform() {
    let t = Source {
        name: "main.tf".into(),
        text: "resource \"gpushare_capacity_provider\" \"lab\" {\n  name  = \"lab\"\n  hosts = \"registered\"\n}\n\nresource \"gpushare_join_token\" \"lab\" {\n  pool = gpushare_capacity_provider.lab.name\n  ttl  = \"720h\"\n}\n".into(),
    };
    let d = load_sources(&[t], &LoadOptions::default()).expect("loads");
    assert_eq!(d.capacity_providers.keys().collect::<Vec<_>>(), vec!["lab"]);
}

#[test]
fn terraform_and_hcl_mix() {
    let d = load("tf_mix", &LoadOptions::default());
    assert_eq!(
        d.settings.cluster, "tf",
        "the provider \"gpushare\" block holds the settings"
    );
    assert_eq!(
        d.capacity_providers.keys().collect::<Vec<_>>(),
        vec!["l4-pool"]
    );
    let llm = &d.services["llm"];
    assert_eq!(
        (
            llm.task_definition.as_str(),
            llm.capacity_provider.as_str(),
            llm.desired_count
        ),
        ("llm", "l4-pool", 1)
    );
    assert_eq!(d.services["embedder"].capacity_provider, "l4-pool");
    assert_eq!(
        d.capacity_providers["l4-pool"].instance_type, "g6.12xlarge",
        "from data.gpushare_instance_type"
    );
    assert_eq!(d.task_definitions["llm"].containers[0].name, "server");
    assert!(d.locations["service.llm"].file.ends_with("main.tf"));
}

#[test]
fn names_follow_the_schema_pattern_in_both_forms() {
    let h = Source {
        name: "main.hcl".into(),
        text:
            "capacity_provider \"bad name\" {\n  instance_type = \"g6.xlarge\"\n  max_size = 1\n}\n"
                .into(),
    };
    let e = load_sources(&[h], &LoadOptions::default())
        .expect_err("bad")
        .to_string();
    assert!(
        e.contains("invalid capacity_provider name") && e.contains("main.hcl:1:19"),
        "{e}"
    );
    let t = Source { name: "main.tf".into(), text: "resource \"gpushare_capacity_provider\" \"p\" {\n  name = \"bad name\"\n  instance_type = \"g6.xlarge\"\n  max_size = 1\n}\n".into() };
    let e = load_sources(&[t], &LoadOptions::default())
        .expect_err("bad")
        .to_string();
    assert!(
        e.contains("invalid capacity_provider name") && e.contains("main.tf:2:10"),
        "{e}"
    );
}

#[test]
fn variable_types() {
    let tf = "variable \"pools\" {\n  type = map(object({ size = number }))\n  default = { a = { size = 2 } }\n}\nvariable \"azs\" {\n  type = set(string)\n  default = [\"a\"]\n}\nresource \"gpushare_capacity_provider\" \"p\" {\n  name = \"p\"\n  instance_type = \"g6.xlarge\"\n  max_size = var.pools.a.size\n  subnets = var.azs\n}\n";
    let d = load_sources(
        &[Source {
            name: "main.tf".into(),
            text: tf.into(),
        }],
        &LoadOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.capacity_providers["p"].max_size, 2);
    assert_eq!(d.capacity_providers["p"].subnets, vec!["a"]);
    let hcl = "variable \"x\" {\n  type = object({ a = number })\n  default = { a = 1 }\n}\n";
    let e = load_sources(
        &[Source {
            name: "main.hcl".into(),
            text: hcl.into(),
        }],
        &LoadOptions::default(),
    )
    .expect_err("unsupported")
    .to_string();
    assert!(
        e.contains("unsupported type `object({ a = number })` for variable \"x\"")
            && e.contains("main.hcl:2:10"),
        "{e}"
    );
}

#[test]
fn terraform_meta_arguments() {
    let ok = "resource \"gpushare_capacity_provider\" \"p\" {\n  name = \"p\"\n  instance_type = \"g6.xlarge\"\n  max_size = 1\n  depends_on = [terraform_data.x]\n  lifecycle {\n    prevent_destroy = true\n  }\n}\n";
    let d = load_sources(
        &[Source {
            name: "main.tf".into(),
            text: ok.into(),
        }],
        &LoadOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.capacity_providers["p"].max_size, 1);
    let bad = "resource \"gpushare_capacity_provider\" \"p\" {\n  count = 2\n  name = \"p\"\n  instance_type = \"g6.xlarge\"\n  max_size = 1\n}\n";
    let e = load_sources(
        &[Source {
            name: "main.tf".into(),
            text: bad.into(),
        }],
        &LoadOptions::default(),
    )
    .expect_err("count")
    .to_string();
    assert!(
        e.contains("`count` is not supported on gpushare resources") && e.contains("main.tf:2:3"),
        "{e}"
    );
}

#[test]
fn hcl_references_are_to_whole_resources() {
    let t = "capacity_provider \"l4\" {\n  instance_type = \"g6.xlarge\"\n  max_size = 1\n}\ngpu_instance \"g\" {\n  capacity_provider = capacity_provider.l4.instance_type\n}\n";
    let e = load_sources(
        &[Source {
            name: "main.hcl".into(),
            text: t.into(),
        }],
        &LoadOptions::default(),
    )
    .expect_err("bad ref")
    .to_string();
    assert!(
        e.contains("unsupported reference `capacity_provider.l4.instance_type`")
            && e.contains("main.hcl:6:23")
            && e.contains("write `capacity_provider.l4`"),
        "{e}"
    );
}

#[test]
fn terraform_only_accepts_name_and_id_references() {
    let t = "resource \"gpushare_capacity_provider\" \"p\" {\n  name = \"p\"\n  instance_type = \"g6.xlarge\"\n  max_size = 1\n}\nresource \"gpushare_gpu_instance\" \"g\" {\n  name = \"g\"\n  capacity_provider = gpushare_capacity_provider.p.host_ids\n}\n";
    let e = load_sources(
        &[Source {
            name: "main.tf".into(),
            text: t.into(),
        }],
        &LoadOptions::default(),
    )
    .expect_err("bad ref")
    .to_string();
    assert!(
        e.contains("unsupported reference `gpushare_capacity_provider.p.host_ids`")
            && e.contains("main.tf:8:23"),
        "{e}"
    );
}

#[test]
fn terraform_data_sources_other_than_the_catalogue_are_refused() {
    let t = "data \"aws_ami\" \"gpu\" {\n  most_recent = true\n}\nresource \"gpushare_capacity_provider\" \"p\" {\n  name = \"p\"\n  instance_type = \"g6.xlarge\"\n  image = data.aws_ami.gpu.id\n  max_size = 1\n}\n";
    let e = load_sources(
        &[Source {
            name: "main.tf".into(),
            text: t.into(),
        }],
        &LoadOptions::default(),
    )
    .expect_err("refused")
    .to_string();
    assert!(
        e.contains("data source `data.aws_ami` cannot be read here") && e.contains("main.tf:7:11"),
        "{e}"
    );
    let t = "data \"gpushare_instance_type\" \"x\" {\n  name = \"g6.xl\"\n}\n";
    let e = load_sources(
        &[Source {
            name: "main.tf".into(),
            text: t.into(),
        }],
        &LoadOptions::default(),
    )
    .expect_err("unknown")
    .to_string();
    assert!(
        e.contains("unknown instance type `g6.xl`") && e.contains("main.tf:2:10"),
        "{e}"
    );
}

/// Every schema's HCL example and Terraform example load, validate, and mean the same.
#[test]
fn schema_examples_load_in_both_forms_alike() {
    let hcl: String = ResourceKind::ALL
        .iter()
        .map(|k| schema::schema(*k).example.clone())
        .collect::<Vec<_>>()
        .join("\n");
    let tf: String = ResourceKind::ALL
        .iter()
        .map(|k| schema::schema(*k).terraform_example.clone())
        .collect::<Vec<_>>()
        .join("\n");
    let hcl = format!("{}\n{hcl}", schema::settings_schema().example);
    let opts = LoadOptions::default();
    let mut a = load_sources(
        &[Source {
            name: "examples.hcl".into(),
            text: hcl.clone(),
        }],
        &opts,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut b = load_sources(
        &[Source {
            name: "examples.tf".into(),
            text: tf.clone(),
        }],
        &opts,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        validate(&a).iter().all(|d| !d.is_error()),
        "{:?}",
        validate(&a)
    );
    a.locations.clear();
    b.locations.clear();
    a.settings = Default::default();
    assert_eq!(a, b);
    // The examples are already in canonical format.
    for (name, text) in [("examples.hcl", hcl), ("examples.tf", tf)] {
        let formatted = format_source(&Source {
            name: name.into(),
            text: text.clone(),
        })
        .expect("formats");
        assert_eq!(formatted, text, "{name} is not canonically formatted");
    }
}

#[test]
fn fixtures_and_examples_are_stable_under_fmt() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut dirs = vec![];
    for base in [root.join("examples"), fixture("")] {
        for e in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            dirs.push(e.path());
        }
    }
    let mut checked = 0;
    for dir in dirs {
        for f in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = f.path();
            if !matches!(p.extension().and_then(|e| e.to_str()), Some("hcl" | "tf")) {
                continue;
            }
            let text = std::fs::read_to_string(&p).expect("read");
            let src = Source {
                name: p.display().to_string(),
                text,
            };
            let once = format_source(&src).unwrap_or_else(|e| panic!("{e}"));
            let twice = format_source(&Source {
                name: src.name.clone(),
                text: once.clone(),
            })
            .expect("formats");
            assert_eq!(once, twice, "fmt is not idempotent on {}", p.display());
            // Formatting never changes meaning.
            let before = load_sources(std::slice::from_ref(&src), &LoadOptions::default());
            let after = load_sources(
                &[Source {
                    name: src.name.clone(),
                    text: once,
                }],
                &LoadOptions::default(),
            );
            if let (Ok(mut a), Ok(mut b)) = (before, after) {
                a.locations.clear();
                b.locations.clear();
                assert_eq!(a, b, "fmt changed the meaning of {}", p.display());
            }
            checked += 1;
        }
    }
    assert!(checked >= 8, "checked {checked} files");
}

#[test]
fn a_tf_provider_gpushare_block_is_the_settings() {
    let tf = |text: &str| Source {
        name: "main.tf".into(),
        text: text.into(),
    };
    let d = load_sources(
        &[tf("variable \"c\" {\n  default = \"tf-example\"\n}\nprovider \"aws\" {\n  region = \"x\"\n}\nprovider \"gpushare\" {\n  cluster   = var.c\n  state_dir = \"st\"\n  endpoints = { ec2 = \"http://127.0.0.1:5000\" }\n}\n")],
        &LoadOptions::default(),
    )
    .expect("loads");
    assert_eq!(d.settings.cluster, "tf-example");
    assert_eq!(d.settings.store.as_deref(), Some("file://st"));
    assert_eq!(
        d.settings.ec2_endpoint.as_deref(),
        Some("http://127.0.0.1:5000")
    );
    // Without one: the defaults, as before.
    let d = load_sources(&[tf("provider \"aws\" {}\n")], &LoadOptions::default()).expect("loads");
    assert_eq!(d.settings.cluster, "default");
    assert_eq!(d.settings.store, None);
    // Checked against the provider's schema, located.
    let e = load_sources(
        &[tf("provider \"gpushare\" {\n  clustr = \"x\"\n}\n")],
        &LoadOptions::default(),
    )
    .expect_err("unknown attribute")
    .to_string();
    assert!(e.contains("clustr") && e.contains("main.tf:2:3"), "{e}");
    // Two settings blocks: the second names the first.
    let e = load_sources(
        &[tf("provider \"gpushare\" {}\nprovider \"gpushare\" {}\n")],
        &LoadOptions::default(),
    )
    .expect_err("two")
    .to_string();
    assert!(
        e.contains("main.tf:2:1") && e.contains("main.tf:1:1"),
        "{e}"
    );
}

#[test]
fn an_ec2_fleet_needs_the_controller_address_whatever_its_store() {
    let src = |settings: &str| {
        format!(
            "gpushare {{\n  cluster = \"c\"\n  cloud = \"ec2\"\n{settings}}}\ncapacity_provider \"l4\" {{\n  instance_type = \"g6.xlarge\"\n  max_size = 1\n}}\n"
        )
    };
    let refused = |text: String| {
        let loaded = gpushare_config::load_sources(
            &[gpushare_config::Source {
                name: "main.hcl".into(),
                text,
            }],
            &gpushare_config::LoadOptions::default(),
        )
        .expect("loads");
        gpushare_config::validate(&loaded)
            .into_iter()
            .filter(|d| {
                d.path.as_deref() == Some("gpushare.controller_address")
                    && d.severity == gpushare_config::Severity::Error
            })
            .count()
    };
    // Hosts join the controller and never read the store: any store works, but
    // without the controller's address launched hosts could not join.
    assert_eq!(refused(src("")), 1, "no controller address");
    assert_eq!(refused(src("  store = \"etcd://192.0.2.5:2379/p\"\n")), 1);
    let controller = "  controller_address = \"https://ctl.internal:7443\"\n";
    assert_eq!(refused(src(controller)), 0, "the default file store");
    assert_eq!(
        refused(src(&format!("{controller}  store = \"file:///srv/st\"\n"))),
        0
    );
}

#[test]
fn reserve_compute_is_accepted_on_services_and_pools_and_defaults_to_false() {
    let text = |pool: &str, svc: &str| Source {
        name: "main.hcl".into(),
        text: format!(
            r#"
capacity_provider "l4" {{
  instance_type = "g6.xlarge"
  max_size      = 2
  {pool}
}}
task_definition "w" {{
  container "c" {{
    image = "i"
    gpu {{
      mps {{
        memory              = 4096
        max_compute_percent = 60
      }}
    }}
  }}
}}
service "w" {{
  task_definition   = task_definition.w
  capacity_provider = capacity_provider.l4
  desired_count     = 2
  {svc}
}}
"#
        ),
    };
    let d = load_sources(&[text("", "")], &LoadOptions::default()).expect("loads");
    assert!(!d.capacity_providers["l4"].reserve_compute);
    assert!(!d.services["w"].reserve_compute);
    let d = load_sources(
        &[text("reserve_compute = true", "reserve_compute = true")],
        &LoadOptions::default(),
    )
    .expect("loads");
    assert!(d.capacity_providers["l4"].reserve_compute);
    assert!(d.services["w"].reserve_compute);
    // The schema types it: a string is refused, naming the attribute.
    let e = load_sources(
        &[text("", "reserve_compute = \"yes\"")],
        &LoadOptions::default(),
    )
    .expect_err("a string is not a bool")
    .to_string();
    assert!(e.contains("reserve_compute"), "{e}");
}

/// The planner's settings (heartbeat timeout, boot grace, consolidation) load from
/// the `gpushare` block and the provider block alike; a bad value is refused with
/// its file:line:col.
#[test]
fn planner_settings_load_from_both_blocks_and_bad_values_are_located() {
    let src = |name: &str, text: &str| Source {
        name: name.into(),
        text: text.into(),
    };
    let d = load_sources(
        &[src(
            "main.hcl",
            "gpushare {\n  heartbeat_timeout_seconds = 45\n  boot_grace_seconds = 900\n  consolidate = true\n}\n",
        )],
        &LoadOptions::default(),
    )
    .expect("loads");
    assert_eq!(
        (
            d.settings.heartbeat_timeout_seconds,
            d.settings.boot_grace_seconds,
            d.settings.consolidate
        ),
        (45, 900, true)
    );
    let d = load_sources(
        &[src(
            "main.tf",
            "provider \"gpushare\" {\n  heartbeat_timeout_seconds = 30\n}\n",
        )],
        &LoadOptions::default(),
    )
    .expect("loads");
    assert_eq!(d.settings.heartbeat_timeout_seconds, 30);
    assert_eq!(d.settings.boot_grace_seconds, 600, "the default");
    for (text, at) in [
        (
            "gpushare {\n  heartbeat_timeout_seconds = -5\n}\n",
            "main.hcl:2:",
        ),
        (
            "gpushare {\n  cluster = \"c\"\n  boot_grace_seconds = 100000\n}\n",
            "main.hcl:3:",
        ),
        ("gpushare {\n  consolidate = \"yes\"\n}\n", "main.hcl:2:"),
    ] {
        let e = load_sources(&[src("main.hcl", text)], &LoadOptions::default())
            .expect_err("a bad value is refused")
            .to_string();
        assert!(e.contains(at), "{text}: {e}");
    }
}

/// Issue 46 item 6, regression: a sensitive variable given a value of the wrong type
/// printed the value in the error (validate, the GitOps status record, the logs, the
/// console). The detail says it is sensitive instead.
#[test]
fn a_sensitive_variable_of_the_wrong_type_is_not_quoted_in_the_error() {
    let text = "gpushare {\n  cluster = \"c\"\n}\n\nvariable \"token\" {\n  type      = number\n  sensitive = true\n}\n\nvariable \"plain\" {\n  type = number\n}\n";
    let src = |t: &str| Source {
        name: "main.hcl".into(),
        text: t.into(),
    };
    let opts = LoadOptions {
        vars: vec![
            ("token".into(), "hunter2-secret".into()),
            ("plain".into(), "7".into()),
        ],
        read_env: false,
        ..Default::default()
    };
    let e = load_sources(&[src(text)], &opts)
        .expect_err("not a number")
        .to_string();
    assert!(e.contains("invalid value for variable \"token\""), "{e}");
    assert!(!e.contains("hunter2"), "the sensitive value is quoted: {e}");
    assert!(e.contains("got the string (sensitive)"), "{e}");
    // A variable that is not sensitive still shows what it got.
    let plain = LoadOptions {
        vars: vec![
            ("token".into(), "1".into()),
            ("plain".into(), "lots".into()),
        ],
        read_env: false,
        ..Default::default()
    };
    let e = load_sources(&[src(text)], &plain)
        .expect_err("not a number")
        .to_string();
    assert!(e.contains("\"lots\""), "{e}");
}

#[test]
fn auto_scaling_loads_with_ecs_default_cooldowns() {
    let src = Source {
        name: "main.hcl".into(),
        text: r#"
capacity_provider "l4" {
  instance_type = "g6.12xlarge"
  max_size      = 2
}
task_definition "embedder" {
  container "server" {
    image = "ghcr.io/example/embedder:1.4"
    gpu {
      mps {
        memory = 4096
      }
    }
  }
}
service "embedder" {
  task_definition   = task_definition.embedder
  capacity_provider = capacity_provider.l4
  desired_count     = 6
  auto_scaling {
    min_count          = 2
    max_count          = 12
    scale_in_cooldown  = 600
    target {
      metric = "gpu_sm_percent"
      value  = 70
    }
  }
}
"#
        .into(),
    };
    let d = load_sources(&[src], &LoadOptions::default()).expect("loads");
    let a = d.services["embedder"]
        .auto_scaling
        .clone()
        .expect("auto_scaling");
    assert_eq!((a.min_count, a.max_count), (2, 12));
    assert_eq!(
        a.metric(),
        Some(gpushare_core::model::ScalingMetric::GpuSmPercent)
    );
    assert_eq!(a.target.value, 70);
    assert_eq!((a.scale_out_cooldown, a.scale_in_cooldown), (300, 600));
    assert!(gpushare_config::validate(&d).iter().all(|x| !x.is_error()));
}

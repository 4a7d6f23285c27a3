//! Golden files of rendered plans (`tests/golden/*.txt`).
//! Regenerate with `UPDATE_GOLDEN=1 cargo test -p gpushare-core --test plan_golden`.

mod plan_support;
use gpushare_core::model::*;
use gpushare_core::plan::{Options, Plan};
use gpushare_core::render::{self, RenderOptions};
use plan_support::*;
use std::path::PathBuf;

fn golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display()));
    if expected != actual {
        let diff = similar::TextDiff::from_lines(expected.as_str(), actual)
            .unified_diff()
            .header("golden", "actual")
            .to_string();
        panic!(
            "{} differs from the rendered output (UPDATE_GOLDEN=1 to accept):\n{diff}",
            path.display()
        );
    }
}

fn text(p: &Plan, live: &Live) -> String {
    render::plan_text(p, &live.state, &RenderOptions { color: false })
}

/// The quickstart fleet with `n` embedders, applied and reporting.
fn running(n: u32) -> Live {
    let p = plan_ok(&quickstart(n), &empty_live(), &Options::default());
    settle(live_after(&p, 2_000))
}

#[test]
fn create_from_empty() {
    let live = empty_live();
    let p = plan_ok(&quickstart(6), &live, &Options::default());
    let t = text(&p, &live);
    assert!(!t.contains('\x1b'), "no colour unless asked");
    golden("create_from_empty.txt", &t);
    let json = serde_json::to_string_pretty(&render::show_json(&p.after)).unwrap() + "\n";
    golden("create_from_empty.show.json", &json);
}

#[test]
fn create_from_empty_in_colour() {
    let live = empty_live();
    let p = plan_ok(&quickstart(6), &live, &Options::default());
    let t = render::plan_text(&p, &live.state, &RenderOptions { color: true });
    assert!(t.contains("\x1b[32m+\x1b[0m"));
    golden("create_from_empty.color.txt", &t);
}

#[test]
fn scale_up() {
    let live = running(2);
    let p = plan_ok(&quickstart(6), &live, &Options::default());
    golden("scale_up.txt", &text(&p, &live));
}

#[test]
fn scale_down() {
    let live = running(6);
    let p = plan_ok(&quickstart(2), &live, &Options::default());
    golden("scale_down.txt", &text(&p, &live));
}

#[test]
fn replace_pool_instance_type() {
    let live = running(2);
    let mut d = quickstart(2);
    d.capacity_providers.get_mut("a10g").unwrap().instance_type = "g5.2xlarge".into();
    d.capacity_providers
        .get_mut("a10g")
        .unwrap()
        .root_volume
        .size_gib = 200;
    d.capacity_providers
        .get_mut("a10g")
        .unwrap()
        .tags
        .insert("team".into(), "ml".into());
    let p = plan_ok(&d, &live, &Options::default());
    golden("replace.txt", &text(&p, &live));
}

#[test]
fn update_in_place_with_new_revision() {
    let live = running(4);
    let mut d = quickstart(4);
    let c = &mut d.task_definitions.get_mut("embedder").unwrap().containers[0];
    c.image = "ghcr.io/example/embedder:1.5".into();
    c.command = vec!["serve".into(), "--port".into(), "8080".into()];
    d.services.get_mut("reranker").unwrap().placement_strategy = PlacementStrategy::Spread;
    let p = plan_ok(&d, &live, &Options::default());
    golden("update_in_place.txt", &text(&p, &live));
}

#[test]
fn unplaced() {
    let live = empty_live();
    let mut d = quickstart(2);
    d.task_definitions
        .insert("llm".into(), whole_td("ghcr.io/example/llm:0.9", 2));
    d.capacity_providers.get_mut("l4").unwrap().max_size = 1;
    d.services.get_mut("embedder").unwrap().desired_count = 20;
    let p = plan_ok(&d, &live, &Options::default());
    assert!(!p.unplaced.is_empty());
    golden("unplaced.txt", &text(&p, &live));
}

#[test]
fn destroy() {
    let live = running(3);
    let p = plan_ok(
        &quickstart(3),
        &live,
        &Options {
            destroy: true,
            ..Options::default()
        },
    );
    golden("destroy.txt", &text(&p, &live));
}

#[test]
fn impaired_host_replacement() {
    let mut live = running(6);
    let sick = live
        .state
        .hosts
        .values_mut()
        .find(|h| h.capacity_provider == "l4")
        .unwrap();
    sick.mps_health = MpsHealth::Impaired;
    let p = plan_ok(&quickstart(6), &live, &Options::default());
    golden("impaired_host.txt", &text(&p, &live));
}

/// Where compute caps used to block packing: by default (caps are limits, as in
/// ECS) the mixed fleet takes the 4 GPUs its memory needs; with the pool's
/// `reserve_compute` it takes 6 (see plan_compute.rs for the hand count).
#[test]
fn compute_caps_pack_by_memory_unless_reserved() {
    let live = empty_live();
    let p = plan_ok(&mixed_caps(false), &live, &Options::default());
    golden("compute_caps_default.txt", &text(&p, &live));
    let p = plan_ok(&mixed_caps(true), &live, &Options::default());
    golden("compute_caps_reserved.txt", &text(&p, &live));
}

#[test]
fn no_changes() {
    let live = running(6);
    let p = plan_ok(&quickstart(6), &live, &Options::default());
    assert!(p.is_empty());
    golden("no_changes.txt", &text(&p, &live));
}

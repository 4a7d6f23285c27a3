//! Rolling host refresh in the pure planner (issue 25): a pool's launch setting
//! changes, its hosts roll a batch per plan, and the plans are golden
//! (`tests/golden/refresh_*`; regenerate with
//! `EXPECTORATE=overwrite cargo test -p gpushare-core --test plan_refresh`).

use gpushare_core::model::*;
use gpushare_core::plan::{outdated_settings, Action, Options, Plan};
use gpushare_core::render::{self, RenderOptions};
use gpushare_testkit::plan::*;

fn golden(name: &str, actual: &str) {
    expectorate::assert_contents(format!("tests/golden/{name}"), actual);
}

fn text(p: &Plan, live: &Live) -> String {
    render::plan_text(
        p,
        &live.state,
        &RenderOptions {
            color: false,
            verbose: false,
        },
    )
}

/// One pool of 6 one-GPU hosts (`min_size` 6, `max_draining_percent` 34) on
/// image `image`, one embedder task per host.
fn six(image: &str) -> Desired {
    let mut d = Desired {
        settings: Settings {
            cluster: "inference".into(),
            seed: 7,
            ..Settings::default()
        },
        ..Desired::default()
    };
    let mut p = pool("g6.xlarge", 6, 12);
    p.image = Some(image.into());
    p.max_draining_percent = 34;
    d.capacity_providers.insert("l4".into(), p);
    d.task_definitions.insert(
        "embedder".into(),
        mps_td("ghcr.io/example/embedder:1.4", 6144, None),
    );
    let mut s = service("embedder", "l4", 6);
    s.distinct_host = true;
    d.services.insert("embedder".into(), s);
    d
}

/// [`settle`], and every host's agent reported at `observed_at`.
fn reported(live: Live) -> Live {
    let mut live = settle(live);
    for h in live.state.hosts.values_mut() {
        h.last_heartbeat = Some(live.observed_at);
    }
    live
}

fn running_six(image: &str) -> Live {
    let p = plan_ok(&six(image), &empty_live(), &Options::default());
    assert_eq!(p.launches.len(), 6);
    reported(live_after(&p, 2_000))
}

fn outdated(d: &Desired, live: &Live) -> Vec<String> {
    let pool = &d.capacity_providers["l4"];
    live.state
        .hosts
        .values()
        .filter(|h| !outdated_settings(h, pool).is_empty())
        .map(|h| h.id.clone())
        .collect()
}

fn running_tasks(live: &Live) -> usize {
    live.state
        .tasks
        .values()
        .filter(|t| t.state == TaskState::Running)
        .count()
}

/// The pool is updated in place (no `-/+`), and three plans of two hosts each roll
/// the six hosts; every plan moves (start before stop) what it drains, and the last
/// leaves none outdated.
#[test]
fn image_change_rolls_six_hosts_in_three_batches_of_two() {
    let mut live = running_six("ami-a");
    let d = six("ami-b");
    assert_eq!(outdated(&d, &live).len(), 6);
    for pass in 1..=3 {
        let p = plan_ok(&d, &live, &Options::default());
        if pass == 1 {
            assert_eq!(p.resource_changes.len(), 1);
            assert_eq!(p.resource_changes[0].action, Action::Update);
            golden("refresh_image.txt", &text(&p, &live));
            let json = serde_json::to_string_pretty(&p.refreshes).unwrap() + "\n";
            golden("refresh_image.json", &json);
        }
        assert!(!p.refreshes.is_empty(), "pass {pass}: {}", text(&p, &live));
        let r = &p.refreshes[0];
        assert_eq!(
            (r.now.len(), r.later.len()),
            (2, 6 - 2 * pass),
            "pass {pass}"
        );
        assert_eq!(r.now[0].changes[0].to_string(), "image ami-a -> ami-b");
        assert_eq!(p.launches.len(), 2, "pass {pass}");
        assert_eq!(p.moves.len(), 2, "pass {pass}");
        assert!(p.moves.iter().all(|m| m.hold));
        assert_eq!(p.retirements.len(), 2, "pass {pass}");
        assert!(p.retirements.iter().all(|r| r.if_empty));
        for l in &p.launches {
            assert_eq!(
                l.host.launch,
                Some(LaunchRecord::of(&d.capacity_providers["l4"]))
            );
        }
        live = reported(live_after(&p, 2_000 + pass as u64 * 100));
        assert_eq!(running_tasks(&live), 6, "pass {pass}");
        assert_eq!(outdated(&d, &live).len(), 6 - 2 * pass);
    }
    let p = plan_ok(&d, &live, &Options::default());
    assert!(p.is_empty(), "{}", text(&p, &live));
    assert!(p.refreshes.is_empty());
}

/// The emptiest outdated hosts go first.
#[test]
fn emptiest_hosts_roll_first() {
    let mut live = running_six("ami-a");
    let mut d = six("ami-b");
    // Two hosts lose their task: 4 tasks left.
    d.services.get_mut("embedder").unwrap().desired_count = 4;
    let first: Vec<String> = live.state.tasks.keys().take(2).cloned().collect();
    let emptied: Vec<String> = first
        .iter()
        .map(|t| live.state.tasks[t].host.clone())
        .collect();
    for t in &first {
        live.state.tasks.remove(t);
    }
    let p = plan_ok(&d, &live, &Options::default());
    let now: Vec<&str> = p.refreshes[0]
        .now
        .iter()
        .map(|o| o.host_id.as_str())
        .collect();
    let mut want: Vec<&str> = emptied.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(now, want);
}

/// A new image whose hosts never report: the first batch's moves are held (apply
/// keeps the old tasks and hosts), the refresh waits while the new hosts boot, and
/// stops once their boot grace is over, keeping every old host (taking tasks) and
/// the failed new hosts (taking none). Reverting the image rolls the failed hosts
/// back out, and launches nothing.
#[test]
fn a_new_image_that_never_boots_halts_the_refresh_and_reverting_rolls_back() {
    let before = running_six("ami-a");
    let d = six("ami-bad");
    let p = plan_ok(&d, &before, &Options::default());
    assert_eq!(p.launches.len(), 2);
    // What apply leaves when the successors never run: the new hosts launched
    // (never reporting), the moves held (successors dropped), old hosts kept.
    let mut live = before.clone();
    live.state.resources = p.after.resources.clone();
    live.state.serial = p.after.serial;
    for (n, l) in p.launches.iter().enumerate() {
        let mut h = l.host.clone();
        h.state = HostState::Running;
        h.instance_id = Some(format!("i-new{n}"));
        h.launched_at = Some(2_000);
        live.state.hosts.insert(h.id.clone(), h);
    }
    let new_ids: Vec<String> = p.launches.iter().map(|l| l.host.id.clone()).collect();
    // Within the boot grace: the refresh waits, nothing is drained or launched.
    live.observed_at = 2_100;
    let p = plan_ok(&d, &live, &Options::default());
    assert!(p.launches.is_empty() && p.moves.is_empty() && p.retirements.is_empty());
    assert!(p.refreshes[0]
        .waiting
        .as_deref()
        .unwrap()
        .contains("has not reported yet"));
    // After it: halted.
    live.observed_at = 2_000 + Options::default().boot_grace_seconds + 1;
    // The old hosts' agents go on reporting; the new ones never did.
    for h in live.state.hosts.values_mut() {
        if h.last_heartbeat.is_some() {
            h.last_heartbeat = Some(live.observed_at);
        }
    }
    let p = plan_ok(&d, &live, &Options::default());
    golden("refresh_halted.txt", &text(&p, &live));
    let r = &p.refreshes[0];
    assert!(r
        .halted
        .as_deref()
        .unwrap()
        .contains("no agent report since its launch"));
    assert_eq!((r.now.len(), r.later.len()), (0, 6));
    assert!(p.launches.is_empty() && p.moves.is_empty() && p.retirements.is_empty());
    for id in &new_ids {
        assert!(p.after.hosts.contains_key(id), "failed host {id} kept");
    }
    assert_eq!(p.after.hosts.len(), 8);
    // Reverting the image: the two failed hosts are the outdated ones now, empty:
    // retired; the old hosts stay, nothing is launched.
    let revert = six("ami-a");
    let p = plan_ok(&revert, &live, &Options::default());
    golden("refresh_revert.txt", &text(&p, &live));
    let mut retired: Vec<&str> = p.retirements.iter().map(|r| r.host_id.as_str()).collect();
    retired.sort();
    let mut want: Vec<&str> = new_ids.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(retired, want);
    assert!(p.launches.is_empty() && p.moves.is_empty());
    assert_eq!(p.after.hosts.len(), 6);
}

/// Reverting half-way through a good rollout rolls the new hosts back the same way.
#[test]
fn reverting_half_way_rolls_the_new_hosts_back() {
    let live = running_six("ami-a");
    let p = plan_ok(&six("ami-b"), &live, &Options::default());
    let live = reported(live_after(&p, 2_100));
    let back = six("ami-a");
    assert_eq!(outdated(&back, &live).len(), 2);
    let p = plan_ok(&back, &live, &Options::default());
    let r = &p.refreshes[0];
    assert_eq!((r.now.len(), r.later.len()), (2, 0));
    assert_eq!(r.now[0].changes[0].to_string(), "image ami-b -> ami-a");
    assert_eq!(p.launches.len(), 2);
    assert_eq!(p.moves.len(), 2);
    let live = reported(live_after(&p, 2_200));
    assert!(outdated(&back, &live).is_empty());
    assert_eq!(running_tasks(&live), 6);
}

/// `refresh { min_healthy_percent }` lowers the batch; `pause_seconds` waits after
/// a batch; other launch settings roll too, and a host in a subnet the pool no
/// longer lists.
#[test]
fn refresh_block_limits_and_other_settings() {
    let live = running_six("ami-a");
    let mut d = six("ami-a");
    {
        let p = d.capacity_providers.get_mut("l4").unwrap();
        p.refresh.min_healthy_percent = 90;
        p.refresh.pause_seconds = 300;
        p.key_name = Some("ops".into());
    }
    let p = plan_ok(&d, &live, &Options::default());
    let r = &p.refreshes[0];
    assert_eq!(r.now.len(), 1, "6 hosts, 90% healthy: one at a time");
    assert_eq!(r.now[0].changes[0].to_string(), "key_name (none) -> ops");
    let mut live = reported(live_after(&p, 2_100));
    for h in live.state.hosts.values_mut() {
        if h.launch == Some(LaunchRecord::of(&d.capacity_providers["l4"])) {
            h.launched_at = Some(2_050);
        }
    }
    let p = plan_ok(&d, &live, &Options::default());
    assert!(p.refreshes[0].now.is_empty());
    assert!(p.refreshes[0]
        .waiting
        .as_deref()
        .unwrap()
        .contains("pause_seconds 300"));
    live.observed_at = 2_400;
    let live = reported(live);
    let p = plan_ok(&d, &live, &Options::default());
    assert_eq!(p.refreshes[0].now.len(), 1);

    // Subnets: hosts planned into subnet-a roll when the pool lists only subnet-b.
    let mut live = running_six("ami-a");
    for h in live.state.hosts.values_mut() {
        h.subnet = Some("subnet-a".into());
    }
    let mut d = six("ami-a");
    d.capacity_providers.get_mut("l4").unwrap().subnets = vec!["subnet-b".into()];
    let p = plan_ok(&d, &live, &Options::default());
    assert_eq!(p.resource_changes[0].action, Action::Update);
    assert_eq!(
        p.refreshes[0].now[0].changes[0].to_string(),
        "subnet subnet-a -> one of subnet-b"
    );
}

/// Hosts recorded before launch settings were: not outdated unless their image
/// differs from the pool's (a fleet upgrading gpushare does not roll by itself).
#[test]
fn hosts_without_a_launch_record_roll_only_for_a_known_difference() {
    let mut live = running_six("ami-a");
    for h in live.state.hosts.values_mut() {
        h.launch = None;
        h.image_id = Some("ami-a".into());
    }
    let p = plan_ok(&six("ami-a"), &live, &Options::default());
    assert!(p.is_empty() && p.refreshes.is_empty());
    let p = plan_ok(&six("ami-b"), &live, &Options::default());
    assert_eq!(p.refreshes[0].now.len(), 2);
}

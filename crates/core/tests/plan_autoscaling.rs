//! Service auto scaling by target tracking (docs/autoscaling.md): a service scales out
//! once its metric has stayed above the target for the scale-out cooldown, to
//! `ceil(count * metric / target)` capped at `max_count`; scales in likewise once below
//! for the scale-in cooldown, never under `min_count` nor during a deployment; each
//! change is in the plan with its reason.

use gpushare_core::model::*;
use gpushare_core::plan::{Options, Plan};
use gpushare_core::render::{plan_json, plan_text, RenderOptions};
use gpushare_testkit::plan::*;

const T0: u64 = 1_000_000;

/// One pool of g6.12xlarge (4 x L4) and an embedder service of `count` tasks of a
/// quarter of an L4 each, tracking `gpu_sm_percent = 70` between 3 and 10 tasks,
/// scaling out after 180 s and in after 300 s.
fn fleet(count: u32) -> Desired {
    let mut d = quickstart(count);
    d.services.retain(|name, _| name == "embedder");
    d.task_definitions.insert(
        "embedder".into(),
        mps_td("ghcr.io/example/embedder:1.4", 5000, None),
    );
    let mut svc = service("embedder", "l4", count);
    svc.auto_scaling = Some(AutoScaling {
        min_count: 3,
        max_count: 10,
        target: ScalingTarget {
            metric: "gpu_sm_percent".into(),
            value: 70,
            port: None,
            path: gpushare_core::model::DEFAULT_METRICS_PATH.into(),
        },
        scale_out_cooldown: 180,
        scale_in_cooldown: 300,
    });
    d.services.insert("embedder".into(), svc);
    d
}

fn set_metric(d: &mut Desired, metric: &str) {
    if let Some(a) = d
        .services
        .get_mut("embedder")
        .and_then(|s| s.auto_scaling.as_mut())
    {
        a.target.metric = metric.into();
    }
}

/// What the agents report at `now`: every host heard from, every task running for
/// an hour with a usage sample of `sm` percent SM and `mem` MiB taken at `now`
/// (`None`: no sample).
fn report(mut live: Live, now: u64, sample: Option<(u32, u64)>) -> Live {
    live.observed_at = now;
    for h in live.state.hosts.values_mut() {
        h.last_heartbeat = Some(now);
    }
    live.task_status = live
        .state
        .tasks
        .values()
        .map(|t| {
            let usage = sample.map(|(sm, mem)| TaskUsage {
                gpu_memory_mib: mem,
                peak_gpu_memory_mib: mem,
                sm_percent: Some(sm),
                gpus: t.gpus.clone(),
                at: now,
                endpoint: None,
            });
            let status = TaskStatus {
                state: TaskState::Running,
                reason: None,
                exit_code: None,
                since: now.saturating_sub(3_600),
                restarts: 0,
                health: None,
                container_health: Default::default(),
                last_output: None,
                usage,
                started_at: None,
            };
            (t.id.clone(), status)
        })
        .collect();
    live
}

/// The fleet once `p` is applied, as its agents report at `now` with `sm` percent SM.
fn applied(p: &Plan, now: u64, sm: u32) -> Live {
    report(settle(live_after(p, now)), now, Some((sm, 1000)))
}

/// A fleet of `count` embedder tasks running, its scaling record written, at `T0`.
fn running(d: &Desired, sm: u32) -> Live {
    let p = plan_ok(d, &empty_live(), &Options::default());
    let live = applied(&p, T0, sm);
    assert_eq!(
        embedders(&live),
        d.services["embedder"].desired_count as usize
    );
    live
}

fn embedders(live: &Live) -> usize {
    live.state
        .tasks
        .values()
        .filter(|t| t.service == "embedder")
        .count()
}

/// The change of the plan's embedder scaling record, if any.
fn change(p: &Plan) -> Option<ScalingChange> {
    p.scaling
        .iter()
        .find(|u| u.service == "embedder")
        .and_then(|u| u.change.clone())
}

/// Plan at `now` with every task at `sm` percent, and apply it.
fn step(d: &Desired, live: &Live, now: u64, sm: u32) -> (Plan, Live) {
    let live = report(live.clone(), now, Some((sm, 1000)));
    let p = plan_ok(d, &live, &Options::default());
    let next = applied(&p, now, sm);
    (p, next)
}

#[test]
fn scales_out_once_the_metric_stays_above_target_for_the_cooldown_and_not_before() {
    let d = fleet(6);
    let live = running(&d, 91);
    // The breach begins: recorded, nothing started.
    let (p, live) = step(&d, &live, T0 + 10, 91);
    assert_eq!(change(&p), None);
    assert!(p.starts.is_empty(), "{:?}", p.starts);
    assert_eq!(
        p.after.scaling("embedder").and_then(|r| r.above_since),
        Some(T0 + 10)
    );
    assert!(p.records_only(), "only the breach is recorded");
    // Not yet: 179 s above target.
    let (p, live) = step(&d, &live, T0 + 189, 91);
    assert_eq!(change(&p), None);
    assert!(p.starts.is_empty());
    assert!(p.is_empty(), "nothing to write while the breach lasts");
    // 180 s: 6 -> ceil(6 * 91 / 70) = ceil(7.8) = 8.
    let (p, live) = step(&d, &live, T0 + 190, 91);
    let c = change(&p).expect("scales out");
    assert_eq!((c.from, c.to), (6, 8));
    assert_eq!(
        c.line("embedder"),
        "service.embedder: 6 -> 8 tasks: gpu_sm_percent 91 > target 70 for 3 min, averaged over 6 task(s) (auto_scaling)"
    );
    assert_eq!(p.starts.len(), 2);
    assert_eq!(embedders(&live), 8);
    let rec = live.state.scaling("embedder").expect("recorded");
    assert_eq!(
        (rec.count, rec.last_scale_out, rec.above_since),
        (8, Some(T0 + 190), None)
    );
    // Still hot right after: the next scale-out waits a whole cooldown again.
    let (p, live) = step(&d, &live, T0 + 200, 91);
    assert_eq!(change(&p), None);
    let (p, live) = step(&d, &live, T0 + 379, 91);
    assert_eq!(change(&p), None, "179 s since the breach was seen again");
    let (p, _) = step(&d, &live, T0 + 380, 91);
    assert_eq!(change(&p).map(|c| (c.from, c.to)), Some((8, 10)));
}

#[test]
fn scale_out_follows_the_ecs_formula_and_stops_at_max_count() {
    let d = fleet(6);
    let live = running(&d, 100);
    let (_, live) = step(&d, &live, T0 + 1, 100);
    // ceil(6 * 100 / 70) = ceil(8.57) = 9.
    let (p, live) = step(&d, &live, T0 + 181, 100);
    assert_eq!(change(&p).map(|c| (c.from, c.to)), Some((6, 9)));
    // Again: ceil(9 * 100 / 70) = 13, capped at max_count 10.
    let (_, live) = step(&d, &live, T0 + 200, 100);
    let (p, live) = step(&d, &live, T0 + 400, 100);
    let c = change(&p).expect("scales out to the cap");
    assert_eq!((c.from, c.to), (9, 10));
    assert!(c.reason.contains("capped at max_count 10"), "{}", c.reason);
    assert_eq!(embedders(&live), 10);
    // At max_count: never beyond, however long it stays hot.
    let (_, live) = step(&d, &live, T0 + 401, 100);
    let (p, live) = step(&d, &live, T0 + 2_000, 100);
    assert_eq!(change(&p), None);
    assert!(p.starts.is_empty());
    assert_eq!(embedders(&live), 10);
}

#[test]
fn scales_in_after_its_cooldown_and_never_below_min_count() {
    let d = fleet(8);
    let live = running(&d, 20);
    let (p, live) = step(&d, &live, T0 + 1, 20);
    assert_eq!(change(&p), None);
    let (p, live) = step(&d, &live, T0 + 300, 20);
    assert_eq!(change(&p), None, "299 s below target: not yet");
    // 300 s: 8 -> ceil(8 * 20 / 70) = ceil(2.29) = 3.
    let (p, live) = step(&d, &live, T0 + 301, 20);
    let c = change(&p).expect("scales in");
    assert_eq!((c.from, c.to), (8, 3));
    assert!(
        c.line("embedder")
            .starts_with("service.embedder: 8 -> 3 tasks: gpu_sm_percent 20 < target 70 for 5 min"),
        "{}",
        c.line("embedder")
    );
    assert_eq!(p.stops.len(), 5);
    assert_eq!(embedders(&live), 3);
    // Idle: ceil(3 * 1 / 70) = 1, held at min_count 3: no change.
    let (_, live) = step(&d, &live, T0 + 302, 1);
    let (p, live) = step(&d, &live, T0 + 5_000, 1);
    assert_eq!(change(&p), None);
    assert!(p.stops.is_empty());
    assert_eq!(embedders(&live), 3);
}

#[test]
fn scale_in_stops_at_min_count_and_says_so() {
    let d = fleet(8);
    let live = running(&d, 5);
    let (_, live) = step(&d, &live, T0 + 1, 5);
    // ceil(8 * 5 / 70) = 1, held at min_count 3.
    let (p, _) = step(&d, &live, T0 + 301, 5);
    let c = change(&p).expect("scales in");
    assert_eq!((c.from, c.to), (8, 3));
    assert!(c.reason.contains("held at min_count 3"), "{}", c.reason);
}

#[test]
fn scales_out_at_90_and_back_in_at_20_within_its_bounds() {
    let d = fleet(4);
    let live = running(&d, 90);
    let (_, live) = step(&d, &live, T0 + 1, 90);
    // ceil(4 * 90 / 70) = ceil(5.14) = 6.
    let (p, live) = step(&d, &live, T0 + 181, 90);
    assert_eq!(change(&p).map(|c| (c.from, c.to)), Some((4, 6)));
    assert_eq!(embedders(&live), 6);
    let (_, live) = step(&d, &live, T0 + 200, 20);
    // ceil(6 * 20 / 70) = ceil(1.71) = 2, held at min_count 3.
    let (p, live) = step(&d, &live, T0 + 500, 20);
    assert_eq!(change(&p).map(|c| (c.from, c.to)), Some((6, 3)));
    assert_eq!(embedders(&live), 3);
    let text = plan_text(
        &p,
        &live.state,
        &RenderOptions {
            color: false,
            verbose: false,
        },
    );
    assert!(
        text.contains("Auto scaling:\n  ~ service.embedder: 6 -> 3 tasks: gpu_sm_percent 20 < target 70 for 5 min"),
        "{text}"
    );
    let json = plan_json(&p);
    assert_eq!(json["scaling"][0]["change"]["from"], 6);
    assert_eq!(json["scaling"][0]["change"]["to"], 3);
    assert!(json["scaling"][0]["change"]["reason"]
        .as_str()
        .is_some_and(|r| r.contains("gpu_sm_percent 20 < target 70")));
    assert!(json["steps"]
        .as_array()
        .is_some_and(|s| s.iter().any(|s| s["step"] == "scaling")));
}

#[test]
fn no_scale_in_while_a_deployment_is_in_progress() {
    let mut d = fleet(8);
    let live = running(&d, 10);
    let (_, live) = step(&d, &live, T0 + 1, 10);
    // A new revision: its deployment starts in this plan.
    if let Some(td) = d.task_definitions.get_mut("embedder") {
        td.containers[0].image = "ghcr.io/example/embedder:1.5".into();
    }
    let live = report(live, T0 + 400, Some((10, 1000)));
    let p = plan_ok(&d, &live, &Options::default());
    assert_eq!(change(&p), None);
    assert!(
        p.notes
            .iter()
            .any(|n| n
                .contains("service.embedder: scale-in held while its deployment is in progress")),
        "{:?}",
        p.notes
    );
    assert!(
        !p.deployments.is_empty(),
        "the deployment of revision 2 starts"
    );
}

#[test]
fn no_samples_no_change() {
    let d = fleet(6);
    let p = plan_ok(&d, &empty_live(), &Options::default());
    let live = report(settle(live_after(&p, T0)), T0, None);
    for now in [T0 + 1, T0 + 1_000, T0 + 10_000] {
        let live = report(live.clone(), now, None);
        let p = plan_ok(&d, &live, &Options::default());
        assert!(p.scaling.is_empty(), "{:?}", p.scaling);
        assert!(p.starts.is_empty() && p.stops.is_empty());
    }
    // Stale samples count as none: taken long before the observation.
    let mut stale = report(live, T0 + 10_000, Some((99, 1000)));
    for s in stale.task_status.values_mut() {
        if let Some(u) = s.usage.as_mut() {
            u.at = T0;
        }
    }
    let p = plan_ok(&d, &stale, &Options::default());
    assert!(p.scaling.is_empty(), "{:?}", p.scaling);
}

#[test]
fn a_new_service_starts_at_desired_count_and_records_it() {
    let d = fleet(6);
    let p = plan_ok(&d, &empty_live(), &Options::default());
    assert_eq!(p.starts.len(), 6);
    let u = p.scaling.first().expect("a first record");
    assert_eq!((u.record.count, u.record.desired_count), (6, 6));
    assert_eq!(u.change, None);
}

#[test]
fn memory_percent_is_of_the_declared_mps_memory() {
    let mut d = fleet(4);
    set_metric(&mut d, "gpu_memory_percent");
    let p = plan_ok(&d, &empty_live(), &Options::default());
    // 4500 MiB of the 5000 declared: 90 %.
    let at = |now| report(settle(live_after(&p, T0)), now, Some((1, 4500)));
    let p1 = plan_ok(&d, &at(T0 + 1), &Options::default());
    let live = report(settle(live_after(&p1, T0 + 1)), T0 + 181, Some((1, 4500)));
    let p2 = plan_ok(&d, &live, &Options::default());
    let c = change(&p2).expect("scales out on memory");
    assert_eq!((c.from, c.to), (4, 6));
    assert!(
        c.reason.starts_with("gpu_memory_percent 90 > target 70"),
        "{}",
        c.reason
    );
}

#[test]
fn a_changed_desired_count_starts_the_scaling_again_from_it() {
    let d = fleet(6);
    let live = running(&d, 91);
    let (_, live) = step(&d, &live, T0 + 1, 91);
    let (_, live) = step(&d, &live, T0 + 181, 91);
    assert_eq!(embedders(&live), 8);
    let d5 = fleet(5);
    let live = report(live, T0 + 182, Some((70, 1000)));
    let p = plan_ok(&d5, &live, &Options::default());
    assert_eq!(p.after.scaling("embedder").map(|r| r.count), Some(5));
    assert_eq!(p.stops.len(), 3);
}

#[test]
fn a_prometheus_metric_without_port_and_a_name_that_is_no_metric_are_refused() {
    let mut d = fleet(6);
    set_metric(&mut d, "vllm:num_requests_waiting");
    let err =
        gpushare_core::plan::plan(&d, &empty_live(), &Options::default()).expect_err("refused");
    let text = err.to_string();
    assert!(
        text.contains("auto_scaling.target.port")
            && text.contains("port must name the port mapping"),
        "{text}"
    );
    set_metric(&mut d, "gpu sm percent");
    let err =
        gpushare_core::plan::plan(&d, &empty_live(), &Options::default()).expect_err("refused");
    let text = err.to_string();
    assert!(
        text.contains("auto_scaling.target.metric")
            && text.contains("nor a Prometheus metric name"),
        "{text}"
    );
}

/// The embedders track `vllm:num_requests_waiting = 5` from their own endpoint's
/// port `http` (what their agents scraped, in the usage samples).
fn on_endpoint_metric(d: &mut Desired) {
    if let Some(a) = d
        .services
        .get_mut("embedder")
        .and_then(|s| s.auto_scaling.as_mut())
    {
        a.target = ScalingTarget {
            metric: "vllm:num_requests_waiting".into(),
            value: 5,
            port: Some("http".into()),
            path: "/metrics".into(),
        };
    }
}

/// Every task's usage sample with `waiting` requests read from its endpoint.
fn waiting(mut live: Live, now: u64, waiting: f64) -> Live {
    live = report(live, now, None);
    for s in live.task_status.values_mut() {
        s.usage = Some(TaskUsage {
            at: now,
            endpoint: Some(EndpointSample {
                metric: "vllm:num_requests_waiting".into(),
                value: waiting,
            }),
            ..TaskUsage::default()
        });
    }
    live
}

#[test]
fn a_prometheus_metric_of_the_tasks_endpoint_scales_the_service_and_its_tasks_are_told_what_to_scrape(
) {
    let gpu = fleet(6);
    let live = running(&gpu, 50);
    assert!(live.state.tasks.values().all(|t| t.scrape.is_none()));
    // The target becomes the endpoint's metric: the running tasks are told to
    // scrape it (the scaling step sets their scrape), with nothing else changed.
    let mut d = gpu.clone();
    on_endpoint_metric(&mut d);
    let p = plan_ok(&d, &waiting(live.clone(), T0 + 1, 0.0), &Options::default());
    let want = Some(MetricScrape {
        metric: "vllm:num_requests_waiting".into(),
        port: "http".into(),
        path: "/metrics".into(),
    });
    let update = p
        .scaling
        .iter()
        .find(|u| u.service == "embedder")
        .expect("update");
    assert_eq!(update.scrapes.len(), 6, "{update:?}");
    assert!(update.scrapes.iter().all(|c| c.scrape == want));
    assert!(p.starts.is_empty() && p.stops.is_empty());
    assert!(p.after.tasks.values().all(|t| t.scrape == want));
    // 9 requests waiting on each of 6 tasks for the cooldown: 6 -> ceil(6 * 9 / 5) = 11,
    // held at max_count 10; the new tasks are placed with the scrape.
    let live = report(settle(live_after(&p, T0 + 1)), T0 + 1, None);
    let p = plan_ok(&d, &waiting(live, T0 + 10, 9.0), &Options::default());
    assert_eq!(change(&p), None);
    let live = settle(live_after(&p, T0 + 10));
    let p = plan_ok(&d, &waiting(live, T0 + 190, 9.0), &Options::default());
    let c = change(&p).expect("scales out");
    assert_eq!((c.from, c.to), (6, 10));
    assert!(
        c.reason.starts_with("vllm:num_requests_waiting 9 > target 5 for 3 min, averaged over 6 task(s), capped at max_count 10"),
        "{}",
        c.reason
    );
    assert_eq!(p.starts.len(), 4);
    assert!(p.starts.iter().all(|s| s.task.scrape == want));
    // A task whose scrape failed (no endpoint sample) does not count; none at all:
    // no change, the timers kept.
    let live = settle(live_after(&p, T0 + 190));
    let p = plan_ok(&d, &report(live, T0 + 600, None), &Options::default());
    assert_eq!(change(&p), None);
}

/// Right-sizing from use (issue 49 item 4): 20 embedders declare 5000 MiB each (four
/// to an L4, five GPUs on two g6.12xlarge) and peak at 1000 MiB for an hour: the
/// hint proposes 1280 MiB (the peak with 20% headroom, in 256 MiB steps), which packs
/// them on two GPUs of one host, a host fewer at its price. A peak near the declared
/// memory says so; a window under an hour gives no hint.
#[test]
fn a_service_that_uses_far_less_memory_than_it_declares_gets_a_hint_with_the_saving() {
    let mut d = fleet(20);
    if let Some(s) = d.services.get_mut("embedder") {
        s.auto_scaling = None;
    }
    let live = running(&d, 30);
    let p = plan_ok(&d, &live, &Options::default());
    assert!(p.is_empty(), "{p:?}");
    let [hint] = p.cost.usage.as_slice() else {
        panic!("one hint: {:?}", p.cost.usage);
    };
    assert_eq!(
        (
            hint.service.as_str(),
            hint.peak_mib,
            hint.declared_mib,
            hint.suggested_mib
        ),
        ("embedder", 1000, 5000, Some(1280))
    );
    assert_eq!((hint.tasks_measured, hint.window_seconds), (20, 3600));
    assert_eq!(
        (hint.gpus_now, hint.gpus_after, hint.hosts_freed),
        (5, 2, 1)
    );
    let price = gpushare_core::catalog::lookup("g6.12xlarge")
        .and_then(|t| t.price_per_hour)
        .unwrap();
    assert!((hint.saves_per_hour - price).abs() < 1e-9, "{hint:?}");
    let lines = gpushare_core::render::right_sizing_lines(&p);
    assert!(
        lines.iter().any(
            |l| l.contains("service embedder's tasks peaked at 1.0 of 4.9 GiB")
                && l.contains("memory = 1280")
                && l.contains("1 host fewer")
        ),
        "{lines:#?}"
    );

    // Near the limit: said, with no lower memory.
    let near = report(live.clone(), T0, Some((30, 4900)));
    let p = plan_ok(&d, &near, &Options::default());
    assert_eq!(p.cost.usage.len(), 1, "{:?}", p.cost.usage);
    assert_eq!(p.cost.usage[0].suggested_mib, None);
    assert!(gpushare_core::render::right_sizing_lines(&p)
        .iter()
        .any(|l| l.contains("near its MPS memory limit")));

    // Measured for ten minutes only: too short to judge.
    let mut young = live;
    for s in young.task_status.values_mut() {
        s.since = T0 - 600;
    }
    let p = plan_ok(&d, &young, &Options::default());
    assert!(p.cost.usage.is_empty(), "{:?}", p.cost.usage);
}

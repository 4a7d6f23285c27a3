//! The console's page load on a large fleet: 1,000 hosts and 10,000 tasks (goal:
//! under 300 ms a page). Printed, never asserted.
//!
//! `cargo bench -p gpushare-console --bench console`
//!
//! The fleet: 20 services of 500 MPS tasks (2,200 MiB of GPU memory each) on
//! g6.xlarge hosts (one L4 of 22,888 MiB: ten tasks a GPU), placed by the planner,
//! every host reporting with a detail per task; the plan is the steady one (nothing
//! to do). For each page it prints:
//! - render: the server's work for one request, the page made from the snapshot
//!   the console keeps (median and slowest of the runs);
//! - http: the same page fetched from the console's own router served on loopback
//!   (request sent to last byte read: the page, the headers, the socket);
//! - bytes: the page's size.
//!
//! Also the work of one observation that changed (the fingerprint that tells a
//! change, and the history's update), which the poller does, not a request.

use gpushare_bench::scale::running_after;
use gpushare_console::history::History;
use gpushare_console::{pages, server, svg, Snapshot};
use gpushare_core::model::{Desired, HostReport, Live, MpsHealth, StoreState, TaskStatus};
use gpushare_core::plan::{plan, Options, Plan};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

const HOSTS: u32 = 1_000;
const TASKS: u32 = 10_000;
const RUNS: usize = 15;

/// 20 services of `TASKS / 20` MPS tasks (2,200 MiB, every third capped at 20 %) on
/// one pool of g6.xlarge.
fn fleet() -> Desired {
    let (mut tds, mut services) = (serde_json::Map::new(), serde_json::Map::new());
    for i in 0..20u32 {
        let name = format!("model-{i:02}");
        let mut mps = json!({ "memory": 2200 });
        if i % 3 == 0 {
            mps["max_compute_percent"] = json!(20);
        }
        tds.insert(
            name.clone(),
            json!({ "container": [{
                "name": "server", "image": format!("registry.example/model-{i}:1"),
                "cpu": 256, "memory": 1024, "gpu": { "mps": mps }
            }] }),
        );
        services.insert(
            name.clone(),
            json!({ "task_definition": name, "capacity_provider": "l4", "desired_count": TASKS / 20 }),
        );
    }
    serde_json::from_value(json!({
        "settings": { "cluster": "bench", "seed": 1 },
        "capacity_providers": { "l4": { "instance_type": "g6.xlarge", "max_size": 2 * HOSTS } },
        "gpu_instances": {},
        "task_definitions": tds,
        "services": services,
    }))
    .expect("the bench's fleet")
}

fn plan_ok(d: &Desired, live: &Live) -> Plan {
    plan(d, live, &Options::default()).expect("the bench's fleet plans")
}

/// The fleet placed, running and reporting, and the steady plan over it.
fn snapshot() -> Snapshot {
    let d = fleet();
    let empty = Live {
        state: StoreState {
            cluster: "bench".into(),
            ..StoreState::default()
        },
        observed_at: 1,
        ..Live::default()
    };
    let now = 1_800_000_000;
    // The second plan finds the deployments done and records them completed; the
    // third is the steady one.
    let first = running_after(&plan_ok(&d, &empty), now);
    let live = running_after(&plan_ok(&d, &first), now);
    let plan = plan_ok(&d, &live);
    let mut reports: BTreeMap<String, HostReport> = BTreeMap::new();
    for h in live.state.hosts.values() {
        reports.insert(
            h.id.clone(),
            HostReport {
                host_id: h.id.clone(),
                at: now - 3,
                mps_health: MpsHealth::Healthy,
                gpus: h.gpus.clone(),
                agent_version: "0.1.0".into(),
                ..HostReport::default()
            },
        );
    }
    for t in live.state.tasks.values() {
        if let Some(r) = reports.get_mut(t.host.as_str()) {
            r.tasks.insert(t.id.clone(), t.state);
            r.task_details.insert(
                t.id.clone(),
                TaskStatus {
                    state: t.state,
                    reason: None,
                    exit_code: None,
                    since: now - 600,
                    restarts: 0,
                    health: None,
                    container_health: Default::default(),
                    last_output: None,
                    usage: None,
                    started_at: None,
                },
            );
        }
    }
    Snapshot {
        observed_at: now,
        state: live.state,
        reports: reports.into_values().collect(),
        desired: Some(d),
        plan: Ok(plan),
        commit: None,
        status: None,
        target_groups: Default::default(),
        by_host: Default::default(),
    }
}

/// Median and slowest of `RUNS` runs of `f` (after one run to warm up), in ms.
fn time<T>(mut f: impl FnMut() -> T) -> (f64, f64, T) {
    let mut out = f();
    let mut ms = vec![];
    for _ in 0..RUNS {
        let start = Instant::now();
        out = std::hint::black_box(f());
        ms.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    (ms[ms.len() / 2], ms[ms.len() - 1], out)
}

/// GET `path` from `addr` over a fresh connection: the whole response's bytes.
fn get(addr: std::net::SocketAddr, path: &str) -> Vec<u8> {
    let mut s = std::net::TcpStream::connect(addr).expect("connecting to the console");
    s.set_read_timeout(Some(Duration::from_secs(30))).ok();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("sending the request");
    let mut body = vec![];
    s.read_to_end(&mut body).expect("reading the response");
    assert!(body.starts_with(b"HTTP/1.1 200"), "GET {path} failed");
    body
}

fn main() {
    // `cargo bench` passes --bench; a filter is not supported.
    let start = Instant::now();
    let snap = snapshot();
    let host = snap.state.hosts.keys().next().cloned().expect("a host");
    println!(
        "console page load: {} hosts, {} tasks, {} GPUs (fleet built and planned in {:.1} s); {RUNS} runs each, median / slowest",
        snap.state.hosts.len(),
        snap.state.tasks.len(),
        snap.state.hosts.values().map(|h| h.gpus.len()).sum::<usize>(),
        start.elapsed().as_secs_f64()
    );
    let mut hist = History::default();
    hist.record(&snap);
    let pages: Vec<(&str, String)> = vec![
        ("/", "fleet".into()),
        ("/services", "services".into()),
        (
            &*Box::leak(format!("/hosts/{host}").into_boxed_str()),
            "host".into(),
        ),
        ("/plan", "plan".into()),
        ("/fleet.svg", "fleet.svg".into()),
    ];
    let mut renders = vec![];
    for (path, name) in &pages {
        let (med, max, bytes) = time(|| {
            let out = match name.as_str() {
                "fleet" => pages::fleet(&snap, 1),
                "services" => pages::services(&snap, &hist, 1),
                "host" => pages::host(&snap, &hist, &host, 1).expect("the host"),
                "plan" => pages::plan(&snap, &hist, 1),
                _ => svg::fleet_svg(&snap.state, &snap.reports, snap.observed_at),
            };
            out.expect("rendering").len()
        });
        renders.push((*path, name.clone(), med, max, bytes));
    }
    let (fp_med, fp_max, _) = time(|| {
        let key = snap.fingerprint();
        hist.record(&snap);
        key.len()
    });

    // The same pages through the console's router, on loopback.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let addr = rt.block_on(async {
        let mut once = Some(snap);
        let console =
            server::Console::start(server::Auth::Open, Duration::from_secs(3600), move || {
                let s = once.take();
                async move { s.ok_or_else(|| anyhow::anyhow!("observed once")) }
            });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, server::router(console)).await;
        });
        addr
    });
    // Wait for the first (only) observation.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut s = std::net::TcpStream::connect(addr).expect("connecting");
        write!(
            s,
            "GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .ok();
        let mut head = [0u8; 12];
        if s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "the console never observed");
        std::thread::sleep(Duration::from_millis(100));
    }
    println!(
        "{:<22} {:>17} {:>17} {:>11}",
        "page", "render ms", "http ms", "bytes"
    );
    for (path, _, med, max, bytes) in &renders {
        let (hmed, hmax, _) = time(|| get(addr, path).len());
        println!(
            "{:<22} {:>8.1} / {:>6.1} {:>8.1} / {:>6.1} {:>11}",
            if path.starts_with("/hosts/") {
                "/hosts/ID"
            } else {
                path
            },
            med,
            max,
            hmed,
            hmax,
            bytes
        );
    }
    println!(
        "{:<22} {:>8.1} / {:>6.1}   (per changed observation, in the poller)",
        "fingerprint+history", fp_med, fp_max
    );
    let slowest = renders.iter().map(|r| r.3).fold(0.0, f64::max);
    println!(
        "goal: under 300 ms a page; slowest render {slowest:.1} ms ({})",
        if slowest < 300.0 { "met" } else { "missed" }
    );
    rt.shutdown_background();
}

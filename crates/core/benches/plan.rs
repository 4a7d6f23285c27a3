//! Plan time as fleets grow: 1,000 and 10,000 tasks (about 100 to 2,000 hosts).
//!
//! `cargo bench -p gpushare-core --bench plan`
//!
//! - `from_empty/N`: the first plan of N tasks (registrations, placement of
//!   every task, the launches);
//! - `steady/N`: re-planning the fleet once it runs (nothing to do: the usual
//!   `gpushare plan` / reconcile pass);
//! - `scale_up_10pct/N`: every service asks for 10% more tasks.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use gpushare_core::model::{Desired, Live, Settings, StoreState};
use gpushare_core::plan::{plan, Options};
use gpushare_testkit::plan::{live_after, mps_td, plan_ok, pool, service, settle};
use std::hint::black_box;
use std::time::Duration;

/// `tasks` MPS tasks over 20 services on two L4 pools: single-GPU g6.xlarge
/// hosts (most of the fleet) and four-GPU g6.12xlarge hosts.
fn fleet(tasks: u32) -> Desired {
    let mut d = Desired {
        settings: Settings {
            cluster: "bench".into(),
            seed: 1,
            ..Settings::default()
        },
        ..Desired::default()
    };
    d.capacity_providers
        .insert("small".into(), pool("g6.xlarge", 0, 10_000));
    d.capacity_providers
        .insert("large".into(), pool("g6.12xlarge", 0, 10_000));
    let per = tasks / 20;
    for i in 0..20u32 {
        let memory = [2048, 3072, 4096, 6144, 8192][(i % 5) as usize];
        let mut td = mps_td(
            &format!("registry.example/model-{i}:1"),
            memory,
            if i % 3 == 0 { Some(20) } else { None },
        );
        td.containers[0].cpu = 512;
        td.containers[0].memory = 1024;
        d.task_definitions.insert(format!("model-{i:02}"), td);
        let pool = if i % 4 == 0 { "large" } else { "small" };
        d.services.insert(
            format!("model-{i:02}"),
            service(&format!("model-{i:02}"), pool, per),
        );
    }
    d
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("plan");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(10))
        .warm_up_time(Duration::from_secs(2));
    let o = Options::default();
    for n in [1_000u32, 10_000] {
        let d = fleet(n);
        let empty = Live {
            state: StoreState {
                cluster: "bench".into(),
                ..StoreState::default()
            },
            strays: vec![],
            observed_at: 1,
            facts: Default::default(),
            ..Live::default()
        };
        let first = plan_ok(&d, &empty, &o);
        eprintln!(
            "{n} tasks: {} hosts launched, {} placed, {} unplaced",
            first.launches.len(),
            first.starts.len(),
            first.unplaced.len()
        );
        g.bench_with_input(BenchmarkId::new("from_empty", n), &n, |b, _| {
            b.iter(|| plan(black_box(&d), black_box(&empty), &o))
        });
        let live = settle(live_after(&first, 2));
        g.bench_with_input(BenchmarkId::new("steady", n), &n, |b, _| {
            b.iter(|| plan(black_box(&d), black_box(&live), &o))
        });
        let mut more = d.clone();
        for s in more.services.values_mut() {
            s.desired_count += s.desired_count / 10;
        }
        g.bench_with_input(BenchmarkId::new("scale_up_10pct", n), &n, |b, _| {
            b.iter(|| plan(black_box(&more), black_box(&live), &o))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

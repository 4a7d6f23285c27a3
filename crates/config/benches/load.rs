//! Load and validate time of generated configurations (N task definitions and
//! N services on one pool), and fmt time of the same text; load time of the
//! hostile inputs of issue 15 (chains of N locals, 24 doubling locals), which
//! end with a result or a located error.
//! Run: `cargo bench -p gpushare-config --bench load`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use gpushare_config::{format_source, load_sources, validate, LoadOptions, Source};

fn config(n: usize) -> Source {
    let mut t = String::from("variable \"replicas\" {\n  default = 2\n}\n\ncapacity_provider \"l4\" {\n  instance_type = \"g6.12xlarge\"\n  max_size      = 1000\n}\n");
    for i in 0..n {
        t.push_str(&format!(
            "\ntask_definition \"td{i}\" {{\n  container \"server\" {{\n    image = \"ghcr.io/example/app:{i}\"\n    gpu {{\n      mps {{\n        memory = 1024\n      }}\n    }}\n  }}\n}}\n\nservice \"s{i}\" {{\n  task_definition   = task_definition.td{i}\n  capacity_provider = capacity_provider.l4\n  desired_count     = var.replicas\n}}\n"
        ));
    }
    Source {
        name: "main.hcl".into(),
        text: t,
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("config");
    g.sample_size(10);
    for n in [100, 1000, 5000] {
        let src = config(n);
        let opts = LoadOptions::default();
        g.bench_with_input(BenchmarkId::new("load", n), &src, |b, src| {
            b.iter(|| load_sources(std::slice::from_ref(src), &opts).map(|d| d.services.len()))
        });
        if let Ok(d) = load_sources(std::slice::from_ref(&src), &opts) {
            g.bench_with_input(BenchmarkId::new("validate", n), &d, |b, d| {
                b.iter(|| validate(d).len())
            });
        }
        g.bench_with_input(BenchmarkId::new("fmt", n), &src, |b, src| {
            b.iter(|| format_source(src).map(|s| s.len()))
        });
    }
    g.finish();
}

/// `l0 = 0`, `l1 = local.l0 + 1`, ... `l{n-1}`.
fn chain(n: usize) -> Source {
    let mut t = String::from("locals {\n  l0 = 0\n");
    for i in 1..n {
        t.push_str(&format!("  l{i} = local.l{} + 1\n", i - 1));
    }
    t.push_str("}\n");
    Source {
        name: "main.hcl".into(),
        text: t,
    }
}

/// 24 locals, each twice the one before (strings, or lists with `concat`).
fn doubling(lists: bool) -> Source {
    let mut t = String::from(if lists {
        "locals {\n  l0 = [1, 2, 3]\n"
    } else {
        "locals {\n  l0 = \"abcdefghij\"\n"
    });
    for i in 1..=24 {
        let p = i - 1;
        t.push_str(&if lists {
            format!("  l{i} = concat(local.l{p}, local.l{p})\n")
        } else {
            format!("  l{i} = \"${{local.l{p}}}${{local.l{p}}}\"\n")
        });
    }
    t.push_str("}\n");
    Source {
        name: "main.hcl".into(),
        text: t,
    }
}

fn hostile(c: &mut Criterion) {
    let mut g = c.benchmark_group("hostile");
    g.sample_size(10);
    let opts = LoadOptions::default();
    let cases = [
        ("chain/2000", chain(2000)),
        ("chain/20000", chain(20_000)),
        ("doubling/strings", doubling(false)),
        ("doubling/lists", doubling(true)),
    ];
    for (name, src) in cases {
        g.bench_function(name, |b| {
            b.iter(|| load_sources(std::slice::from_ref(&src), &opts).is_ok())
        });
    }
    g.finish();
}

criterion_group!(benches, bench, hostile);
criterion_main!(benches);

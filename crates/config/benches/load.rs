//! Load and validate time of generated configurations (N task definitions and
//! N services on one pool), and fmt time of the same text.
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

criterion_group!(benches, bench);
criterion_main!(benches);

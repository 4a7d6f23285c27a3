//! `gpushare-bench openb`: replay the openb traces with the FGD paper's protocol.

mod scale_cmd;
mod scale_run;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use gpushare_bench::policy::Policy;
use gpushare_bench::protocol::{self, Arrival, Bench, RunResult};
use gpushare_bench::trace::{self, Node, Pod};
use serde_json::json;
use std::path::{Path, PathBuf};

const DEFAULT_TRACES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data/traces");

#[derive(Parser)]
#[command(name = "gpushare-bench", about = "Placement benchmarks for gpushare")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Replay openb pod lists onto the openb GPU nodes (FGD paper protocol).
    Openb(OpenbArgs),
    /// Plan and apply time and peak memory of generated fleets (10k to 100k tasks).
    Scale(scale_run::ScaleArgs),
}

#[derive(clap::Args)]
struct OpenbArgs {
    /// Pod list(s); default: every openb_pod_list_*.csv in --traces (default first).
    #[arg(long = "pods")]
    pods: Vec<PathBuf>,
    /// Node list; default: openb_node_list_gpu_node.csv in --traces.
    #[arg(long)]
    nodes: Option<PathBuf>,
    /// Directory of the trace files.
    #[arg(long, default_value = DEFAULT_TRACES)]
    traces: PathBuf,
    /// Seeds: `42..51` (inclusive), `42,43` or `42`.
    #[arg(long, default_value = "42..51")]
    seeds: String,
    /// Policy name or `all` (random, dotprod, packing, bestfit, ecs-binpack, fgd, gpushare).
    #[arg(long, default_value = "all")]
    policy: String,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write the JSON document to this file (tables still go to stdout).
    #[arg(long)]
    json_out: Option<PathBuf>,
    /// Write SVG plots of the unallocated-GPU curves into this directory.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Also run the batch mode (the planner's `place`) on each trace.
    #[arg(long)]
    batch: bool,
    /// Arrival list: `sampled` (pods drawn with replacement to 1.3 x the GPUs,
    /// shuffled) or `simulator` (the FGD simulator's: every trace pod once,
    /// shuffled, then drawn pods appended; headline averaged as its analysis does).
    #[arg(long, default_value = "sampled")]
    arrival: String,
}

fn main() {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Openb(a) => openb(a),
        Cmd::Scale(a) => scale_run::scale(a),
    };
    if let Err(e) = res {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn parse_seeds(s: &str) -> Result<Vec<u64>> {
    let s = s.trim();
    if let Some((a, b)) = s.split_once("..") {
        let a: u64 = a
            .trim()
            .parse()
            .with_context(|| format!("--seeds {s:?}: bad start"))?;
        let b: u64 = b
            .trim_start_matches('=')
            .trim()
            .parse()
            .with_context(|| format!("--seeds {s:?}: bad end"))?;
        if b < a {
            bail!("--seeds {s:?}: end before start");
        }
        return Ok((a..=b).collect());
    }
    s.split(',')
        .map(|x| {
            x.trim()
                .parse()
                .with_context(|| format!("--seeds {s:?}: {x:?} is not a number"))
        })
        .collect()
}

fn parse_policies(s: &str) -> Result<Vec<Policy>> {
    if s == "all" {
        return Ok(Policy::BENCHMARKED.to_vec());
    }
    s.split(',')
        .map(|p| {
            Policy::from_name(p.trim()).with_context(|| {
                format!(
                    "--policy: unknown policy {p:?} (expected one of {} or all)",
                    names()
                )
            })
        })
        .collect()
}

fn names() -> String {
    Policy::BENCHMARKED
        .iter()
        .map(|p| p.name())
        .collect::<Vec<_>>()
        .join(", ")
}

struct TraceResult {
    name: String,
    pods_file: PathBuf,
    pods: usize,
    per_policy: Vec<(Policy, Vec<RunResult>)>,
    batch: Option<serde_json::Value>,
}

fn pod_files(a: &OpenbArgs) -> Result<Vec<PathBuf>> {
    if !a.pods.is_empty() {
        return Ok(a.pods.clone());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&a.traces)
        .with_context(|| format!("cannot list {}", a.traces.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("openb_pod_list_") && n.ends_with(".csv"))
        })
        .collect();
    files.sort_by_key(|p| (trace::variant_name(p) != "default", p.clone()));
    if files.is_empty() {
        bail!("no openb_pod_list_*.csv in {}", a.traces.display());
    }
    Ok(files)
}

fn openb(a: OpenbArgs) -> Result<()> {
    let seeds = parse_seeds(&a.seeds)?;
    let policies = parse_policies(&a.policy)?;
    let arrival = Arrival::from_name(&a.arrival).with_context(|| {
        format!(
            "--arrival: unknown arrival {:?} (expected sampled or simulator)",
            a.arrival
        )
    })?;
    let nodes_path = a
        .nodes
        .clone()
        .unwrap_or_else(|| a.traces.join("openb_node_list_gpu_node.csv"));
    let nodes = trace::load_nodes(&nodes_path)?;
    let mut results = Vec::new();
    for pf in pod_files(&a)? {
        let pods = trace::load_pods(&pf)?;
        let name = trace::variant_name(&pf);
        let bench = Bench::new(&nodes, &pods);
        let mut per_policy = Vec::new();
        for &p in &policies {
            let runs: Vec<RunResult> = seeds.iter().map(|&s| bench.run(p, s, arrival)).collect();
            if !a.json {
                let m = protocol::median(
                    &runs
                        .iter()
                        .filter_map(|r| r.unallocated_at_100)
                        .collect::<Vec<_>>(),
                );
                eprintln!(
                    "{name:>12} {:>12}: median {:.2} %",
                    p.name(),
                    m.unwrap_or(f64::NAN)
                );
            }
            per_policy.push((p, runs));
        }
        let batch = a
            .batch
            .then(|| batch_report(&nodes, &pods, seeds.first().copied().unwrap_or(42)));
        results.push(TraceResult {
            name,
            pods_file: pf,
            pods: pods.len(),
            per_policy,
            batch,
        });
    }
    if let Some(dir) = &a.plot {
        for r in &results {
            plot(dir, r, arrival).with_context(|| format!("plotting {}", r.name))?;
        }
    }
    if let Some(path) = &a.json_out {
        let doc = serde_json::to_string_pretty(&to_json(&results, &nodes_path, &seeds, arrival))?;
        std::fs::write(path, doc + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&to_json(&results, &nodes_path, &seeds, arrival))?
        );
    } else {
        print_tables(&results, &policies);
    }
    Ok(())
}

fn batch_report(nodes: &[Node], pods: &[Pod], seed: u64) -> serde_json::Value {
    let sharing: Vec<Pod> = pods
        .iter()
        .filter(|p| p.num_gpu == 1 && p.gpu_milli > 0 && p.gpu_milli < 1000)
        .cloned()
        .collect();
    let sizes: Vec<u64> = sharing.iter().map(|p| u64::from(p.gpu_milli)).collect();
    let (l1, l2) = protocol::lower_bounds(&sizes);
    // The LP (cutting-stock) bound: at least as strong as L2, often stronger.
    let lp = protocol::lp_bound(&sizes).map(|b| b.gpus);
    let s = protocol::batch(nodes, &sharing, seed);
    let whole: u64 = pods
        .iter()
        .filter(|p| p.gpu_milli >= 1000)
        .map(|p| u64::from(p.num_gpu))
        .sum();
    let t = protocol::batch(nodes, pods, seed);
    json!({
        "sharing": {"pods": sharing.len(), "gpus_used": s.gpus_used, "unplaced": s.unplaced,
                    "lower_bound_sum": l1, "lower_bound_l2": l2,
                    "over_l2_pct": 100.0 * (s.gpus_used as f64 / l2 as f64 - 1.0),
                    "lower_bound_lp": lp,
                    "over_lp_pct": lp.map(|b| 100.0 * (s.gpus_used as f64 / b.max(1) as f64 - 1.0)),
                    "secs": s.secs},
        "total": {"pods": pods.len(), "gpus_used": t.gpus_used, "placed": t.placed, "unplaced": t.unplaced,
                  "lower_bound_sum": whole + l1, "lower_bound_l2": whole + l2,
                  "lower_bound_lp": lp.map(|b| whole + b), "secs": t.secs},
    })
}

fn curve_median(runs: &[RunResult]) -> Vec<(u32, f64)> {
    (protocol::CURVE_FROM..=protocol::CURVE_TO)
        .filter_map(|pct| {
            let v: Vec<f64> = runs
                .iter()
                .filter_map(|r| r.curve.iter().find(|(p, _)| *p == pct).map(|(_, v)| *v))
                .collect();
            protocol::median(&v).map(|m| (pct, m))
        })
        .collect()
}

fn to_json(
    results: &[TraceResult],
    nodes: &Path,
    seeds: &[u64],
    arrival: Arrival,
) -> serde_json::Value {
    let traces: Vec<_> = results
        .iter()
        .map(|r| {
            let mut pol = serde_json::Map::new();
            for (p, runs) in &r.per_policy {
                let vals: Vec<f64> = runs.iter().filter_map(|x| x.unallocated_at_100).collect();
                let pods: usize = runs.iter().map(|x| x.pods).sum();
                let secs: f64 = runs.iter().map(|x| x.secs).sum();
                let cpu: f64 = runs.iter().map(|x| x.cpu_secs).sum();
                pol.insert(
                    p.name().to_string(),
                    json!({
                        "median_unallocated_pct_at_100": protocol::median(&vals),
                        "per_seed": runs.iter().map(|x| json!({"seed": x.seed, "unallocated_pct_at_100": x.unallocated_at_100,
                                     "pods": x.pods, "placed": x.placed, "secs": x.secs, "cpu_secs": x.cpu_secs})).collect::<Vec<_>>(),
                        "placements_per_sec": pods as f64 / cpu.max(1e-9),
                        "total_time_s": secs,
                        "total_cpu_s": cpu,
                        "curve_median": curve_median(runs),
                    }),
                );
            }
            json!({"trace": r.name, "pods_file": r.pods_file, "trace_pods": r.pods, "policies": pol, "batch": r.batch})
        })
        .collect();
    json!({"nodes_file": nodes, "seeds": seeds, "arrival": arrival.name(), "traces": traces})
}

/// The FGD paper simulator's published medians (unallocated GPU % at 100 %
/// arrived; ../shared/data/traces/README.md).
const PUBLISHED_FGD: [(&str, f64); 8] = [
    ("default", 4.77),
    ("cpu050", 5.00),
    ("cpu100", 4.79),
    ("cpu200", 5.18),
    ("gpushare40", 6.05),
    ("gpushare100", 13.36),
    ("gpuspec20", 5.31),
    ("multigpu30", 3.61),
];

fn print_tables(results: &[TraceResult], policies: &[Policy]) {
    println!("Median unallocated GPU % at 100 % arrived (min-max over seeds)\n");
    let mut head = format!("| {:<12} |", "trace");
    for p in policies {
        head.push_str(&format!(" {:<18} |", p.name()));
    }
    let gp = policies.contains(&Policy::Gpushare);
    let rivals: Vec<Policy> = [Policy::Fgd, Policy::FgdExact]
        .into_iter()
        .filter(|p| policies.contains(p))
        .collect();
    let beats_col = gp && !rivals.is_empty();
    if beats_col {
        head.push_str(" gpushare beats FGD |");
    }
    head.push_str(" published FGD |");
    println!("{head}");
    println!(
        "|{}",
        "---|".repeat(policies.len() + 2 + usize::from(beats_col))
    );
    let mut wins = 0;
    for r in results {
        let mut line = format!("| {:<12} |", r.name);
        let med = |p: Policy| {
            r.per_policy
                .iter()
                .find(|(q, _)| *q == p)
                .and_then(|(_, runs)| {
                    protocol::median(
                        &runs
                            .iter()
                            .filter_map(|x| x.unallocated_at_100)
                            .collect::<Vec<_>>(),
                    )
                })
        };
        for (_, runs) in &r.per_policy {
            let v: Vec<f64> = runs.iter().filter_map(|x| x.unallocated_at_100).collect();
            let (lo, hi) = v
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
                    (a.min(x), b.max(x))
                });
            line.push_str(&format!(
                " {:>5.2} ({:.2}-{:.2}) |",
                protocol::median(&v).unwrap_or(f64::NAN),
                lo,
                hi
            ));
        }
        if beats_col {
            // The smallest margin over the FGD variants run.
            let margin = rivals
                .iter()
                .filter_map(|&p| Some(med(p)? - med(Policy::Gpushare)?))
                .fold(f64::INFINITY, f64::min);
            let yes = margin > 0.0;
            wins += usize::from(yes);
            line.push_str(&format!(
                " {} ({:+.2}) |",
                if yes { "yes" } else { "no" },
                margin
            ));
        }
        let published = PUBLISHED_FGD
            .iter()
            .find(|(t, _)| *t == r.name)
            .map(|(_, v)| format!("{v:.2}"))
            .unwrap_or_default();
        line.push_str(&format!(" {published} |"));
        println!("{line}");
    }
    if beats_col {
        println!(
            "\ngpushare beats {} on {wins} of {} traces.",
            rivals
                .iter()
                .map(|p| p.name())
                .collect::<Vec<_>>()
                .join(" and "),
            results.len()
        );
    }
    println!("\nSpeed on one core (thread CPU time; a run = one seed's whole arrival list)\n");
    for r in results.iter().take(1) {
        for (p, runs) in &r.per_policy {
            let pods: usize = runs.iter().map(|x| x.pods).sum();
            let cpu: f64 = runs.iter().map(|x| x.cpu_secs).sum();
            let wall: f64 = runs.iter().map(|x| x.secs).sum();
            let n = runs.len().max(1) as f64;
            println!(
                "{:>12} {:>12}: {:>9.0} placements/s (CPU time), {:.3} CPU s per run of {} pods (wall {:.3} s)",
                r.name,
                p.name(),
                pods as f64 / cpu.max(1e-9),
                cpu / n,
                pods / runs.len().max(1),
                wall / n
            );
        }
    }
    for r in results {
        if let Some(b) = &r.batch {
            println!(
                "\nBatch mode ({}): {}",
                r.name,
                serde_json::to_string(b).unwrap_or_default()
            );
        }
    }
}

fn plot(dir: &Path, r: &TraceResult, arrival: Arrival) -> Result<()> {
    use plotters::prelude::{
        ChartBuilder, Color, IntoDrawingArea, LineSeries, PathElement, RGBColor, SVGBackend,
        SeriesLabelPosition, BLACK, BLUE, CYAN, GREEN, MAGENTA, RED, WHITE,
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = match arrival {
        Arrival::Sampled => dir.join(format!("openb-{}.svg", r.name)),
        _ => dir.join(format!("openb-{}-{}.svg", r.name, arrival.name())),
    };
    let curves: Vec<(Policy, Vec<(u32, f64)>)> = r
        .per_policy
        .iter()
        .map(|(p, runs)| (*p, curve_median(runs)))
        .collect();
    let ymax = curves
        .iter()
        .flat_map(|(_, c)| c.iter().map(|(_, v)| *v))
        .fold(1.0f64, f64::max);
    let root = SVGBackend::new(&path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("openb {}: unallocated GPU % vs arrived workload %", r.name),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(
            f64::from(protocol::CURVE_FROM)..f64::from(protocol::CURVE_TO),
            0.0..ymax * 1.05,
        )
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    chart
        .configure_mesh()
        .x_desc("arrived workload (% of cluster GPUs)")
        .y_desc("unallocated GPU %")
        .draw()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let colors = [
        RED,
        BLUE,
        GREEN,
        MAGENTA,
        CYAN,
        BLACK,
        RGBColor(255, 140, 0),
        RGBColor(128, 0, 128),
    ];
    for (i, (p, c)) in curves.iter().enumerate() {
        let color = colors[i % colors.len()];
        chart
            .draw_series(LineSeries::new(
                c.iter().map(|(x, y)| (f64::from(*x), *y)),
                color.stroke_width(2),
            ))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?
            .label(p.name())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow::anyhow!("{e:?}"))?;
    Ok(())
}

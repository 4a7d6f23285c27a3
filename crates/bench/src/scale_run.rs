//! `gpushare-bench scale`: the parent (one child process per case, the table) and
//! the store cases (`file`, `etcd`). The fleet and the planner cases are in
//! `gpushare_bench::scale`.

use crate::scale_cmd;
use anyhow::{bail, Context, Result};
use gpushare_bench::scale::{self, CaseResult};
use gpushare_core::plan::{self, Options};
use gpushare_engine::apply::{self, ApplyContext};
use gpushare_engine::cloud::{Cloud, LocalCloud};
use gpushare_engine::observe::observe;
use gpushare_engine::store::{FileStore, Store};
use gpushare_store_etcd::{EtcdOptions, EtcdStore};
use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct ScaleArgs {
    /// Task counts of the planner cases (plan from empty, re-plan unchanged).
    #[arg(long, value_delimiter = ',', default_value = "10000,40000,100000")]
    tasks: Vec<u32>,
    /// Task counts of the apply cases (file store and etcd).
    #[arg(long, value_delimiter = ',', default_value = "10000,40000")]
    apply_tasks: Vec<u32>,
    /// Stores of the apply cases: `file`, `etcd` or both (`file,etcd`); `none` skips them.
    #[arg(long, value_delimiter = ',', default_value = "file,etcd")]
    stores: Vec<String>,
    /// Runs of each case (the median is printed). The apply cases run in rounds, each
    /// round every task count once, so that a change in the machine's load falls on
    /// the small and the large fleet alike; each round's growth is printed too.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Which cases: `engine` (the planner and the apply in this binary), `commands`
    /// (the `gpushare` binary as processes) or `all`.
    #[arg(long, default_value = "all")]
    part: String,
    /// Task counts of the command cases (every command).
    #[arg(long, value_delimiter = ',', default_value = "10000,40000")]
    command_tasks: Vec<u32>,
    /// Task counts of the command cases that only run `gpushare plan` from empty.
    #[arg(long, value_delimiter = ',', default_value = "100000")]
    command_plan_tasks: Vec<u32>,
    /// The `gpushare` binary of the command cases (default: beside this one).
    #[arg(long)]
    gpushare: Option<std::path::PathBuf>,
    /// Run one case in this process and print its result as JSON (what the parent
    /// starts each child with): plan, replan, file or etcd.
    #[arg(long, hide = true)]
    case: Option<String>,
}

pub fn scale(a: ScaleArgs) -> Result<()> {
    if let Some(case) = &a.case {
        let tasks = *a.tasks.first().context("--case needs one --tasks")?;
        let r = match case.as_str() {
            "plan" | "replan" => scale::planner_case(case, tasks)?,
            "file" | "etcd" => tokio::runtime::Runtime::new()?.block_on(store_case(case, tasks))?,
            other => bail!("--case: unknown case {other:?} (plan, replan, file or etcd)"),
        };
        println!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    for s in &a.stores {
        if !matches!(s.as_str(), "file" | "etcd" | "none") {
            bail!("--stores: unknown store {s:?} (file, etcd or none)");
        }
    }
    if !matches!(a.part.as_str(), "all" | "engine" | "commands") {
        bail!(
            "--part: unknown part {:?} (all, engine or commands)",
            a.part
        );
    }
    if a.part != "engine" {
        commands(&a)?;
    }
    if a.part != "commands" {
        engine(&a)?;
    }
    Ok(())
}

/// The command cases: every store, in rounds (each round every fleet once), medians.
fn commands(a: &ScaleArgs) -> Result<()> {
    let bin = scale_cmd::gpushare_binary(a.gpushare.as_deref())?;
    let dir = tempfile::tempdir()?;
    let rt = tokio::runtime::Runtime::new()?;
    let etcd = if a.stores.iter().any(|s| s == "etcd") {
        Some(rt.block_on(Etcd::start(&dir.path().join("etcd")))?)
    } else {
        None
    };
    let mut fleets: Vec<(u32, bool)> = a.command_tasks.iter().map(|&n| (n, false)).collect();
    fleets.extend(a.command_plan_tasks.iter().map(|&n| (n, true)));
    let mut rounds: BTreeMap<(String, u32), Vec<BTreeMap<&str, scale_cmd::Measure>>> =
        BTreeMap::new();
    for round in 0..a.runs.max(1) {
        for &(n, plan_only) in &fleets {
            for store in a.stores.iter().filter(|s| *s != "none") {
                let url = etcd
                    .as_ref()
                    .filter(|_| store == "etcd")
                    .map(|e| format!("etcd://127.0.0.1:{}/cmd-{n}-{round}", e.port));
                let m = scale_cmd::fleet_commands(&bin, n, url.as_deref(), plan_only)
                    .with_context(|| format!("the commands on {n} tasks, {store} store"))?;
                for (cmd, x) in &m {
                    eprintln!(
                        "{store} {n} {cmd}: {:.2} s, {:.0} MiB, {} bytes out",
                        x.secs, x.peak_mib, x.out_bytes
                    );
                }
                rounds.entry((store.clone(), n)).or_default().push(m);
            }
        }
    }
    scale_cmd::print_table(&rounds);
    Ok(())
}

/// The engine cases (the planner and the apply inside this binary).
fn engine(a: &ScaleArgs) -> Result<()> {
    let mut results: BTreeMap<(String, u32), CaseResult> = BTreeMap::new();
    for &n in &a.tasks {
        for case in ["plan", "replan"] {
            let runs = (0..a.runs.max(1))
                .map(|_| child(case, n))
                .collect::<Result<Vec<_>>>()?;
            results.insert((case.into(), n), median(runs));
        }
    }
    let mut rounds: BTreeMap<(String, u32), Vec<CaseResult>> = BTreeMap::new();
    for _ in 0..a.runs.max(1) {
        for &n in &a.apply_tasks {
            for store in a.stores.iter().filter(|s| *s != "none") {
                rounds
                    .entry((store.clone(), n))
                    .or_default()
                    .push(child(store, n)?);
            }
        }
    }
    let growth = round_growth(&rounds);
    for (key, runs) in rounds {
        results.insert(key, median(runs));
    }
    print_table(&results, a);
    for (store, ratios) in growth {
        println!(
            "apply {store}, growth {}/{} in each round: {}",
            GROWTH.1,
            GROWTH.0,
            ratios.join(", ")
        );
    }
    Ok(())
}

/// The task counts whose apply times make the growth printed (4x the tasks).
const GROWTH: (u32, u32) = (10_000, 40_000);

/// Each round's apply growth 40k/10k per store (the rounds in order).
fn round_growth(
    rounds: &BTreeMap<(String, u32), Vec<CaseResult>>,
) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let (lo, hi) = GROWTH;
    for ((store, _), small) in rounds.iter().filter(|((_, n), _)| *n == lo) {
        let Some(large) = rounds.get(&(store.clone(), hi)) else {
            continue;
        };
        let ratios = small
            .iter()
            .zip(large)
            .map(|(s, l)| ratio(l.apply_s, s.apply_s))
            .collect();
        out.insert(store.clone(), ratios);
    }
    out
}

/// One case in a child process of this binary.
fn child(case: &str, tasks: u32) -> Result<CaseResult> {
    let exe = std::env::current_exe().context("finding this binary to start a case")?;
    let out = Command::new(exe)
        .args(["scale", "--case", case, "--tasks", &tasks.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("starting case {case} of {tasks} tasks"))?;
    if !out.status.success() {
        bail!("case {case} of {tasks} tasks failed ({})", out.status);
    }
    let r: CaseResult = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("reading the result of case {case} of {tasks} tasks"))?;
    eprintln!("{}", serde_json::to_string(&r)?);
    Ok(r)
}

/// The run with the median measured time: `apply_s` for the store cases, `replan_s`
/// for `replan`, else `plan_s`.
fn median(mut runs: Vec<CaseResult>) -> CaseResult {
    let key = |r: &CaseResult| r.apply_s.or(r.replan_s).unwrap_or(r.plan_s);
    runs.sort_by(|a, b| key(a).total_cmp(&key(b)));
    runs.swap_remove(runs.len() / 2)
}

/// Observe, plan and apply the fleet from an empty store, then observe and plan it again.
async fn store_case(case: &str, tasks: u32) -> Result<CaseResult> {
    let dir = tempfile::tempdir()?;
    let etcd = match case {
        "etcd" => Some(Etcd::start(&dir.path().join("etcd")).await?),
        _ => None,
    };
    let open = || async {
        let store: Box<dyn Store> = match &etcd {
            Some(etcd) => Box::new(EtcdStore::open(&etcd.url(), EtcdOptions::default()).await?),
            None => Box::new(FileStore::open(dir.path().join("store"))?),
        };
        anyhow::Ok(store)
    };
    let store = open().await?;
    let cloud = LocalCloud::open(dir.path().join("cloud"))?;
    let d = scale::fleet(tasks)?;
    let o = Options::default();
    let t = Instant::now();
    let mut live = observe(store.as_ref(), &cloud, "scale", 1).await?;
    // The launch facts, as every pass gathers them: the plan fixes each launch's zone.
    live.facts = cloud.gather(&d.capacity_providers).await?;
    let p = plan::plan(&d, &live, &o)?;
    let plan_s = t.elapsed().as_secs_f64();
    drop(live);
    let ctx = ApplyContext::new(store.as_ref(), &cloud);
    let t = Instant::now();
    apply::apply(&p, &ctx).await?;
    let apply_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut live = observe(store.as_ref(), &cloud, "scale", 2).await?;
    live.facts = cloud.gather(&d.capacity_providers).await?;
    let observe_s = t.elapsed().as_secs_f64();
    let again = plan::plan(&d, &live, &o)?;
    let replan_s = t.elapsed().as_secs_f64();
    // The peak of the pass, not of the second copy of the state loaded below.
    let peak_mib = scale::peak_rss_mib();
    let t = Instant::now();
    let cold = open().await?.load_shared().await?;
    let cold_load_s = t.elapsed().as_secs_f64();
    if cold.tasks.len() != tasks as usize {
        bail!("a new handle loaded {} tasks of {tasks}", cold.tasks.len());
    }
    Ok(CaseResult {
        case: case.into(),
        tasks,
        hosts: p.launches.len(),
        steps: p.steps().len(),
        plan_s,
        apply_s: Some(apply_s),
        replan_s: Some(replan_s),
        observe_s: Some(observe_s),
        replan_steps: Some(again.steps().len()),
        cold_load_s: Some(cold_load_s),
        peak_mib,
    })
}

/// A one-member etcd on loopback ports (the tests' command line), killed when dropped.
struct Etcd {
    child: Child,
    port: u16,
}

impl Etcd {
    async fn start(dir: &std::path::Path) -> Result<Etcd> {
        let bin = gpushare_testkit::etcd::etcd_binary();
        std::fs::create_dir_all(dir)?;
        let (port, peer) = (
            gpushare_testkit::etcd::free_port(),
            gpushare_testkit::etcd::free_port(),
        );
        let command = gpushare_testkit::etcd::member_command(
            &bin,
            "scale",
            &dir.join("data"),
            &format!("http://127.0.0.1:{port}"),
            &format!("http://127.0.0.1:{peer}"),
        );
        let child = Command::new(&command[0])
            .args(&command[1..])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("etcd.log"))?)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let etcd = Etcd { child, port };
        let started = Instant::now();
        while EtcdStore::open(&etcd.url(), EtcdOptions::default())
            .await
            .is_err()
        {
            if started.elapsed() > Duration::from_secs(30) {
                bail!("etcd ({}) did not answer in 30 s", bin.display());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(etcd)
    }

    fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}/scale", self.port)
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn secs(x: Option<f64>) -> String {
    x.map_or("-".into(), |s| format!("{s:.2} s"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.1}x", a / b),
        _ => "-".into(),
    }
}

fn print_table(results: &BTreeMap<(String, u32), CaseResult>, a: &ScaleArgs) {
    let get = |case: &str, n: u32| results.get(&(case.to_string(), n));
    println!("| tasks | hosts | plan from empty | peak | re-plan, unchanged | peak | apply from empty (file) | re-plan over the file store (observe) | peak | apply on etcd | re-plan over etcd (observe) | peak |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut counts: Vec<u32> = a.tasks.iter().chain(&a.apply_tasks).copied().collect();
    counts.sort();
    counts.dedup();
    let mib = |r: Option<&CaseResult>| r.map_or("-".into(), |r| format!("{:.0} MiB", r.peak_mib));
    for &n in &counts {
        let (p, rp, f, e) = (
            get("plan", n),
            get("replan", n),
            get("file", n),
            get("etcd", n),
        );
        let hosts = p.or(f).or(e).map_or(0, |r| r.hosts);
        let store = |r: Option<&CaseResult>| {
            (
                secs(r.and_then(|r| r.apply_s)),
                format!(
                    "{} ({})",
                    secs(r.and_then(|r| r.replan_s)),
                    secs(r.and_then(|r| r.observe_s))
                ),
                mib(r),
            )
        };
        let (fa, fr, fm) = store(f);
        let (ea, er, em) = store(e);
        println!(
            "| {n} | {hosts} | {} | {} | {} | {} | {fa} | {fr} | {fm} | {ea} | {er} | {em} |",
            secs(p.map(|r| r.plan_s)),
            mib(p),
            secs(rp.and_then(|r| r.replan_s)),
            mib(rp),
        );
    }
    for r in results.values() {
        if r.replan_steps.is_some_and(|s| s > 0) {
            println!(
                "note: the re-plan of case {} at {} tasks has {} steps (not an unchanged fleet)",
                r.case,
                r.tasks,
                r.replan_steps.unwrap_or(0)
            );
        }
    }
    for store in ["file", "etcd"] {
        let loads: Vec<String> = counts
            .iter()
            .filter_map(|&n| Some(format!("{n} tasks {}", secs(get(store, n)?.cold_load_s))))
            .collect();
        if !loads.is_empty() {
            println!(
                "load of the applied {store} store by a new handle: {}",
                loads.join(", ")
            );
        }
    }
    let (lo, hi) = GROWTH;
    let pick = |case: &str, f: fn(&CaseResult) -> Option<f64>| {
        ratio(get(case, hi).and_then(f), get(case, lo).and_then(f))
    };
    println!(
        "\ngrowth {hi}/{lo} (4x the tasks): plan {}, re-plan {}, apply file {}, apply etcd {}, \
         re-plan over the file store {}, over etcd {}; peak plan {}",
        pick("plan", |r| Some(r.plan_s)),
        pick("replan", |r| r.replan_s),
        pick("file", |r| r.apply_s),
        pick("etcd", |r| r.apply_s),
        pick("file", |r| r.replan_s),
        pick("etcd", |r| r.replan_s),
        pick("plan", |r| Some(r.peak_mib)),
    );
}

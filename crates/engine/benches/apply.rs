//! Plan and apply as plans grow, on the file store and on etcd side by side (a
//! benchmark, not a test: it prints figures and asserts nothing about speed).
//!
//!     cargo bench -p gpushare-engine --bench apply -- 1000 10000
//!
//! For each task count: one service of MPS tasks (4096 MiB, 20 % compute each) on a
//! pool of g6.48xlarge hosts (8 L4 GPUs, 40 such tasks per host) on the local fleet,
//! planned from nothing by the real planner and applied; then the service grows by 1 %
//! and that change is planned and applied (a small step on a large state). The same
//! runs go to a file store in a temporary directory and to a real etcd (Debian's
//! `etcd-server`, started here on loopback ports with its own data directory, as the
//! tests do; `GPUSHARE_ETCD_BIN` names another binary).
//!
//! What each store was sent is measured from the store's side: for etcd, the member's
//! own counters (`/metrics`: keys put and deleted, transactions, bytes received from
//! clients, reads included); for the file store, the size of every distinct
//! `state.json`, `state.log` and journal file seen after each step (a commit appends
//! to the log: each length seen counts whole, so the file store's bytes are overstated).
//! After the +1 % pass, an idle pass (observe and plan, nothing changed) is timed.
//! Each store runs `--runs N` times (default 3), the two alternating which goes first;
//! the medians are printed. `--max-batch N` changes how many steps apply commits at once.

use gpushare_core::model::Desired;
use gpushare_core::plan::{self, Options};
use gpushare_engine::apply::{self, ApplyContext, ProgressEvent};
use gpushare_engine::cloud::LocalCloud;
use gpushare_engine::observe::observe;
use gpushare_engine::store::{FileStore, Store};
use gpushare_store_etcd::{EtcdOptions, EtcdStore};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

type Error = Box<dyn std::error::Error>;

fn desired(tasks: u32) -> Result<Desired, serde_json::Error> {
    serde_json::from_value(serde_json::json!({
        "settings": { "cluster": "bench" },
        "capacity_providers": { "big": { "instance_type": "g6.48xlarge", "max_size": 100000 } },
        "gpu_instances": {},
        "task_definitions": { "e": { "container": [{
            "name": "s", "image": "i", "cpu": 1024, "memory": 1024,
            "gpu": { "mps": { "memory": 4096, "max_compute_percent": 20 } }
        }] } },
        "services": { "e": { "task_definition": "e", "capacity_provider": "big", "desired_count": tasks } },
    }))
}

/// What a store was sent during one apply.
#[derive(Default, Clone, Copy)]
struct Sent {
    /// Keys put and deleted (etcd) or files written (file store).
    keys: f64,
    /// Transactions (etcd) or commits (file store).
    writes: f64,
    bytes: f64,
}

impl std::ops::Sub for Sent {
    type Output = Sent;
    fn sub(self, o: Sent) -> Sent {
        Sent {
            keys: self.keys - o.keys,
            writes: self.writes - o.writes,
            bytes: self.bytes - o.bytes,
        }
    }
}

/// A one-member etcd on loopback ports, killed when dropped.
struct Etcd {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Etcd {
    async fn start() -> Result<Etcd, Error> {
        let bin = gpushare_testkit::etcd::etcd_binary();
        let dir = tempfile::tempdir()?;
        let (port, peer) = (
            gpushare_testkit::etcd::free_port(),
            gpushare_testkit::etcd::free_port(),
        );
        let command = gpushare_testkit::etcd::member_command(
            &bin,
            "bench",
            &dir.path().join("data"),
            &format!("http://127.0.0.1:{port}"),
            &format!("http://127.0.0.1:{peer}"),
        );
        let child = Command::new(&command[0])
            .args(&command[1..])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("etcd.log"))?)
            .spawn()?;
        let etcd = Etcd {
            child,
            port,
            _dir: dir,
        };
        let started = Instant::now();
        while EtcdStore::open(&etcd.url("ready"), EtcdOptions::default())
            .await
            .is_err()
        {
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!("etcd ({}) did not answer in 30 s", bin.display()).into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(etcd)
    }

    fn url(&self, prefix: &str) -> String {
        format!("etcd://127.0.0.1:{}/{prefix}", self.port)
    }

    /// The member's counters of what clients sent it.
    fn sent(&self) -> Result<Sent, Error> {
        let mut body = Vec::new();
        let mut easy = curl::easy::Easy::new();
        easy.url(&format!("http://127.0.0.1:{}/metrics", self.port))?;
        {
            let mut t = easy.transfer();
            t.write_function(|d| {
                body.extend_from_slice(d);
                Ok(d.len())
            })?;
            t.perform()?;
        }
        let text = String::from_utf8(body)?;
        let metric = |name: &str| -> f64 {
            text.lines()
                .filter(|l| l.split(['{', ' ']).next() == Some(name))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        Ok(Sent {
            keys: metric("etcd_mvcc_put_total") + metric("etcd_mvcc_delete_total"),
            writes: metric("etcd_mvcc_txn_total"),
            bytes: metric("etcd_network_client_grpc_received_bytes_total"),
        })
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The file store's writes, from the distinct files seen after each step.
struct FileWrites {
    files: Vec<PathBuf>,
    seen: Mutex<BTreeMap<(u64, u64), u64>>,
}

impl FileWrites {
    fn look(&self) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        for f in &self.files {
            if let Ok(m) = std::fs::metadata(f) {
                seen.insert((m.ino(), m.mtime_nsec() as u64), m.len());
            }
        }
    }

    fn sent(&self) -> Sent {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        Sent {
            keys: seen.len() as f64,
            writes: seen.len() as f64,
            bytes: seen.values().sum::<u64>() as f64,
        }
    }
}

struct Figures {
    plan: Duration,
    apply: Duration,
    steps: usize,
    hosts: usize,
    sent: Sent,
    /// Observe and plan again with nothing changed (after the +1 % pass).
    idle: Option<Duration>,
}

/// Observe, plan and apply `tasks` on `store`; `before`/`after_apply` read the
/// store's counters.
async fn pass(
    store: &dyn Store,
    cloud: &LocalCloud,
    tasks: u32,
    max_batch: usize,
    counters: &(dyn Fn() -> Result<Sent, Error> + Sync),
    look: &(dyn Fn() + Send + Sync),
) -> Result<Figures, Error> {
    let d = desired(tasks)?;
    let t = Instant::now();
    let live = observe(store, cloud, "bench", 1).await?;
    let p = plan::plan(&d, &live, &Options::default())?;
    let plan_time = t.elapsed();
    let progress = |e: &ProgressEvent| {
        if matches!(
            e,
            ProgressEvent::StepDone { .. } | ProgressEvent::Finished { .. }
        ) {
            look();
        }
    };
    let mut ctx = ApplyContext::new(store, cloud);
    ctx.max_batch = max_batch;
    ctx.progress = Some(&progress);
    let before = counters()?;
    let t = Instant::now();
    apply::apply(&p, &ctx).await?;
    let apply_time = t.elapsed();
    Ok(Figures {
        plan: plan_time,
        apply: apply_time,
        steps: p.steps().len(),
        hosts: p.launches.len(),
        sent: counters()? - before,
        idle: None,
    })
}

/// A full apply of `tasks` from nothing, then a 1 % growth, on one store.
async fn runs(
    store: &dyn Store,
    dir: &Path,
    tasks: u32,
    max_batch: usize,
    counters: &(dyn Fn() -> Result<Sent, Error> + Sync),
    look: &(dyn Fn() + Send + Sync),
) -> Result<[Figures; 2], Error> {
    let cloud = LocalCloud::open(dir)?;
    let first = pass(store, &cloud, tasks, max_batch, counters, look).await?;
    let grown = tasks + (tasks / 100).max(1);
    let mut second = pass(store, &cloud, grown, max_batch, counters, look).await?;
    // A controller's idle pass: observe and plan again, nothing changed since.
    let d = desired(grown)?;
    let t = Instant::now();
    let live = observe(store, &cloud, "bench", 1).await?;
    let p = plan::plan(&d, &live, &Options::default())?;
    second.idle = Some(t.elapsed());
    if !p.steps().is_empty() {
        return Err(format!("the idle pass planned {} steps", p.steps().len()).into());
    }
    Ok([first, second])
}

fn row(store: &str, what: &str, f: &Figures, base: Option<&Figures>) {
    let per = |x: f64| x / f.steps.max(1) as f64;
    let ratio = |a: Duration, b: Option<Duration>| match b {
        Some(b) if !b.is_zero() => format!("{:>5.2}x", a.as_secs_f64() / b.as_secs_f64()),
        _ => "     -".to_string(),
    };
    println!(
        "{store:<5} {what:<9} steps {:>6}  hosts {:>4}  plan {:>8.1?} ({})  apply {:>8.1?} ({})  \
         writes {:>6.0}  keys/step {:>6.2}  KiB/step {:>8.1}  MiB {:>7.1}",
        f.steps,
        f.hosts,
        f.plan,
        ratio(f.plan, base.map(|b| b.plan)),
        f.apply,
        ratio(f.apply, base.map(|b| b.apply)),
        f.sent.writes,
        per(f.sent.keys),
        per(f.sent.bytes) / 1024.0,
        f.sent.bytes / (1024.0 * 1024.0),
    );
    if let Some(idle) = f.idle {
        println!(
            "{store:<5} idle pass (observe + plan, nothing changed) {idle:>8.1?} ({})",
            ratio(idle, base.and_then(|b| b.idle))
        );
    }
}

/// The run with the median apply time (plan times are read from the same runs'
/// median separately).
fn median(mut runs: Vec<Figures>) -> Figures {
    let mut plans: Vec<Duration> = runs.iter().map(|f| f.plan).collect();
    plans.sort();
    let mut idles: Vec<Option<Duration>> = runs.iter().map(|f| f.idle).collect();
    idles.sort();
    runs.sort_by_key(|f| f.apply);
    let mut m = runs.swap_remove(runs.len() / 2);
    m.plan = plans[plans.len() / 2];
    m.idle = idles[idles.len() / 2];
    m
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    // `cargo bench` passes `--bench`; `--max-batch N`, `--runs N`; every other
    // argument is a task count.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut max_batch = apply::DEFAULT_MAX_BATCH;
    let mut repeat = 3usize;
    let mut counts: Vec<u32> = vec![];
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--max-batch" => max_batch = it.next().ok_or("--max-batch needs a number")?.parse()?,
            "--runs" => repeat = it.next().ok_or("--runs needs a number")?.parse()?,
            _ => {
                if let Ok(n) = a.parse() {
                    counts.push(n);
                }
            }
        }
    }
    if counts.is_empty() {
        counts = vec![1000, 10000];
    }
    let etcd = Etcd::start().await?;
    println!(
        "max_batch {max_batch}; median of {repeat} runs per store, the stores alternating; \
         ratios are etcd against the file store"
    );
    for n in counts {
        let (mut file_runs, mut etcd_runs) = (vec![], vec![]);
        for run in 0..repeat.max(1) {
            // Alternate which store goes first, so neither always runs on a cold cache.
            for on_etcd in [run % 2 == 1, run % 2 == 0] {
                let dir = tempfile::tempdir()?;
                if on_etcd {
                    let url = etcd.url(&format!("bench-{n}-{run}"));
                    let store = EtcdStore::open(&url, EtcdOptions::default()).await?;
                    let counters = || etcd.sent();
                    etcd_runs
                        .push(runs(&store, dir.path(), n, max_batch, &counters, &|| {}).await?);
                } else {
                    let file = FileStore::open(dir.path())?;
                    let writes = FileWrites {
                        files: [
                            "state.json",
                            "state.log",
                            "journal.json",
                            "journal-done.json",
                        ]
                        .map(|f| dir.path().join(f))
                        .to_vec(),
                        seen: Mutex::new(BTreeMap::new()),
                    };
                    let (counters, look) = (|| Ok(writes.sent()), || writes.look());
                    file_runs.push(runs(&file, dir.path(), n, max_batch, &counters, &look).await?);
                }
            }
        }
        let split = |r: Vec<[Figures; 2]>| -> (Figures, Figures) {
            let (a, b): (Vec<Figures>, Vec<Figures>) = r.into_iter().map(|[x, y]| (x, y)).unzip();
            (median(a), median(b))
        };
        let (f0, f1) = split(file_runs);
        let (e0, e1) = split(etcd_runs);
        println!("{n} tasks:");
        row("file", "from zero", &f0, None);
        row("etcd", "from zero", &e0, Some(&f0));
        row("file", "+1 %", &f1, None);
        row("etcd", "+1 %", &e1, Some(&f1));
    }
    Ok(())
}

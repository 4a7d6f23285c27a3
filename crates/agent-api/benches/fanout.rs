//! The agent API's fan-out (a benchmark, not a test: it prints figures and asserts
//! nothing about speed).
//!
//!     cargo bench -p gpushare-agent-api --bench fanout -- --agents 2000 --tasks 40000
//!
//! One controller (the real server, `gpushare_agent_api::start`, in a child process of
//! its own so that its memory is its own) serves a state of `--tasks` tasks on
//! `--agents` hosts kept in a real etcd (Debian's `etcd-server`, started here on
//! loopback ports, as the tests do; `GPUSHARE_ETCD_BIN` names another binary). Every
//! host is a simulated agent in this process: it joins with a pool token (a real
//! join: its key, a signing request, a certificate from the cluster CA) and follows
//! its assignment over gRPC with mutual TLS on loopback, counting the bytes the
//! server sent it on the wire. Then `--rounds` times one service changes: `--moved`
//! of its tasks move to other hosts, in one commit. Printed: the time from the start
//! of each commit until every affected agent had its new assignment (p50, p99 over
//! all rounds), the bytes the server sent in all and to unaffected agents, what etcd
//! sent the controller, and the controller's resident memory.
//!
//! Then the same change with agents reading the store directly, as `gpushare agent
//! --store` does (`Store::load_shared` on the etcd store: a whole read after a
//! commit): `--direct-sample` agents (default 100) read it, etcd's own counter of
//! bytes sent to clients (`etcd_network_client_grpc_sent_bytes_total`) is read
//! around them, and the figure for all agents is that per agent times `--agents`.

use gpushare_testkit_engine::agent as support;

use gpushare_agent_api::client::{self, HostIdentity};
use gpushare_agent_api::pb;
use gpushare_agent_api::pb::agent_api_client::AgentApiClient;
use gpushare_agent_api::tokens::{self, TokenScope};
use gpushare_agent_api::ServerOptions;
use gpushare_core::model::{StoreState, Task};
use gpushare_engine::store::Store;
use gpushare_store_etcd::{EtcdOptions, EtcdStore};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

type Error = Box<dyn std::error::Error + Send + Sync>;

const CLUSTER: &str = "bench";

#[derive(Debug, Clone)]
struct Opts {
    agents: usize,
    tasks: usize,
    moved: usize,
    rounds: usize,
    direct_sample: usize,
    /// Internal: run as the controller on this etcd URL.
    controller: Option<String>,
}

fn opts() -> Result<Opts, Error> {
    let mut o = Opts {
        agents: 2000,
        tasks: 40000,
        moved: 10,
        rounds: 10,
        direct_sample: 100,
        controller: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |what: &str| -> Result<usize, Error> {
            let v = args.next().ok_or_else(|| format!("{what} needs a value"))?;
            v.parse()
                .map_err(|_| format!("{what} {v:?} is not a number").into())
        };
        match a.as_str() {
            "--agents" => o.agents = num("--agents")?,
            "--tasks" => o.tasks = num("--tasks")?,
            "--moved" => o.moved = num("--moved")?,
            "--rounds" => o.rounds = num("--rounds")?,
            "--direct-sample" => o.direct_sample = num("--direct-sample")?,
            "--controller" => {
                o.controller = Some(args.next().ok_or("--controller needs a URL")?);
            }
            // cargo bench passes --bench; filters are not used.
            _ => {}
        }
    }
    if o.agents < 2 || o.tasks < o.agents || o.moved == 0 {
        return Err("need --agents >= 2, --tasks >= --agents, --moved >= 1".into());
    }
    Ok(o)
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
        let mut command = gpushare_testkit::etcd::member_command(
            &bin,
            "bench",
            &dir.path().join("data"),
            &format!("http://127.0.0.1:{port}"),
            &format!("http://127.0.0.1:{peer}"),
        );
        // Room for the history of the large first commit.
        command.push("--quota-backend-bytes".into());
        command.push((8u64 << 30).to_string().into());
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
        while EtcdStore::open(&etcd.url(), EtcdOptions::default())
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

    fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}/fanout", self.port)
    }

    /// Bytes etcd has sent its gRPC clients so far.
    fn sent_bytes(&self) -> Result<f64, Error> {
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
        Ok(text
            .lines()
            .filter(|l| {
                l.split(['{', ' ']).next() == Some("etcd_network_client_grpc_sent_bytes_total")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `agents` hosts, `tasks` tasks spread evenly over them, in services of 400 tasks
/// (one family each, one revision with an environment and a secret).
fn fleet(agents: usize, tasks: usize) -> StoreState {
    let services = tasks.div_ceil(400).max(1);
    let revs: Vec<_> = (0..services)
        .map(|s| {
            let mut c = support::container("main", &["serve", "--port", "8080"]);
            c.gpu = support::mps(2048, Some(20));
            c.env.insert("MODEL".into(), format!("model-{s:04}"));
            c.secret_env.insert(
                "API_KEY".into(),
                gpushare_core::model::Secret::new(format!("secret-of-service-{s:04}")),
            );
            support::revision(&format!("svc-{s:04}"), 1, vec![c])
        })
        .collect();
    let hosts: Vec<String> = (0..agents).map(|h| format!("h-{h:05}")).collect();
    let host_refs: Vec<&str> = hosts.iter().map(String::as_str).collect();
    let list: Vec<Task> = (0..tasks)
        .map(|t| {
            let rev = &revs[t % services];
            // Round-robin: each host runs tasks of several services.
            support::task(&format!("t-{t:06}"), rev, &hosts[t % agents], vec![0])
        })
        .collect();
    let mut st = support::state(CLUSTER, &host_refs, revs, list);
    st.serial = 1;
    st
}

/// A TCP stream that counts the bytes it reads (what the server sent, on the wire).
struct Counted {
    tcp: tokio::net::TcpStream,
    read: Arc<AtomicU64>,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.tcp).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        r
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

/// One simulated agent: what it received.
#[derive(Default)]
struct Seen {
    bytes: Arc<AtomicU64>,
    messages: AtomicU64,
    /// The last version received and when.
    last: Mutex<(u64, Option<Instant>)>,
}

/// A client of the server at `port` authenticated as `id`, counting into `seen`.
fn counted_client(
    id: &HostIdentity,
    port: u16,
    seen: &Seen,
) -> Result<AgentApiClient<tonic::transport::Channel>, Error> {
    let cfg = id.tls()?;
    let read = Arc::clone(&seen.bytes);
    let connector = tower::service_fn(move |_: tonic::codegen::http::Uri| {
        let (cfg, read) = (Arc::clone(&cfg), Arc::clone(&read));
        async move {
            let name = rustls::pki_types::ServerName::try_from("localhost")
                .map_err(std::io::Error::other)?;
            let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
            let _ = tcp.set_nodelay(true);
            let tls = tokio_rustls::TlsConnector::from(cfg)
                .connect(name, Counted { tcp, read })
                .await?;
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
        }
    });
    let channel = tonic::transport::Endpoint::from_shared(format!("http://localhost:{port}"))?
        .connect_timeout(Duration::from_secs(30))
        .connect_with_connector_lazy(connector);
    Ok(AgentApiClient::new(channel))
}

/// Follow `host`'s assignment until the task is aborted.
async fn follow(mut c: AgentApiClient<tonic::transport::Channel>, host: String, seen: Arc<Seen>) {
    loop {
        let req = pb::WatchRequest {
            host_id: host.clone(),
            resume_version: seen.last.lock().map(|l| l.0).unwrap_or(0),
        };
        if let Ok(s) = c.watch_assignment(req).await {
            let mut s = s.into_inner();
            while let Ok(Some(a)) = s.message().await {
                seen.messages.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut l) = seen.last.lock() {
                    *l = (a.version, Some(Instant::now()));
                }
            }
        }
        eprintln!("agent {host}: stream ended; reconnecting");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn mib(bytes: f64) -> String {
    format!("{:.2} MiB", bytes / (1024.0 * 1024.0))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The controller: serve the agent API on `url` until stdin closes.
async fn controller(url: &str) -> Result<(), Error> {
    let store: Arc<dyn Store> = Arc::new(EtcdStore::open(url, EtcdOptions::default()).await?);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let running = gpushare_agent_api::start(
        store,
        CLUSTER,
        ServerOptions::new("127.0.0.1:0".parse()?),
        async move {
            let _ = rx.await;
        },
    )
    .await?;
    println!("READY {} {}", running.addr.port(), running.ca_hash);
    std::io::stdout().flush()?;
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {}
    })
    .await?;
    let _ = tx.send(());
    running.wait().await?;
    Ok(())
}

/// The controller process, killed when dropped.
struct Controller {
    child: Child,
    port: u16,
    ca_hash: String,
}

impl Controller {
    fn start(url: &str) -> Result<Controller, Error> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["--controller", url])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let out = child.stdout.take().ok_or("no controller stdout")?;
        let mut line = String::new();
        std::io::BufReader::new(out).read_line(&mut line)?;
        let mut words = line.split_whitespace().skip(1);
        let port = words.next().ok_or("controller: no port")?.parse()?;
        let ca_hash = words.next().ok_or("controller: no CA hash")?.to_string();
        Ok(Controller {
            child,
            port,
            ca_hash,
        })
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[allow(
    clippy::too_many_lines,
    reason = "the benchmark's one run, measured and printed phase by phase"
)]
async fn run(o: &Opts) -> Result<(), Error> {
    println!(
        "fan-out: {} agents, {} tasks, {} rounds of {} tasks of one service moved",
        o.agents, o.tasks, o.rounds, o.moved
    );
    let etcd = Etcd::start().await?;
    let store = EtcdStore::open(&etcd.url(), EtcdOptions::default()).await?;
    let t = Instant::now();
    let mut state = fleet(o.agents, o.tasks);
    store.commit(0, &state).await?;
    let state_bytes = serde_json::to_vec(&state)?.len();
    println!(
        "state written to etcd in {:.1} s ({} as one JSON document)",
        t.elapsed().as_secs_f64(),
        mib(state_bytes as f64)
    );

    let etcd_before_controller = etcd.sent_bytes()?;
    let ctl = Controller::start(&etcd.url())?;
    let server = client::ServerAddr::parse(&format!("https://localhost:{}", ctl.port))?;
    let scope = TokenScope {
        pool: None,
        host_id: None,
        ttl: Duration::from_secs(3600),
        uses: u32::try_from(o.agents)?,
    };
    let (token, _) = tokens::create(&store, &scope, now()).await?;

    // Join every host (16 at a time), then follow every assignment.
    let t = Instant::now();
    let hosts: Vec<String> = state.hosts.keys().cloned().collect();
    let ids: Vec<HostIdentity> = {
        use futures_like::join_limited;
        join_limited(&hosts, 16, |h| {
            let (server, ca, token, h) = (
                server.clone(),
                ctl.ca_hash.clone(),
                token.clone(),
                h.clone(),
            );
            async move { client::join(&server, &ca, &token, Some(&h), None).await }
        })
        .await?
    };
    println!(
        "{} hosts joined in {:.1} s",
        ids.len(),
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let mut seen: BTreeMap<String, Arc<Seen>> = BTreeMap::new();
    let mut followers = Vec::new();
    for id in &ids {
        let s = Arc::new(Seen::default());
        let c = counted_client(id, ctl.port, &s)?;
        followers.push(tokio::spawn(follow(c, id.host_id.clone(), Arc::clone(&s))));
        seen.insert(id.host_id.clone(), s);
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    while seen
        .values()
        .any(|s| s.last.lock().map(|l| l.0 == 0).unwrap_or(true))
    {
        if Instant::now() > deadline {
            return Err("not every agent had its first assignment within 300 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let first_bytes: u64 = seen.values().map(|s| s.bytes.load(Ordering::Relaxed)).sum();
    let (rss, _) = rss_kib(ctl.child.id());
    println!(
        "every agent had its first assignment {:.1} s after the joins ({} in all, {:.1} KiB per agent); controller RSS {} MiB",
        t.elapsed().as_secs_f64(),
        mib(first_bytes as f64),
        first_bytes as f64 / 1024.0 / o.agents as f64,
        rss / 1024
    );
    let etcd_after_sync = etcd.sent_bytes()?;

    // The rounds: each moves `moved` tasks of one service to other hosts.
    let services: Vec<String> = state.revisions.keys().cloned().collect();
    let mut latencies = Vec::new();
    let mut after_commit = Vec::new();
    let (mut all_bytes, mut unaffected_bytes, mut unaffected_messages, mut affected_total) =
        (0u64, 0u64, 0u64, 0usize);
    let mut etcd_rounds = 0.0;
    let mut commit_times = Vec::new();
    for round in 0..o.rounds {
        let family = &services[round % services.len()];
        let ids: Vec<String> = state
            .tasks
            .values()
            .filter(|t| &t.family == family)
            .map(|t| t.id.clone())
            .take(o.moved)
            .collect();
        let mut next = state.clone();
        let mut affected = BTreeSet::new();
        for (i, id) in ids.iter().enumerate() {
            if let Some(t) = next.tasks.get_mut(id) {
                let to = &hosts[(hosts.iter().position(|h| *h == t.host).unwrap_or(0)
                    + 1
                    + i * 7
                    + round * 13)
                    % hosts.len()];
                if *to == t.host {
                    continue;
                }
                affected.insert(t.host.clone());
                affected.insert(to.clone());
                t.host = to.clone();
            }
        }
        next.serial = state.serial + 1;
        let before: BTreeMap<&String, (u64, u64, u64)> = seen
            .iter()
            .map(|(h, s)| {
                let v = s.last.lock().map(|l| l.0).unwrap_or(0);
                (
                    h,
                    (
                        s.bytes.load(Ordering::Relaxed),
                        s.messages.load(Ordering::Relaxed),
                        v,
                    ),
                )
            })
            .collect();
        let etcd0 = etcd.sent_bytes()?;
        let t0 = Instant::now();
        store.commit(state.serial, &next).await?;
        let t1 = Instant::now();
        commit_times.push(t1 - t0);
        state = next;
        // Until every affected agent has a new version (30 s at most), then 1 s more
        // for anything sent to the others.
        let deadline = t0 + Duration::from_secs(30);
        let mut got: BTreeMap<&String, (Duration, Duration)> = BTreeMap::new();
        while got.len() < affected.len() && Instant::now() < deadline {
            for h in &affected {
                if got.contains_key(h) {
                    continue;
                }
                if let Some(s) = seen.get(h) {
                    let (v, at) = s.last.lock().map(|l| *l).unwrap_or((0, None));
                    if v != before[h].2 {
                        let at = at.unwrap_or(t1);
                        got.insert(
                            h,
                            (
                                at.saturating_duration_since(t0),
                                at.saturating_duration_since(t1),
                            ),
                        );
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        if got.len() < affected.len() {
            eprintln!(
                "round {round}: {} of {} affected agents had no new assignment after 30 s",
                affected.len() - got.len(),
                affected.len()
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        etcd_rounds += etcd.sent_bytes()? - etcd0;
        latencies.extend(got.values().map(|l| l.0));
        after_commit.extend(got.values().map(|l| l.1));
        affected_total += affected.len();
        for (h, s) in &seen {
            let (b0, m0, _) = before[h];
            let db = s.bytes.load(Ordering::Relaxed) - b0;
            all_bytes += db;
            if !affected.contains(h.as_str()) {
                unaffected_bytes += db;
                unaffected_messages += s.messages.load(Ordering::Relaxed) - m0;
            }
        }
    }
    latencies.sort();
    after_commit.sort();
    commit_times.sort();
    let (rss, hwm) = rss_kib(ctl.child.id());
    let rounds = o.rounds as f64;
    println!("\n== through the agent API ({} rounds) ==", o.rounds);
    println!(
        "affected agents per round: {:.1}; time from the commit's start to each one's new assignment: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (the commit itself: p50 {:.1} ms)",
        affected_total as f64 / rounds,
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
        percentile(&commit_times, 0.5).as_secs_f64() * 1e3,
    );
    println!(
        "the same from the commit's return: p50 {:.1} ms, p99 {:.1} ms",
        percentile(&after_commit, 0.5).as_secs_f64() * 1e3,
        percentile(&after_commit, 0.99).as_secs_f64() * 1e3,
    );
    println!(
        "bytes the server sent per change: {:.1} KiB in all, {} bytes to the {} unaffected agents ({} messages)",
        all_bytes as f64 / rounds / 1024.0,
        unaffected_bytes as f64 / rounds,
        o.agents as f64 - affected_total as f64 / rounds,
        unaffected_messages
    );
    println!(
        "bytes etcd sent per change (to the controller's watch, and the bench's own reads): {:.1} KiB; the controller's first read of the state: {}",
        etcd_rounds / rounds / 1024.0,
        mib(etcd_after_sync - etcd_before_controller)
    );
    println!(
        "controller memory: RSS {} MiB now, peak {} MiB",
        rss / 1024,
        hwm / 1024
    );
    let api_bytes_per_change = all_bytes as f64 / rounds + etcd_rounds / rounds;
    for f in followers {
        f.abort();
    }
    drop(ctl);

    // The same change, read directly from the store by `--direct-sample` agents.
    let sample = o.direct_sample.min(o.agents).max(1);
    let family = &services[o.rounds % services.len()];
    let mut next = state.clone();
    for (i, t) in next
        .tasks
        .values_mut()
        .filter(|t| &t.family == family)
        .take(o.moved)
        .enumerate()
    {
        t.host = hosts[(i * 31 + 5) % hosts.len()].clone();
    }
    next.serial = state.serial + 1;
    store.commit(state.serial, &next).await?;
    let e0 = etcd.sent_bytes()?;
    let t = Instant::now();
    let mut reads = Vec::new();
    for _ in 0..sample {
        let t1 = Instant::now();
        let agent = EtcdStore::open(&etcd.url(), EtcdOptions::default()).await?;
        let st = agent.load_shared().await?;
        reads.push(t1.elapsed());
        assert_eq!(st.serial, next.serial);
    }
    let direct_total = t.elapsed();
    let per_agent = (etcd.sent_bytes()? - e0) / sample as f64;
    reads.sort();
    println!("\n== agents reading etcd directly (gpushare agent --store) ==");
    println!(
        "{sample} agents each read the state after the change: {} each (etcd's sent-bytes counter), one read p50 {:.0} ms, p99 {:.0} ms ({:.1} s for the {sample} one after another)",
        mib(per_agent),
        percentile(&reads, 0.5).as_secs_f64() * 1e3,
        percentile(&reads, 0.99).as_secs_f64() * 1e3,
        direct_total.as_secs_f64()
    );
    let direct_all = per_agent * o.agents as f64;
    println!(
        "for all {} agents: {} per change, {:.0} times what the agent API path cost ({} per change: the server's bytes to agents and etcd's to the controller)",
        o.agents,
        mib(direct_all),
        direct_all / api_bytes_per_change.max(1.0),
        mib(api_bytes_per_change)
    );
    Ok(())
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Run futures over items with at most `limit` in flight, in order.
mod futures_like {
    use std::future::Future;

    pub async fn join_limited<I, T, E, F, Fut>(
        items: &[I],
        limit: usize,
        f: F,
    ) -> Result<Vec<T>, super::Error>
    where
        F: Fn(&I) -> Fut,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(limit.max(1)) {
            let handles: Vec<_> = chunk.iter().map(|i| tokio::spawn(f(i))).collect();
            for h in handles {
                out.push(h.await??);
            }
        }
        Ok(out)
    }
}

fn main() -> Result<(), Error> {
    let o = opts()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match &o.controller {
        Some(url) => rt.block_on(controller(url)),
        None => rt.block_on(run(&o)),
    }
}

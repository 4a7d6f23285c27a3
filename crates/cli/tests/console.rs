//! The web console (`gpushare console`, docs/console.md) through the real binary:
//! its pages show what `show --json` shows, it never writes the store, every value
//! from the configuration or a host report is shown as text, no secret reaches a
//! page, and off loopback it wants its token. `show --svg` writes the same picture.

use gpushare_testkit::fleet;

use fleet::{json_fleet, Fleet};
use gpushare_testkit::{applied, arr, gp, show_json, snapshot};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

/// A running `gpushare console`, killed when dropped.
struct Served {
    child: Child,
    addr: String,
    /// What it printed at start.
    banner: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `gpushare console DIR ARGS` and wait for its banner (the address it serves).
fn console(dir: &Path, args: &[&str]) -> Served {
    console_env(dir, args, &[])
}

/// [`console`] with variables in its environment.
fn console_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Served {
    let mut all = vec!["console", ".", "--poll-ms", "200"];
    if !args.contains(&"--listen") {
        all.extend(["--listen", "127.0.0.1:0"]);
    }
    all.extend_from_slice(args);
    let mut g = gp(dir, &all);
    for (k, v) in env {
        g = g.env(k, v);
    }
    let mut child = g.spawn();
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("reading the console's banner");
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|s| s.split('/').next())
        .unwrap_or_else(|| {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            panic!("no address in the banner {line:?}: {err}")
        })
        .to_string();
    Served {
        child,
        addr,
        banner: line,
    }
}

/// GET `path` (with extra header lines): status and body.
fn get(addr: &str, path: &str, headers: &[&str]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connecting to the console");
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).expect("sending the request");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("reading the response");
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, body.to_string())
}

/// GET until the page answers 200 (the first observation takes a moment).
fn page(addr: &str, path: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = get(addr, path, &[]);
        if status == 200 {
            return body;
        }
        assert!(Instant::now() < deadline, "GET {path}: {status}\n{body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The values of attribute `name` in `text`, in order.
fn attrs<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let pat = format!(" {name}=\"");
    text.split(pat.as_str())
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .collect()
}

/// Host -> GPU index -> task ids, read from the fleet picture's SVG.
fn picture_fleet(svg: &str) -> Fleet {
    let mut out = Fleet::new();
    for host in svg.split("<g class=\"host\"").skip(1) {
        let id = attrs(host, "data-host")[0].to_string();
        let gpus = out.entry(id).or_default();
        for gpu in host.split("<g class=\"gpu\"").skip(1) {
            let index: u64 = attrs(gpu, "data-gpu")[0].parse().expect("a GPU index");
            let tasks = gpus.entry(index).or_default();
            for t in attrs(gpu, "data-task") {
                tasks.insert(t.to_string());
            }
        }
    }
    out
}

#[test]
fn pages_show_what_show_json_shows_and_the_store_is_never_written() {
    let d = applied("quickstart");
    let before = snapshot(d.path());
    let show = show_json(d.path());
    let c = console(d.path(), &[]);
    assert!(c.banner.contains("loopback only"), "{}", c.banner);

    let fleet = page(&c.addr, "/");
    assert_eq!(picture_fleet(&fleet), json_fleet(&show), "{fleet}");
    // Totals: GPUs and memory allocated, as show --json counts them.
    let gpus: usize = arr(&show, "hosts")
        .iter()
        .map(|h| arr(h, "gpus").len())
        .sum();
    let allocated: u64 = arr(&show, "hosts")
        .iter()
        .flat_map(|h| arr(h, "gpus"))
        .map(|g| g["allocated_memory_mib"].as_u64().expect("allocated"))
        .sum();
    assert!(
        fleet.contains(&format!("<dd id=\"total-gpus\">{gpus}</dd>")),
        "{fleet}"
    );
    assert!(
        fleet.contains(&format!("<dd id=\"total-allocated\">{allocated} MiB</dd>")),
        "{fleet}"
    );
    // What sharing saves counts the MPS tasks alone (those with GPU memory).
    let mps = arr(&show, "tasks")
        .iter()
        .filter(|t| t["gpu_memory_mib"].as_u64().unwrap_or(0) > 0)
        .count();
    let sharing = fleet
        .split("<dd id=\"total-sharing\">")
        .nth(1)
        .and_then(|s| s.split("</dd>").next())
        .unwrap_or_else(|| panic!("no sharing total:\n{fleet}"));
    assert!(
        sharing.contains(&format!("({mps} MPS tasks on ")),
        "{mps}: {sharing}"
    );

    // Services: desired and running per service.
    let services = page(&c.addr, "/services");
    for s in ["embedder", "reranker", "llm"] {
        let running = arr(&show, "tasks")
            .iter()
            .filter(|t| t["service"] == s && t["state"] == "running")
            .count();
        let row = services
            .split(&format!("<tr data-service=\"{s}\">"))
            .nth(1)
            .unwrap_or_else(|| panic!("no row for {s}:\n{services}"));
        let row = row.split("</tr>").next().expect("a row");
        assert!(
            row.contains(&format!("<td class=\"running\">{running}</td>")),
            "{s}: {row}"
        );
    }

    // A host's page; an unknown host is a 404.
    let host = arr(&show, "hosts")[0]["id"]
        .as_str()
        .expect("id")
        .to_string();
    let hp = page(&c.addr, &format!("/hosts/{host}"));
    assert!(hp.contains(&format!("Host {host}")), "{hp}");
    // Its pool's launch settings, and the reports this console has seen of it (the
    // one the apply's agents wrote: the console runs no agents).
    assert!(hp.contains("id=\"pool-settings\""), "{hp}");
    assert!(hp.contains("IMDSv2 required"), "{hp}");
    assert_eq!(hp.matches("<tr data-mps=\"healthy\"").count(), 1, "{hp}");
    assert_eq!(get(&c.addr, "/hosts/h-nope", &[]).0, 404);

    let plan = page(&c.addr, "/plan");
    // The console ran for several polls and wrote nothing (`plan` and `show` below
    // run the local fleet's agents, which do write: checked before them).
    std::thread::sleep(Duration::from_millis(600));
    let after = snapshot(d.path());
    let changed: Vec<_> = after
        .iter()
        .filter(|(p, b)| before.get(*p) != Some(*b))
        .map(|(p, _)| p.clone())
        .chain(before.keys().filter(|p| !after.contains_key(*p)).cloned())
        .collect();
    assert!(changed.is_empty(), "the console changed {changed:?}");

    // The plan page shows the plan `gpushare plan` prints.
    let printed = gp(d.path(), &["plan"]).run();
    printed.expect_code(0);
    let summary = printed.stdout.lines().next().expect("a first line");
    assert!(plan.contains(summary), "{summary}\n{plan}");
    // No reconcile loop has run: no pass to list.
    assert!(plan.contains("No reconcile pass has written"), "{plan}");
    // The fleet page's cost line is the plan's.
    let cost = printed
        .stdout
        .lines()
        .find(|l| l.starts_with("Cost per hour"))
        .expect("a cost line");
    assert!(cost.contains("MPS sharing: "), "{cost}");
    assert!(fleet.contains(cost), "{cost}\n{fleet}");

    // The picture alone, and as `show --svg` writes it: the same tasks on the same GPUs.
    let svg = page(&c.addr, "/fleet.svg");
    assert!(svg.starts_with("<svg"), "{svg}");
    assert_eq!(picture_fleet(&svg), json_fleet(&show));
    let file = d.path().join("fleet.svg");
    gp(
        d.path(),
        &["show", "--svg", file.to_str().expect("utf-8 path")],
    )
    .run()
    .expect_code(0);
    let written = std::fs::read_to_string(&file).expect("show --svg wrote the file");
    assert_eq!(picture_fleet(&written), json_fleet(&show));
    std::fs::remove_file(&file).expect("removing the picture");
}

const SECRET: &str = "hf_Sup3rS3cretT0ken_9f2c";
const SCRIPT: &str = "<script>alert(1)</script>";

#[test]
fn values_are_text_and_secrets_never_reach_a_page() {
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        d.path().join("main.hcl"),
        format!(
            r#"
gpushare {{
  cluster = "escape"
  cloud   = "local"
}}
variable "hf_token" {{
  sensitive = true
}}
capacity_provider "l4" {{
  instance_type = "g6.xlarge"
  max_size      = 2
}}
task_definition "embedder" {{
  container "server" {{
    image  = "ghcr.io/example/{SCRIPT}:1"
    memory = 1024
    secret_env = {{
      HF_TOKEN = var.hf_token
    }}
    gpu {{
      mps {{
        memory = 2048
      }}
    }}
  }}
}}
service "embedder" {{
  task_definition   = task_definition.embedder
  capacity_provider = capacity_provider.l4
  desired_count     = 2
}}
"#
        ),
    )
    .expect("writing the configuration");
    gp(d.path(), &["apply", "--auto-approve"])
        .env("GPUSHARE_VAR_hf_token", SECRET)
        .run()
        .expect_code(0);
    // A report whose reason and probe error carry markup (a report is the agent's word).
    // The local fleet's round writes its reports together (reports-batch.json); a
    // host's own file with the same report time counts instead of its batch entry.
    let state_dir = d.path().join(".gpushare");
    let batch: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
        &std::fs::read_to_string(state_dir.join("reports-batch.json")).expect("the reports"),
    )
    .expect("JSON");
    let (host_id, mut report) = batch.into_iter().next().expect("a report");
    std::fs::create_dir_all(state_dir.join("reports")).expect("the reports directory");
    let file = state_dir.join("reports").join(format!("{host_id}.json"));
    report["host_id"] = host_id.into();
    report["mps_error"] = SCRIPT.into();
    let tasks = report["task_details"]
        .as_object_mut()
        .expect("task_details");
    for detail in tasks.values_mut() {
        detail["state"] = "failed".into();
        detail["reason"] = format!("exited: {SCRIPT}").into();
        detail["exit_code"] = 1.into();
    }
    std::fs::write(&file, serde_json::to_string(&report).expect("JSON")).expect("rewriting");
    let host = report["host_id"].as_str().expect("host_id").to_string();

    // The console reads the configuration as it is now: the variable from the environment.
    let c = console_env(d.path(), &[], &[("GPUSHARE_VAR_hf_token", SECRET)]);
    let pages = [
        page(&c.addr, "/"),
        page(&c.addr, "/services"),
        page(&c.addr, &format!("/hosts/{host}")),
        page(&c.addr, "/plan"),
        page(&c.addr, "/fleet.svg"),
    ];
    let services = &pages[1];
    assert!(
        services.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"),
        "the image is not shown as text:\n{services}"
    );
    let host_page = &pages[2];
    assert!(
        host_page.contains("exited: &lt;script&gt;"),
        "the reason is not shown as text:\n{host_page}"
    );
    assert!(
        host_page.contains("<span class=\"probe-error\">&lt;script&gt;"),
        "the probe error is not shown as text:\n{host_page}"
    );
    for p in &pages {
        assert!(
            !p.contains(SCRIPT),
            "markup from a value reached a page:\n{p}"
        );
        assert!(!p.contains(SECRET), "the secret reached a page:\n{p}");
    }
    // The headers that keep a missed escape harmless: only the console's own script.
    let mut s = TcpStream::connect(&c.addr).expect("connect");
    write!(s, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("send");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read");
    assert!(
        resp.to_lowercase()
            .contains("content-security-policy: default-src 'none'; script-src 'self'"),
        "{resp}"
    );
}

#[test]
fn off_loopback_the_token_is_required() {
    let d = applied("quickstart");
    // No token file: refused at start, with the way out.
    let r = gp(d.path(), &["console", ".", "--listen", "0.0.0.0:0"]).run();
    r.expect_code(1);
    assert!(r.stderr.contains("--console-token-file"), "{}", r.stderr);

    let token = "3f1c9a7e5b2d4c6e8a0b1d3f5e7c9a2b";
    let file = d.path().join("console-token");
    std::fs::write(&file, format!("{token}\n")).expect("writing the token");
    let c = console(
        d.path(),
        &[
            "--listen",
            "0.0.0.0:0",
            "--console-token-file",
            file.to_str().expect("utf-8"),
        ],
    );
    assert!(
        c.banner.contains("bearer token is required"),
        "{}",
        c.banner
    );
    let port = c.addr.rsplit(':').next().expect("a port");
    let addr = format!("127.0.0.1:{port}");
    for path in [
        "/",
        "/services",
        "/plan",
        "/fleet.svg",
        "/events",
        "/hosts/x",
    ] {
        let (status, body) = get(&addr, path, &[]);
        assert_eq!(status, 401, "{path} without a token: {body}");
        assert!(!body.contains("data-task"), "{path}: {body}");
        let (status, _) = get(&addr, path, &["Authorization: Bearer not-the-token"]);
        assert_eq!(status, 401, "{path} with a wrong token");
    }
    let bearer = format!("Authorization: Bearer {token}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = get(&addr, "/", &[&bearer]);
        if status == 200 {
            assert!(body.contains("data-task"), "{body}");
            break;
        }
        assert!(Instant::now() < deadline, "{status}: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The cookie the login form sets is taken too.
    let cookie = format!("Cookie: gpushare_console={token}");
    assert_eq!(get(&addr, "/services", &[&cookie]).0, 200);
}

/// `gpushare reconcile . --listen` in `dir`: the served address (from its first
/// line), with its second line (the console's) as the banner, and its stdout, kept
/// open by the caller (a closed pipe would end the controller at its next line).
fn controller(dir: &Path) -> (Served, std::io::Lines<BufReader<std::process::ChildStdout>>) {
    let mut child = gp(
        dir,
        &[
            "reconcile",
            ".",
            "--interval",
            "5",
            "--listen",
            "127.0.0.1:0",
        ],
    )
    .spawn();
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let first = lines.next().expect("a line").expect("text");
    let second = lines.next().expect("a second line").expect("text");
    let served = Served {
        child,
        addr: first
            .rsplit("http://")
            .next()
            .expect("an address")
            .trim()
            .to_string(),
        banner: second,
    };
    (served, lines)
}

#[test]
fn the_controller_serves_the_console_beside_metrics() {
    let d = applied("quickstart");
    let (served, _lines) = controller(d.path());
    assert!(
        served.banner.contains("serving the web console") && served.banner.contains(&served.addr),
        "{}",
        served.banner
    );
    let fleet = page(&served.addr, "/");
    assert_eq!(picture_fleet(&fleet), json_fleet(&show_json(d.path())));
    assert_eq!(get(&served.addr, "/metrics", &[]).0, 200);
    // The plan page lists the loop's passes (the store's status record, as seen).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let plan = page(&served.addr, "/plan");
        if plan.contains("<tr data-pass=\"1\">") && plan.contains("Last pass in the store: pass") {
            assert!(plan.contains("no changes"), "{plan}");
            break;
        }
        assert!(Instant::now() < deadline, "no pass listed:\n{plan}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Issue 46 item 9, regression: 32 open event streams took every connection of the
/// operations listener, so `/healthz` and `/readyz` timed out (a liveness probe would
/// restart the controller). Streams beyond half the connections are refused with 503,
/// and the probes answer.
#[test]
fn open_event_streams_leave_room_for_the_probes() {
    let d = applied("quickstart");
    let (served, lines) = controller(d.path());
    page(&served.addr, "/");
    let mut streams = vec![];
    let mut refused = 0;
    for _ in 0..24 {
        let mut s = TcpStream::connect(&served.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5))).ok();
        let req = format!("GET /events HTTP/1.1\r\nHost: {}\r\n\r\n", served.addr);
        s.write_all(req.as_bytes()).expect("send");
        let mut head = [0u8; 12];
        let _ = s.read_exact(&mut head);
        if head.starts_with(b"HTTP/1.1 503") {
            refused += 1;
        }
        streams.push(s);
    }
    assert!(refused > 0, "every event stream was taken");
    // Answered while the streams stay open (without room it would wait past the
    // request's read timeout for a stream's 30 s connection limit).
    let (status, body) = get(&served.addr, "/healthz", &[]);
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    drop(streams);
    drop(lines);
}

/// With a git source the controller serves the console too: the configuration of the
/// commit its loop took, that commit on the pages, and its passes on the plan page.
#[test]
fn the_controller_of_a_git_source_serves_the_console_with_its_commit() {
    use gpushare_gitsource::testing::Upstream;
    let tmp = tempfile::tempdir().expect("tempdir");
    let up = Upstream::init(&tmp.path().join("fleet.git"));
    up.set_head("main");
    let fleet = r#"gpushare {
  cluster = "gitconsole"
}

capacity_provider "edge" {
  instance_type = "g6.2xlarge"
  max_size      = 4
}

task_definition "detector" {
  container "server" {
    image  = "ghcr.io/example/yolo-detector:8.1"
    cpu    = 2048
    memory = 4096
    gpu {
      mps {
        memory = 3072
      }
    }
  }
}

service "detector" {
  task_definition   = task_definition.detector
  capacity_provider = capacity_provider.edge
  desired_count     = 3
}
"#;
    let commit = up.commit("main", "three detectors", &[("fleet/main.hcl", fleet)]);
    let ctl = tmp.path().join("ctl");
    std::fs::create_dir_all(&ctl).expect("mkdir");
    let url = up.url();
    let mut child = gp(
        &ctl,
        &[
            "reconcile",
            "--git",
            &url,
            "--path",
            "fleet",
            "--interval",
            "1",
            "--listen",
            "127.0.0.1:0",
            ".",
        ],
    )
    .spawn();
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let first = lines.next().expect("a line").expect("text");
    let second = lines.next().expect("a second line").expect("text");
    std::thread::spawn(move || for _ in lines {});
    let served = Served {
        child,
        addr: first
            .rsplit("http://")
            .next()
            .expect("an address")
            .trim()
            .to_string(),
        banner: second,
    };
    assert!(
        served.banner.contains("serving the web console"),
        "{}",
        served.banner
    );
    let short = &commit[..12];
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, plan) = get(&served.addr, "/plan", &[]);
        if code == 200
            && plan.contains(&format!("configuration commit <code>{commit}</code>"))
            && plan.contains(&format!("<code>{short}</code>"))
            && plan.contains("applied")
        {
            break;
        }
        assert!(Instant::now() < deadline, "{code}:\n{plan}");
        std::thread::sleep(Duration::from_millis(250));
    }
    // The fleet page: the three detectors of that commit.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let fleet = page(&served.addr, "/");
        if fleet.matches("data-service=\"detector\"").count() == 3 {
            assert!(fleet.contains(&commit), "{fleet}");
            break;
        }
        assert!(Instant::now() < deadline, "{fleet}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Issue 43: the console gives each service's deployment as `show --json` does:
/// `/v1/services` the same fields (id, revision, previous, state, the counts, the
/// reason, the times), and the Services page the deployment of each service.
#[test]
fn the_console_shows_each_services_deployment_as_show_json_does() {
    let d = applied("quickstart");
    let before = show_json(d.path());
    let c = console(d.path(), &[]);
    let body = page(&c.addr, "/v1/services");
    let after = show_json(d.path());
    let served: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let served = arr(&served, "services");
    let (shown, later) = (arr(&before, "services"), arr(&after, "services"));
    assert_eq!(served.len(), shown.len(), "{body}");
    assert!(!served.is_empty(), "{body}");
    let page_text = page(&c.addr, "/services");
    for (s, (b, a)) in served.iter().zip(shown.iter().zip(later.iter())) {
        assert_eq!(s["service"], b["service"]);
        let (dep, was) = (&s["deployment"], &b["deployment"]);
        // A new service's first deployment is recorded.
        assert!(dep["id"].as_str().is_some(), "{s}");
        for field in [
            "id",
            "family",
            "revision",
            "previous",
            "failed_tasks",
            "healthy_tasks",
            "pending_tasks",
            "started_at",
            "updated_at",
            "reason",
        ] {
            assert_eq!(dep[field], was[field], "{field}: {s} vs {b}");
        }
        // The state is judged at each observation: compared where it held still.
        if b["deployment"]["state"] == a["deployment"]["state"] {
            assert_eq!(dep["state"], was["state"], "{s} vs {b}");
            assert_eq!(s["healthy"], b["healthy"], "{s} vs {b}");
        }
        // As the page writes it: text, escaped (`/` too).
        let id = dep["id"].as_str().expect("id").replace('/', "&#x2f;");
        let row = page_text
            .split(&format!(
                "<tr data-service=\"{}\">",
                s["service"].as_str().expect("name")
            ))
            .nth(1)
            .and_then(|r| r.split("</tr>").next())
            .unwrap_or_else(|| panic!("no row for {s}:\n{page_text}"));
        assert!(
            row.contains(&match dep["previous"].as_u64() {
                Some(p) => format!(" {id}, revision {} (from {p})</td>", dep["revision"]),
                None => format!(" {id}, revision {}</td>", dep["revision"]),
            }),
            "{row}"
        );
        assert!(
            page_text.contains(&format!("data-deployment=\"{id}\"")),
            "{page_text}"
        );
    }
}

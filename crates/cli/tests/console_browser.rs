//! The web console in a real browser: headless Chromium driven through chromedriver
//! (WebDriver, the `fantoccini` crate). The fleet page of the applied quickstart
//! shows, in its DOM, the hosts, GPUs and tasks of `show --json`; an apply made
//! elsewhere appears without a reload; a host faulted with `gpushare debug fault
//! HOST mps-down` under a reconcile loop shows impaired, then replaced, without a
//! reload; a screenshot of each page is saved (under the test's target directory;
//! with GPUSHARE_UPDATE_SCREENSHOTS=1 also into docs/console/ for docs/console.md).
//!
//! Needs Debian's `chromium` and `chromium-driver` (`apt-get install -y chromium
//! chromium-driver`); CHROMEDRIVER and CHROMIUM override where they are.

use gpushare_testkit::fleet;

use fleet::{json_fleet, Fleet};
use gpushare_testkit::{applied, arr, gp, show_json, workspace_root};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tool(env: &str, default: &str) -> PathBuf {
    let p = std::env::var_os(env)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default));
    assert!(
        p.is_file(),
        "{} not found: install Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver) or set {env}",
        p.display()
    );
    p
}

/// A free loopback port (bound and let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// chromedriver on a loopback port, answering.
fn chromedriver() -> (Killed, String) {
    let bin = tool("CHROMEDRIVER", "/usr/bin/chromedriver");
    let port = free_port();
    let child = Command::new(bin)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting chromedriver");
    let child = Killed(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not listen");
        std::thread::sleep(Duration::from_millis(100));
    }
    (child, format!("http://127.0.0.1:{port}"))
}

/// `gpushare console` on a free loopback port, and its base URL.
fn console(dir: &Path) -> (Killed, String) {
    let mut child = gp(
        dir,
        &[
            "console",
            ".",
            "--listen",
            "127.0.0.1:0",
            "--poll-ms",
            "250",
        ],
    )
    .spawn();
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the console's banner");
    let url = line
        .split("http://")
        .nth(1)
        .and_then(|s| s.split('/').next())
        .map(|a| format!("http://{a}"))
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    (Killed(child), url)
}

/// The same, read from the page's DOM.
const READ_DOM: &str = r#"
const out = {};
for (const h of document.querySelectorAll("main g.host")) {
  const gpus = {};
  for (const g of h.querySelectorAll("g.gpu")) {
    gpus[g.dataset.gpu] = Array.from(g.querySelectorAll("rect.task")).map(t => t.dataset.task);
  }
  out[h.dataset.host] = gpus;
}
return out;
"#;

fn dom_fleet(v: &serde_json::Value) -> Fleet {
    v.as_object()
        .expect("an object")
        .iter()
        .map(|(h, gpus)| {
            let gpus = gpus
                .as_object()
                .expect("gpus")
                .iter()
                .map(|(i, tasks)| {
                    let tasks = tasks
                        .as_array()
                        .expect("tasks")
                        .iter()
                        .map(|t| t.as_str().expect("id").to_string())
                        .collect();
                    (i.parse().expect("an index"), tasks)
                })
                .collect();
            (h.clone(), gpus)
        })
        .collect()
}

fn screenshots_dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    std::fs::create_dir_all(&d).expect("a screenshot directory");
    d
}

async fn screenshot(c: &fantoccini::Client, name: &str) {
    let png = c.screenshot().await.expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    let file = screenshots_dir().join(format!("{name}.png"));
    std::fs::write(&file, &png).expect("saving the screenshot");
    // docs/console.md shows these (the other screenshots are artifacts only).
    const IN_DOCS: [&str; 6] = [
        "fleet",
        "services",
        "plan",
        "host",
        "fleet-impaired",
        "fleet-replaced",
    ];
    if std::env::var_os("GPUSHARE_UPDATE_SCREENSHOTS").is_some() && IN_DOCS.contains(&name) {
        let docs = workspace_root().join("docs").join("console");
        std::fs::create_dir_all(&docs).expect("docs/console");
        std::fs::write(docs.join(format!("{name}.png")), &png).expect("saving into docs");
    }
}

/// A headless Chromium session through chromedriver at `driver_url`.
async fn browser(driver_url: &str) -> fantoccini::Client {
    let chromium = tool("CHROMIUM", "/usr/bin/chromium");
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1100,800"],
        }),
    );
    // Plain HTTP to the loopback chromedriver: no TLS connector.
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    fantoccini::ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(driver_url)
        .await
        .expect("a Chromium session")
}

/// Open `url` until the fleet page shows a host (the first observation may take a
/// moment).
async fn open_fleet(c: &fantoccini::Client, url: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        c.goto(&format!("{url}/"))
            .await
            .expect("opening the fleet page");
        let n = c
            .execute(
                "return document.querySelectorAll('main g.host').length",
                vec![],
            )
            .await
            .expect("counting hosts");
        if n.as_u64().unwrap_or(0) > 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the fleet page never showed a host"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Run `probe` (a script returning true or false) until it returns true.
async fn wait_for(c: &fantoccini::Client, probe: &str, secs: u64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let v = c.execute(probe, vec![]).await.expect("probing the page");
        if v == serde_json::Value::Bool(true) {
            return;
        }
        let page = c
            .execute("return document.querySelector('main').innerText", vec![])
            .await
            .unwrap_or_default();
        assert!(
            Instant::now() < deadline,
            "{what} within {secs} s; the page shows:\n{}",
            page.as_str().unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_page_shows_show_json_and_follows_an_apply_without_reload() {
    let d = applied("quickstart");
    let (_console, url) = console(d.path());
    let (_driver, driver_url) = chromedriver();
    let c = browser(&driver_url).await;

    open_fleet(&c, &url).await;
    let show = show_json(d.path());
    let dom = c.execute(READ_DOM, vec![]).await.expect("reading the DOM");
    assert_eq!(dom_fleet(&dom), json_fleet(&show));
    let gpus = c
        .execute(
            "return document.getElementById('total-gpus').textContent",
            vec![],
        )
        .await
        .expect("the GPU total");
    let want: usize = arr(&show, "hosts")
        .iter()
        .map(|h| arr(h, "gpus").len())
        .sum();
    assert_eq!(gpus.as_str(), Some(want.to_string().as_str()));
    screenshot(&c, "fleet").await;

    // A change applied elsewhere appears without a reload: a marker set on the page
    // survives, and the DOM gets the new embedder tasks.
    c.execute("window.__notReloaded = true; return true", vec![])
        .await
        .expect("setting the marker");
    gp(
        d.path(),
        &["apply", "--auto-approve", "-var", "embedder_replicas=8"],
    )
    .run()
    .expect_code(0);
    let show = show_json(d.path());
    let want = json_fleet(&show);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let dom = c.execute(READ_DOM, vec![]).await.expect("reading the DOM");
        if dom_fleet(&dom) == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the page did not follow the apply:\n{:#?}\n{want:#?}",
            dom_fleet(&dom)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let marker = c
        .execute("return window.__notReloaded === true", vec![])
        .await
        .expect("reading the marker");
    assert_eq!(
        marker,
        serde_json::Value::Bool(true),
        "the page was reloaded"
    );
    let embedders = arr(&show, "tasks")
        .iter()
        .filter(|t| t["service"] == "embedder")
        .count();
    assert_eq!(embedders, 8);

    // The other pages, for the screenshots (and that they render in a browser).
    for (path, name, probe) in [
        ("/services", "services", "#services"),
        ("/plan", "plan-by-hand", "#plan-text"),
    ] {
        c.goto(&format!("{url}{path}"))
            .await
            .expect("opening a page");
        let found = c
            .execute(
                &format!("return document.querySelector('{probe}') !== null"),
                vec![],
            )
            .await
            .expect("probing the page");
        assert_eq!(found, serde_json::Value::Bool(true), "{path}");
        screenshot(&c, name).await;
    }
    let host = arr(&show, "hosts")
        .iter()
        .find(|h| h["capacity_provider"] == "l4")
        .and_then(|h| h["id"].as_str())
        .expect("an l4 host")
        .to_string();
    c.goto(&format!("{url}/hosts/{host}"))
        .await
        .expect("the host page");
    let rows = c
        .execute(
            "return document.querySelectorAll('#tasks tr[data-task]').length",
            vec![],
        )
        .await
        .expect("counting the host's tasks");
    let want = arr(&show, "tasks")
        .iter()
        .filter(|t| t["host"] == host.as_str())
        .count();
    assert_eq!(rows.as_u64(), Some(want as u64));
    screenshot(&c, "host-by-hand").await;
    c.close().await.expect("closing the session");
}

/// The controller's console (`gpushare reconcile --listen`) and the line it printed.
fn controller(dir: &Path) -> (Killed, String) {
    let mut child = gp(
        dir,
        &[
            "reconcile",
            ".",
            "--interval",
            "1",
            "--listen",
            "127.0.0.1:0",
        ],
    )
    .spawn();
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut url = None;
    for _ in 0..2 {
        let line = lines.next().expect("a line").expect("text");
        if line.contains("web console") {
            url = line
                .split("http://")
                .nth(1)
                .and_then(|s| s.split('/').next())
                .map(|a| format!("http://{a}"));
        }
    }
    // Keep reading its output, so a full pipe never stops the loop.
    std::thread::spawn(move || for _ in lines {});
    let url = url.expect("the console's line");
    (Killed(child), url)
}

/// A host whose MPS daemon goes down shows impaired on the fleet page, and then
/// replaced (gone, its tasks elsewhere), without a reload; repeated plans (each runs
/// the local fleet's agents once: three failed probes make a host impaired) and an
/// apply drive it. Then, under a reconcile loop, the controller's console lists the
/// loop's passes on its plan page, and a host's page its probe history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_faulted_host_shows_impaired_then_replaced_without_reload() {
    let d = applied("quickstart");
    let (_console, url) = console(d.path());
    let (_driver, driver_url) = chromedriver();
    let c = browser(&driver_url).await;
    open_fleet(&c, &url).await;
    let show = show_json(d.path());
    let sick = arr(&show, "hosts")
        .iter()
        .find(|h| h["capacity_provider"] == "l4")
        .and_then(|h| h["id"].as_str())
        .expect("an l4 host")
        .to_string();
    c.execute("window.__notReloaded = true; return true", vec![])
        .await
        .expect("setting the marker");

    gp(d.path(), &["debug", "fault", &sick, "mps-down"])
        .run()
        .expect_code(0);
    // The row and the picture say impaired once the agent's report does.
    let impaired = format!(
        r#"const r = document.querySelector('tr[data-host="{sick}"]');
           const g = document.querySelector('g.host[data-host="{sick}"]');
           return r !== null && r.classList.contains("alarm") && r.innerText.includes("impaired")
               && g !== null && g.dataset.alarm === "true"
               && g.querySelector(".host-status").textContent.includes("MPS impaired");"#
    );
    for _ in 0..3 {
        gp(d.path(), &["plan"]).run();
    }
    wait_for(
        &c,
        &impaired,
        30,
        "the faulted host was not marked impaired",
    )
    .await;
    screenshot(&c, "fleet-impaired").await;

    // Its page: the reports this console saw, the failed probes among them, and
    // its pool's launch settings.
    // (The page is rendered once: loaded again until the reports are there.)
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        c.goto(&format!("{url}/hosts/{sick}"))
            .await
            .expect("the host page");
        let seen = c
            .execute(
                r#"return document.querySelectorAll('#probes tr[data-mps="impaired"]').length >= 1
                       && document.querySelectorAll('#probes tr[data-mps]').length >= 2
                       && document.getElementById('pool-settings') !== null"#,
                vec![],
            )
            .await
            .expect("probing the host page");
        if seen == serde_json::Value::Bool(true) {
            break;
        }
        let table = c
            .execute("return document.getElementById('probes').innerText", vec![])
            .await
            .unwrap_or_default();
        assert!(
            Instant::now() < deadline,
            "the host page did not show its probe history:\n{}",
            table.as_str().unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Tall enough for the probe history under the settings.
    c.set_window_size(1100, 1500).await.expect("resizing");
    screenshot(&c, "host").await;
    c.set_window_size(1100, 800).await.expect("resizing");
    open_fleet(&c, &url).await;
    c.execute("window.__notReloaded = true; return true", vec![])
        .await
        .expect("setting the marker");

    // Replaced: the host leaves the page and the picture is `show --json`'s.
    gp(d.path(), &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    let gone = format!(
        r#"return document.querySelector('tr[data-host="{sick}"]') === null
               && document.querySelector('g.host[data-host="{sick}"]') === null
               && document.querySelectorAll('main g.host').length > 0;"#
    );
    wait_for(&c, &gone, 30, "the faulted host was not replaced").await;
    let want = json_fleet(&show_json(d.path()));
    assert!(!want.contains_key(&sick), "{want:#?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let dom = c.execute(READ_DOM, vec![]).await.expect("reading the DOM");
        if dom_fleet(&dom) == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the page did not settle on the replacement:\n{:#?}\n{want:#?}",
            dom_fleet(&dom)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let marker = c
        .execute("return window.__notReloaded === true", vec![])
        .await
        .expect("reading the marker");
    assert_eq!(
        marker,
        serde_json::Value::Bool(true),
        "the page was reloaded"
    );
    screenshot(&c, "fleet-replaced").await;

    // A reconcile loop, and its own console: the plan page lists its passes (read
    // from the store's status record as they come).
    let (_loop, url) = controller(d.path());
    c.goto(&format!("{url}/plan")).await.expect("the plan page");
    wait_for(
        &c,
        "return document.querySelectorAll('#passes tr[data-pass]').length >= 2",
        30,
        "the plan page did not list the passes",
    )
    .await;
    screenshot(&c, "plan").await;
    c.close().await.expect("closing the session");
}

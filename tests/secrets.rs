//! Secrets stay secret: a `secret_env` value (here from a variable declared
//! `sensitive = true`) is never in `plan`, `plan --json`, `show`, `show --json` or the
//! debug-level logs, and in no file under the state directory except the store's
//! private files (0600, in a 0700 directory); a sensitive variable used where `plan`
//! would print it is a located error. Also: `fmt` keeps a file's mode, and an edited
//! saved plan or a planted symlink changes nothing.

use gpushare_tests::{gp, replace_config, snapshot};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const SECRET: &str = "hf_Sup3rS3cretT0ken_9f2c";

fn config(image_tag: &str) -> String {
    format!(
        r#"
gpushare {{
  cluster = "secrets"
  cloud   = "local"
}}

variable "hf_token" {{
  sensitive = true
}}

locals {{
  bearer = "Bearer ${{var.hf_token}}"
}}

capacity_provider "l4" {{
  instance_type = "g6.xlarge"
  max_size      = 2
}}

task_definition "embedder" {{
  container "server" {{
    image  = "ghcr.io/example/embedder:{image_tag}"
    memory = 1024
    env = {{
      MODEL = "bge-small"
    }}
    secret_env = {{
      HF_TOKEN = var.hf_token
      AUTH     = local.bearer
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
    )
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .expect("stat")
        .permissions()
        .mode()
        & 0o777
}

/// Every file under `dir` holding the secret must be private, in private directories.
fn secret_only_in_private_files(dir: &Path) -> usize {
    let mut found = 0;
    for (rel, bytes) in snapshot(dir) {
        let text = String::from_utf8_lossy(&bytes);
        if !text.contains(SECRET) {
            continue;
        }
        found += 1;
        let p = dir.join(&rel);
        assert_eq!(
            mode(&p),
            0o600,
            "{} holds the secret and is not 0600",
            p.display()
        );
        let mut parent = p.parent();
        while let Some(d) = parent {
            if d == dir {
                break;
            }
            assert_eq!(mode(d), 0o700, "{} is not 0700", d.display());
            parent = d.parent();
        }
    }
    found
}

#[test]
fn a_secret_never_shows_and_is_kept_only_in_private_store_files() {
    let d = tempfile::tempdir().expect("tempdir");
    replace_config(d.path(), &config("1.4"));
    let run = |args: &[&str]| {
        let r = gp(d.path(), args)
            .env("GPUSHARE_VAR_hf_token", SECRET)
            .env("GPUSHARE_LOG", "debug")
            .run();
        r.expect_code(0);
        for (what, text) in [("stdout", &r.stdout), ("stderr", &r.stderr)] {
            assert!(
                !text.contains(SECRET),
                "`gpushare {}` printed the secret on {what}:\n{text}",
                args.join(" ")
            );
        }
        r
    };
    run(&["validate"]);
    let plan = run(&["plan"]);
    assert!(
        plan.stdout.contains("\"HF_TOKEN\" = (sensitive)"),
        "{}",
        plan.stdout
    );
    let json = run(&["plan", "--json"]);
    assert!(json.stdout.contains("(sensitive)"), "{}", json.stdout);
    let saved = d.path().join("p.plan.json");
    run(&["plan", "--out", saved.to_str().expect("utf-8")]);
    assert_eq!(
        mode(&saved),
        0o600,
        "a saved plan holds the secret: private"
    );
    run(&["apply", saved.to_str().expect("utf-8")]);
    run(&["show"]);
    run(&["show", "--json"]);
    run(&["state", "list"]);
    std::fs::remove_file(&saved).expect("rm plan");

    let store = d.path().join(".gpushare");
    assert_eq!(mode(&store), 0o700);
    assert!(
        secret_only_in_private_files(&store) > 0,
        "the store must keep the secret for the agents"
    );

    // A changed secret is shown as changed, not shown.
    let r = gp(d.path(), &["plan"])
        .env("GPUSHARE_VAR_hf_token", "another-token-value")
        .run();
    r.expect_code(0);
    assert!(r.stdout.contains("(sensitive, changed)"), "{}", r.stdout);
    assert!(!r.stdout.contains("another-token-value"), "{}", r.stdout);

    // The tasks the in-process agents run get the secret in their environment: the
    // state's task definition holds it for them (checked through the store file).
    let state = gpushare_tests::file_store_state(&store)
        .expect("a committed state")
        .to_string();
    assert!(state.contains(SECRET));
}

#[test]
fn a_sensitive_variable_used_where_plan_prints_it_is_a_located_error() {
    let d = tempfile::tempdir().expect("tempdir");
    let text = config("1.4").replace(
        "      MODEL = \"bge-small\"",
        "      MODEL = \"bge-small\"\n      TOKEN = local.bearer",
    );
    replace_config(d.path(), &text);
    let before = snapshot(d.path());
    let r = gp(d.path(), &["plan"])
        .env("GPUSHARE_VAR_hf_token", SECRET)
        .run();
    r.expect_code(1);
    assert!(
        r.stderr
            .contains("`local.bearer` is sensitive and cannot be used in `env`"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("main.hcl:"), "located: {}", r.stderr);
    assert!(
        r.stderr.contains("secret_env"),
        "the hint names secret_env: {}",
        r.stderr
    );
    assert!(!r.stderr.contains(SECRET) && !r.stdout.contains(SECRET));
    assert_eq!(snapshot(d.path()), before, "a refused plan changed files");
}

#[test]
fn a_key_in_both_env_and_secret_env_is_refused() {
    let d = tempfile::tempdir().expect("tempdir");
    let text = config("1.4").replace("      MODEL = \"bge-small\"", "      HF_TOKEN = \"plain\"");
    replace_config(d.path(), &text);
    let r = gp(d.path(), &["validate"])
        .env("GPUSHARE_VAR_hf_token", SECRET)
        .run();
    r.expect_code(1);
    assert!(
        r.stderr
            .contains("`HF_TOKEN` is set in both env and secret_env"),
        "{}",
        r.stderr
    );
}

#[test]
fn fmt_keeps_a_private_files_mode() {
    let d = tempfile::tempdir().expect("tempdir");
    let file = d.path().join("main.hcl");
    std::fs::write(&file, "gpushare {\ncluster = \"x\"\n}\n").expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    gp(d.path(), &["fmt"]).run().expect_code(0);
    assert!(std::fs::read_to_string(&file)
        .expect("read")
        .contains("  cluster = \"x\""));
    assert_eq!(mode(&file), 0o600);
}

#[test]
fn plan_out_through_a_planted_symlink_leaves_its_target_alone() {
    let d = tempfile::tempdir().expect("tempdir");
    replace_config(d.path(), &config("1.4"));
    let victim = d.path().join("victim.txt");
    std::fs::write(&victim, "precious").expect("write");
    let out = d.path().join("p.plan.json");
    // The fixed temporary name earlier versions used, and the target itself.
    std::os::unix::fs::symlink(&victim, d.path().join("p.plan.tmp-gpushare")).expect("symlink");
    std::os::unix::fs::symlink(&victim, &out).expect("symlink");
    gp(d.path(), &["plan", "--out", out.to_str().expect("utf-8")])
        .env("GPUSHARE_VAR_hf_token", SECRET)
        .run()
        .expect_code(0);
    assert_eq!(std::fs::read_to_string(&victim).expect("read"), "precious");
    assert!(std::fs::symlink_metadata(&out).expect("stat").is_file());
}

#[test]
fn an_edited_saved_plan_is_refused_and_changes_nothing() {
    let d = tempfile::tempdir().expect("tempdir");
    replace_config(d.path(), &config("1.4"));
    let file = d.path().join("p.plan.json");
    let f = file.to_str().expect("utf-8");
    gp(d.path(), &["plan", "--out", f])
        .env("GPUSHARE_VAR_hf_token", SECRET)
        .run()
        .expect_code(0);
    let text = std::fs::read_to_string(&file).expect("read");
    let host = text
        .split("\"h-l4-")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .map(|tail| format!("h-l4-{tail}"))
        .expect("a planned host id");
    std::fs::write(&file, text.replace(&host, "../../..")).expect("edit");
    let before = snapshot(d.path());
    let r = gp(d.path(), &["apply", f]).run();
    r.expect_code(1);
    assert!(r.stderr.contains("was edited"), "{}", r.stderr);
    assert_eq!(snapshot(d.path()), before, "a refused plan changed files");
}

/// A GET on the console at `addr`: status and the whole response (headers, body).
fn console_get(addr: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connecting to the console");
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .ok();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("sending the request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("reading the response");
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, out)
}

/// The web console (docs/console.md) shows no secret either: its every page over the
/// applied fleet, the configuration loaded with the secret in its environment.
#[test]
fn the_console_pages_never_show_a_secret() {
    use std::io::BufRead;
    let d = tempfile::tempdir().expect("tempdir");
    replace_config(d.path(), &config("1.4"));
    gp(d.path(), &["apply", "--auto-approve"])
        .env("GPUSHARE_VAR_hf_token", SECRET)
        .run()
        .expect_code(0);
    let show = gp(d.path(), &["show", "--json"])
        .env("GPUSHARE_VAR_hf_token", SECRET)
        .run();
    show.expect_code(0);
    let show: serde_json::Value = serde_json::from_str(&show.stdout).expect("show --json");
    let hosts: Vec<String> = show["hosts"]
        .as_array()
        .expect("hosts")
        .iter()
        .filter_map(|h| h["id"].as_str().map(str::to_string))
        .collect();
    assert!(!hosts.is_empty());

    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Killed(
        gp(
            d.path(),
            &[
                "console",
                ".",
                "--listen",
                "127.0.0.1:0",
                "--poll-ms",
                "200",
            ],
        )
        .env("GPUSHARE_VAR_hf_token", SECRET)
        .env("GPUSHARE_LOG", "debug")
        .spawn_with(std::process::Stdio::piped(), std::process::Stdio::null()),
    );
    let mut banner = String::new();
    std::io::BufReader::new(child.0.stdout.take().expect("stdout"))
        .read_line(&mut banner)
        .expect("the console's banner");
    assert!(!banner.contains(SECRET), "{banner}");
    let addr = banner
        .split("http://")
        .nth(1)
        .and_then(|s| s.split('/').next())
        .unwrap_or_else(|| panic!("no address in {banner:?}"))
        .to_string();
    let mut pages = vec![
        "/".to_string(),
        "/services".into(),
        "/plan".into(),
        "/fleet.svg".into(),
    ];
    pages.extend(hosts.iter().map(|h| format!("/hosts/{h}")));
    // The first observation may take a moment.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while console_get(&addr, "/").0 != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "the console never observed"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for p in &pages {
        let (code, text) = console_get(&addr, p);
        assert_eq!(code, 200, "{p}: {text}");
        assert!(
            !text.contains(SECRET),
            "the console's {p} shows the secret:\n{text}"
        );
        assert!(!text.contains("Bearer hf_"), "{p}");
    }
}

//! The bootstrap script: golden file, shell syntax, size limit, bad values.
//! `EXPECTORATE=overwrite cargo test -p gpushare-ec2 --test user_data` rewrites the golden files.

mod support;

use gpushare_core::model::CapacityProvider;
use gpushare_ec2::{render_user_data, UserDataError, UserDataInput, USER_DATA_LIMIT};

fn pool(extra: serde_json::Value) -> CapacityProvider {
    let v = serde_json::json!({
        "instance_type": "g6.xlarge",
        "max_size": 4,
        "image": "ami-0123456789abcdef0",
        "subnets": ["subnet-a", "subnet-b"],
        "mps": { "default_active_thread_percentage": 50 },
        "agent": {
            "url": "https://downloads.example.com/gpushare/0.1.0/gpushare-x86_64-linux",
            "sha256": "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08"
        }
    });
    support::pool_from_json(v, extra)
}

fn input<'a>(pool: &'a CapacityProvider) -> UserDataInput<'a> {
    UserDataInput {
        cluster: "prod",
        pool_name: "l4",
        pool,
        host_id: "h-l4-3f9a2c",
        store_address: "etcd://192.0.2.5:2379",
    }
}

fn check_golden(name: &str, actual: &str) {
    expectorate::assert_contents(format!("tests/golden/{name}"), actual);
}

fn bash_syntax_ok(script: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("user-data.sh");
    std::fs::write(&f, script).expect("write script");
    let out = std::process::Command::new("bash")
        .arg("-n")
        .arg(&f)
        .output()
        .expect("run bash -n");
    assert!(
        out.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn user_data_matches_the_golden_file_and_is_valid_bash() {
    let p = pool(serde_json::json!({}));
    let script = render_user_data(&input(&p)).expect("renders");
    check_golden("user_data_mps_url.sh", &script);
    bash_syntax_ok(&script);
    assert!(script.len() <= USER_DATA_LIMIT);
    // The pieces issue 5 asks for, independent of the golden file's wording.
    assert!(script.contains("nvidia-smi -c EXCLUSIVE_PROCESS\n"));
    assert!(script.contains("ExecStart=/usr/bin/nvidia-cuda-mps-control -f\n"));
    assert!(script.contains("Environment=CUDA_MPS_PIPE_DIRECTORY=/run/gpushare-mps/pipe\n"));
    assert!(script.contains("Environment=CUDA_MPS_LOG_DIRECTORY=/run/gpushare-mps/log\n"));
    // Always restarted, as the ECS GPU AMI's unit is (issue 10).
    assert!(script.contains("Restart=always\nRestartSec=5\n\n[Install]"));
    assert!(!script.contains("Restart=on-failure"));
    assert!(script.contains("set_default_active_thread_percentage 50"));
    assert!(script.contains("ExecStart=/usr/local/bin/gpushare agent --store etcd://192.0.2.5:2379 --host-id h-l4-3f9a2c --cluster prod --runtime docker --mps-pipe-dir /run/gpushare-mps/pipe\n"));
    // Credentials come from a file on the host, never from the user data.
    assert!(script.contains("EnvironmentFile=-/etc/gpushare/agent.env\n"));
    assert!(script.contains("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08  $agent_tmp\" | sha256sum --check --strict -"));
    assert!(!script.contains("{{"), "unrendered tag left");
    assert!(!script.contains("/tmp/"), "MPS state never goes under /tmp");
}

#[test]
fn deep_check_pool_starts_the_agent_with_the_deep_diagnostic() {
    let p = pool(serde_json::json!({ "deep_check": true }));
    let script = render_user_data(&input(&p)).expect("renders");
    bash_syntax_ok(&script);
    assert!(
        script.contains("--runtime docker --mps-pipe-dir /run/gpushare-mps/pipe --deep-check\n")
    );
    let plain = render_user_data(&input(&pool(serde_json::json!({})))).expect("renders");
    assert!(!plain.contains("--deep-check"));
}

#[test]
fn agent_already_in_the_image_and_mps_disabled() {
    let p = pool(
        serde_json::json!({ "mps": { "enabled": false }, "agent": { "path": "/opt/gpushare/bin/gpushare", "credentials_file": "/opt/gpushare/agent.env" } }),
    );
    let script = render_user_data(&input(&p)).expect("renders");
    check_golden("user_data_no_mps_image_agent.sh", &script);
    bash_syntax_ok(&script);
    assert!(!script.contains("nvidia-cuda-mps-control"));
    assert!(!script.contains("EXCLUSIVE_PROCESS"));
    assert!(!script.contains("curl"));
    assert!(script.contains("test -x /opt/gpushare/bin/gpushare"));
    assert!(script.contains("ExecStart=/opt/gpushare/bin/gpushare agent --store etcd://192.0.2.5:2379 --host-id h-l4-3f9a2c --cluster prod --runtime docker --no-mps\n"));
    // The pool's agent block names the credentials file.
    assert!(script.contains("EnvironmentFile=-/opt/gpushare/agent.env\n"));
}

#[test]
fn user_data_over_16_kib_is_refused() {
    let long = format!("https://downloads.example.com/{}", "a".repeat(17 * 1024));
    let p = pool(
        serde_json::json!({ "agent": { "url": long, "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" } }),
    );
    match render_user_data(&input(&p)) {
        Err(UserDataError::TooLarge {
            bytes,
            limit,
            host_id,
        }) => {
            assert!(bytes > limit);
            assert_eq!(limit, 16384);
            assert_eq!(host_id, "h-l4-3f9a2c");
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
}

#[test]
fn bad_values_are_refused_with_the_field_named() {
    let cases = [
        (
            serde_json::json!({ "agent": { "url": "https://example.com/g" } }),
            "capacity_provider.l4.agent.url",
            "needs agent.sha256",
        ),
        (
            serde_json::json!({ "agent": { "url": "https://example.com/g", "sha256": "abc" } }),
            "capacity_provider.l4.agent.sha256",
            "SHA-256",
        ),
        (
            serde_json::json!({ "mps": { "pipe_directory": "/tmp/mps" } }),
            "capacity_provider.l4.mps.pipe_directory",
            "not be in a world-writable",
        ),
        (
            serde_json::json!({ "agent": { "path": "gpushare" } }),
            "capacity_provider.l4.agent.path",
            "absolute",
        ),
        (
            serde_json::json!({ "mps": { "default_active_thread_percentage": 0 } }),
            "capacity_provider.l4.mps.default_active_thread_percentage",
            "between 1 and 100",
        ),
    ];
    for (extra, field, reason) in cases {
        let p = pool(extra);
        let err = render_user_data(&input(&p)).expect_err("refused");
        let msg = err.to_string();
        assert!(msg.starts_with(field), "{msg:?} should name {field}");
        assert!(msg.contains(reason), "{msg:?} should say {reason:?}");
    }
    let p = pool(serde_json::json!({}));
    let mut i = input(&p);
    i.store_address = "etcd://root:hunter2@192.0.2.5:2379";
    assert!(render_user_data(&i)
        .expect_err("credentials")
        .to_string()
        .contains("no secrets"));
    i.store_address = "etcd://192.0.2.5:2379 --evil";
    assert!(render_user_data(&i).is_err());
}

#[test]
fn systemd_specifiers_in_the_store_address_are_escaped_and_curl_is_restricted() {
    let p = pool(serde_json::json!({}));
    let mut i = input(&p);
    // `%h` would expand to the agent user's home directory inside ExecStart.
    i.store_address = "etcd://192.0.2.5:2379/team%hprefix";
    let script = render_user_data(&i).expect("renders");
    bash_syntax_ok(&script);
    assert!(
        script.contains("--store etcd://192.0.2.5:2379/team%%hprefix "),
        "{script}"
    );
    let curl = script
        .lines()
        .find(|l| l.starts_with("curl "))
        .expect("a curl line");
    assert!(curl.contains("--globoff"), "{curl}");
    assert!(
        curl.contains("--proto '=https' --proto-redir '=https'"),
        "{curl}"
    );
    // An explicit http:// URL (a test mirror) allows http only.
    let http = pool(serde_json::json!({ "agent": {
        "url": "http://192.0.2.9:8000/gpushare",
        "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" } }));
    let script = render_user_data(&input(&http)).expect("renders");
    assert!(
        script.contains("--proto '=http' --proto-redir '=http'"),
        "{script}"
    );
}

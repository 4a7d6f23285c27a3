//! The bootstrap script: golden file, shell syntax, size limit, bad values.
//! `EXPECTORATE=overwrite cargo test -p gpushare-ec2 --test user_data` rewrites the golden files.

use gpushare_testkit_engine::ec2 as support;

use gpushare_core::model::CapacityProvider;
use gpushare_ec2::{render_user_data, UserDataError, UserDataInput, USER_DATA_LIMIT};
use gpushare_engine::join::JoinGrant;
use std::sync::LazyLock;

/// A host's join grant as a launch mints it (a made-up token of the real shape).
static JOIN: LazyLock<JoinGrant> = LazyLock::new(|| JoinGrant {
    server: "https://controller.internal:7443".into(),
    token: "0a1b2c3d.00112233445566778899aabbccddeeff".into(),
    ca_hash: format!("sha256:{}", "ab".repeat(32)),
});

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
        join: &JOIN,
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
    let sha = "ab".repeat(32);
    assert!(script.contains(&format!("ExecStart=/usr/local/bin/gpushare agent --server https://controller.internal:7443 --ca-hash sha256:{sha} --host-id h-l4-3f9a2c --cluster prod --runtime docker --docker-gpu-request --imds-url http://169.254.169.254 --mps-pipe-dir /run/gpushare-mps/pipe\n")));
    // The join token reaches the agent through a root-only file, never its command line.
    assert!(script.contains("EnvironmentFile=-/etc/gpushare/join.env\n"));
    assert!(script.contains("( umask 077; printf 'GPUSHARE_JOIN_TOKEN=%s\\n' '0a1b2c3d.00112233445566778899aabbccddeeff' > /etc/gpushare/join.env )\n"));
    assert_eq!(
        script.matches("0a1b2c3d.0011").count(),
        1,
        "the token appears once"
    );
    assert!(!script.contains("--store"), "hosts never read the store");
    assert!(script.contains("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08  $agent_tmp\" | sha256sum --check --strict -"));
    assert!(!script.contains("{{"), "unrendered tag left");
    assert!(!script.contains("/tmp/"), "MPS state never goes under /tmp");
    // Docker gets the NVIDIA runtime, and the agent asks for the placed GPUs (issue 50).
    assert!(script.contains("nvidia-ctk runtime configure --runtime=docker\n"));
}

#[test]
fn deep_check_pool_starts_the_agent_with_the_deep_diagnostic() {
    let p = pool(serde_json::json!({ "deep_check": true }));
    let script = render_user_data(&input(&p)).expect("renders");
    bash_syntax_ok(&script);
    assert!(
        script.contains("--runtime docker --docker-gpu-request --imds-url http://169.254.169.254 --mps-pipe-dir /run/gpushare-mps/pipe --deep-check\n")
    );
    let plain = render_user_data(&input(&pool(serde_json::json!({})))).expect("renders");
    assert!(!plain.contains("--deep-check"));
}

#[test]
fn a_pools_mps_user_starts_the_agent_with_it() {
    let p = pool(serde_json::json!({ "mps": { "user": 1000 } }));
    let script = render_user_data(&input(&p)).expect("renders");
    bash_syntax_ok(&script);
    assert!(
        script.contains("--mps-pipe-dir /run/gpushare-mps/pipe --mps-user 1000\n"),
        "{script}"
    );
    let plain = render_user_data(&input(&pool(serde_json::json!({})))).expect("renders");
    assert!(!plain.contains("--mps-user"));
    // A host launched with another user is outdated: its pool's hosts roll.
    let before = gpushare_core::model::LaunchRecord::of(&pool(serde_json::json!({})));
    let after = gpushare_core::model::LaunchRecord::of(&p);
    assert_ne!(before, after);
}

#[test]
fn agent_already_in_the_image_and_mps_disabled() {
    let p = pool(
        serde_json::json!({ "mps": { "enabled": false }, "agent": { "path": "/opt/gpushare/bin/gpushare" } }),
    );
    let script = render_user_data(&input(&p)).expect("renders");
    check_golden("user_data_no_mps_image_agent.sh", &script);
    bash_syntax_ok(&script);
    assert!(!script.contains("nvidia-cuda-mps-control"));
    assert!(!script.contains("EXCLUSIVE_PROCESS"));
    assert!(!script.contains("curl"));
    assert!(script.contains("test -x /opt/gpushare/bin/gpushare"));
    let sha = "ab".repeat(32);
    assert!(script.contains(&format!("ExecStart=/opt/gpushare/bin/gpushare agent --server https://controller.internal:7443 --ca-hash sha256:{sha} --host-id h-l4-3f9a2c --cluster prod --runtime docker --docker-gpu-request --imds-url http://169.254.169.254 --no-mps\n")));
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
    let with_credentials = JoinGrant {
        server: "https://root:hunter2@controller.internal:7443".into(),
        ..JOIN.clone()
    };
    i.join = &with_credentials;
    let err = render_user_data(&i).expect_err("credentials");
    assert!(
        err.to_string().starts_with("gpushare.controller_address"),
        "{err}"
    );
    let evil = JoinGrant {
        server: "https://controller.internal:7443 --evil".into(),
        ..JOIN.clone()
    };
    i.join = &evil;
    assert!(render_user_data(&i).is_err());
    // A token that could break out of its quotes is refused without being echoed.
    let forged = JoinGrant {
        token: "0a1b.cd'$(reboot)'".into(),
        ..JOIN.clone()
    };
    i.join = &forged;
    let err = render_user_data(&i).expect_err("forged token");
    assert!(!err.to_string().contains("reboot"), "{err}");
}

#[test]
fn percent_signs_never_reach_systemd_and_curl_is_restricted() {
    let p = pool(serde_json::json!({}));
    let mut i = input(&p);
    // `%h` would expand to the agent user's home directory inside ExecStart: the
    // controller's address may not hold one at all.
    let percent = JoinGrant {
        server: "https://controller%h:7443".into(),
        ..JOIN.clone()
    };
    i.join = &percent;
    assert!(render_user_data(&i).is_err());
    let script = render_user_data(&input(&p)).expect("renders");
    bash_syntax_ok(&script);
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

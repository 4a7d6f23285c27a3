//! How the provider binary starts: by hand (a helpful message), under Terraform's
//! handshake (the go-plugin line), and in `--debug` mode (a reattach session the
//! real `terraform` uses).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_terraform-provider-gpushare");
const COOKIE: &str = "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2";

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn run_by_hand_it_explains_itself_and_exits_1() {
    let out = Command::new(BIN)
        .env_remove("TF_PLUGIN_MAGIC_COOKIE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        out.stdout.is_empty(),
        "nothing on stdout (the handshake channel)"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("This binary is a plugin"), "{err}");
    assert!(err.contains("--debug"), "{err}");
}

#[test]
fn an_unsupported_protocol_version_is_refused() {
    let out = Command::new(BIN)
        .env("TF_PLUGIN_MAGIC_COOKIE", COOKIE)
        .env("PLUGIN_PROTOCOL_VERSIONS", "4,5")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("speaks only version 6"), "{err}");
}

#[test]
fn without_a_client_certificate_it_refuses_to_serve() {
    let out = Command::new(BIN)
        .env("TF_PLUGIN_MAGIC_COOKIE", COOKIE)
        .env("PLUGIN_PROTOCOL_VERSIONS", "6")
        .env_remove("PLUGIN_CLIENT_CERT")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "no handshake line: nothing listens");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("PLUGIN_CLIENT_CERT is not set"), "{err}");
    assert!(err.contains("--debug"), "{err}");
}

/// The provider started as Terraform starts it (cookie, protocols, a client
/// certificate), stderr piped, and the handshake line it printed.
fn start_under_handshake(protocols: &str) -> (Killed, String) {
    let client = {
        let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P521_SHA512).unwrap();
        params.self_signed(&key).unwrap().pem()
    };
    let child = Command::new(BIN)
        .env("TF_PLUGIN_MAGIC_COOKIE", COOKIE)
        .env("PLUGIN_PROTOCOL_VERSIONS", protocols)
        .env("PLUGIN_CLIENT_CERT", client)
        .env("GPUSHARE_PROVIDER_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Killed(child);
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line)
}

#[test]
fn a_silent_peer_does_not_hold_the_tls_listener() {
    let (mut child, line) = start_under_handshake("6");
    let addr = line.split('|').nth(3).expect("address").to_string();
    // Connect and say nothing: the provider drops the connection after its handshake
    // timeout (the read below then ends) instead of waiting forever.
    let mut silent = std::net::TcpStream::connect(&addr).unwrap();
    silent
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let mut buf = [0u8; 16];
    use std::io::Read;
    let n = silent.read(&mut buf);
    assert!(
        matches!(n, Ok(0)),
        "the provider closed the silent connection: {n:?}"
    );
    let _ = child.0.kill();
    let mut err = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("TLS handshake timed out"), "{err}");
}

#[test]
fn under_terraforms_handshake_it_prints_the_go_plugin_line_with_its_certificate() {
    let (_child, line) = start_under_handshake("5,6");
    let fields: Vec<&str> = line.trim_end().split('|').collect();
    assert_eq!(fields.len(), 6, "{line}");
    assert_eq!(&fields[..3], &["1", "6", "tcp"]);
    assert!(fields[3].starts_with("127.0.0.1:"), "{line}");
    assert_eq!(fields[4], "grpc");
    use base64::Engine;
    assert!(!fields[5].ends_with('='), "base64 without padding");
    let der = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(fields[5])
        .unwrap();
    assert_eq!(der[0], 0x30, "a DER certificate");
}

fn terraform() -> std::path::PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("terraform"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("these tests need the real `terraform` binary (1.11) on PATH; none was found in {path:?}"))
}

#[test]
fn debug_mode_prints_reattach_json_that_terraform_uses() {
    let work = tempfile::tempdir().unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/terraform/main.tf"),
        work.path().join("main.tf"),
    )
    .unwrap();
    let child = Command::new(BIN)
        .arg("--debug")
        .current_dir(work.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = Killed(child);
    let mut reader = BufReader::new(child.0.stdout.take().unwrap());
    let mut reattach = None;
    for _ in 0..20 {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if let Some(rest) = line.trim().strip_prefix("TF_REATTACH_PROVIDERS='") {
            reattach = Some(rest.trim_end_matches('\'').to_string());
            break;
        }
    }
    let reattach = reattach.expect("no TF_REATTACH_PROVIDERS line");
    let j: serde_json::Value = serde_json::from_str(&reattach).unwrap();
    assert_eq!(
        j["registry.terraform.io/gpushare/gpushare"]["ProtocolVersion"],
        6
    );
    // An empty CLI configuration: the provider is found only through the reattach variable.
    let cli = work.path().join("empty.tfrc");
    std::fs::write(&cli, "").unwrap();
    let out = Command::new(terraform())
        .args(["plan", "-no-color", "-input=false"])
        .current_dir(work.path())
        .env("TF_REATTACH_PROVIDERS", &reattach)
        .env("TF_CLI_CONFIG_FILE", &cli)
        .env("TF_IN_AUTOMATION", "1")
        .env("CHECKPOINT_DISABLE", "1")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Plan: 5 to add"), "{text}");
}

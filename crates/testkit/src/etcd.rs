//! A real etcd for tests: where the binary is and the command line of one member on
//! loopback ports. The end-to-end tests (`stores`) and the etcd store's own tests
//! (`gpushare_testkit_engine::etcd`) start their members with these.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The `etcd` binary: `GPUSHARE_ETCD_BIN`, else the first `etcd` on PATH. A machine
/// without one fails the test with what to install; it never skips.
pub fn etcd_binary() -> PathBuf {
    if let Ok(p) = std::env::var("GPUSHARE_ETCD_BIN") {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "GPUSHARE_ETCD_BIN={} is not a file: these tests need a real etcd server \
             (Debian's etcd-server: apt-get install -y etcd-server)",
            p.display()
        );
        return p;
    }
    let in_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("etcd"))
            .find(|p| p.is_file())
    });
    match in_path {
        Some(p) => p,
        None => panic!(
            "these tests need a real etcd server and none was found (not in PATH, GPUSHARE_ETCD_BIN unset): \
             install Debian's etcd-server (apt-get install -y etcd-server), as .ci/test does"
        ),
    }
}

/// A loopback port nobody listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The command line of a one-member cluster named `name`, its data in `data`,
/// serving clients at `client_url` and its peer at `peer_url`.
pub fn member_command(
    bin: &Path,
    name: &str,
    data: &Path,
    client_url: &str,
    peer_url: &str,
) -> Vec<OsString> {
    let mut command: Vec<OsString> = vec![bin.into(), "--name".into(), name.into()];
    command.push("--data-dir".into());
    command.push(data.into());
    for (flag, value) in [
        ("--listen-client-urls", client_url.to_string()),
        ("--advertise-client-urls", client_url.to_string()),
        ("--listen-peer-urls", peer_url.to_string()),
        ("--initial-advertise-peer-urls", peer_url.to_string()),
        ("--initial-cluster", format!("{name}={peer_url}")),
    ] {
        command.push(flag.into());
        command.push(value.into());
    }
    command
}

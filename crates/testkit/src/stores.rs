//! The stores the store-parameterised end-to-end tests run against: the embedded
//! file store and a real etcd (Debian's `etcd-server`, started here as a process on
//! loopback ports with its own data directory; a machine without `etcd` fails the
//! test, it does not skip it).

use crate::etcd::{etcd_binary, free_port, member_command};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One store a test runs against.
pub enum TestStore {
    /// The default: `.gpushare/` beside the configuration.
    File,
    /// A real etcd member of this test.
    Etcd(EtcdProcess),
}

/// An `etcd` process, killed with its data when dropped.
pub struct EtcdProcess {
    child: Child,
    _data: tempfile::TempDir,
    port: u16,
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl EtcdProcess {
    /// Start one etcd member on loopback and wait until it accepts connections.
    pub fn start() -> EtcdProcess {
        let data = tempfile::tempdir().expect("tempdir");
        let (port, peer) = (free_port(), free_port());
        let client = format!("http://127.0.0.1:{port}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let command = member_command(
            &etcd_binary(),
            "gpushare-test",
            &data.path().join("etcd"),
            &client,
            &peer_url,
        );
        let child = Command::new(&command[0])
            .args(&command[1..])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("starting etcd ({e}): these tests need Debian's etcd-server (.ci/test installs it)")
            });
        let mut p = EtcdProcess {
            child,
            _data: data,
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = p.child.try_wait() {
                panic!("etcd exited at start: {status}");
            }
            assert!(Instant::now() < deadline, "etcd did not listen within 20 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        p
    }
}

impl EtcdProcess {
    /// Its process id (to freeze it with SIGSTOP, as a stalled disk or a paused VM).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The store URL of this member under key prefix `prefix`.
    pub fn url(&self, prefix: &str) -> String {
        format!("etcd://127.0.0.1:{}/{prefix}", self.port)
    }
}

/// The file store, and a fresh etcd.
pub fn test_stores() -> Vec<TestStore> {
    vec![TestStore::File, TestStore::Etcd(EtcdProcess::start())]
}

impl TestStore {
    pub fn name(&self) -> &'static str {
        match self {
            TestStore::File => "file",
            TestStore::Etcd(_) => "etcd",
        }
    }

    /// Point `main.hcl` in `dir` (whose `gpushare {` block opens a line of its own)
    /// at this store, under the key prefix `prefix` for etcd.
    pub fn use_in(&self, dir: &Path, prefix: &str) {
        let TestStore::Etcd(e) = self else { return };
        let path = dir.join("main.hcl");
        let text = std::fs::read_to_string(&path).expect("main.hcl");
        assert!(
            text.contains("gpushare {\n"),
            "main.hcl has no gpushare block"
        );
        let text = text.replacen(
            "gpushare {\n",
            &format!("gpushare {{\n  store = \"{}\"\n", e.url(prefix)),
            1,
        );
        std::fs::write(&path, text).expect("main.hcl");
    }
}

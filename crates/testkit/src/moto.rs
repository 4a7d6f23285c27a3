//! A `moto_server` on 127.0.0.1 (the AWS emulator: EC2, ELBv2), started per test
//! from `.venv/` of the checkout (made by `.ci/test`), `$MOTO_SERVER` or PATH.
//! Only 127.0.0.1 is ever connected to: addresses moto hands out are never used.

use crate::etcd::free_port;
use std::net::{SocketAddr, TcpStream as StdStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `moto_server`: $MOTO_SERVER, then `<repo>/.venv/bin/moto_server`, then PATH.
pub fn moto_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("MOTO_SERVER") {
        return PathBuf::from(p);
    }
    let venv = crate::workspace_root().join(".venv/bin/moto_server");
    if venv.exists() {
        return venv;
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join("moto_server");
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "moto_server not found (looked at $MOTO_SERVER, {}, and PATH). Run .ci/run, or: python3 -m venv .venv && .venv/bin/pip install 'moto[server]'",
        crate::workspace_root().join(".venv/bin/moto_server").display()
    );
}

/// A `moto_server` child process on 127.0.0.1, killed on drop.
pub struct Moto {
    child: Child,
    pub addr: SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Moto {
    pub fn start() -> Moto {
        Moto::start_with_env(&[])
    }

    /// A moto_server with `env` set (e.g. `MOTO_AMIS_PATH`, the images it serves).
    pub fn start_with_env(env: &[(&str, &str)]) -> Moto {
        let bin = moto_binary();
        let dir = tempfile::tempdir().expect("tempdir");
        for _attempt in 0..3 {
            let port = free_port();
            let log = dir.path().join(format!("moto-{port}.log"));
            let out = std::fs::File::create(&log).expect("moto log file");
            let err = out.try_clone().expect("moto log file");
            let mut child = Command::new(&bin)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .envs(env.iter().copied())
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                if StdStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                    return Moto {
                        child,
                        addr,
                        log,
                        _dir: dir,
                    };
                }
                if let Ok(Some(_status)) = child.try_wait() {
                    break; // port taken between our probe and moto's bind: try another
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    panic!(
                        "moto_server did not listen on {addr} within 60 s; log:\n{}",
                        std::fs::read_to_string(&log).unwrap_or_default()
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        panic!(
            "moto_server failed to start three times; see {}",
            dir.path().display()
        );
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

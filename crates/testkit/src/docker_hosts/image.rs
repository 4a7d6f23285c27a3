//! The image the lab's containers run, built here without a registry: the test
//! build of `gpushare` and every shared library `ldd` lists for it (and the loader),
//! etcd, Debian's static busybox (the hosts' shell, `sleep`, `ps`...) and a stand-in
//! for `nvidia-cuda-mps-control`, in a tarball given to `docker import`.

use super::{docker, docker_ok, ETCD_BIN, IMAGE_BIN, MPS_BROKEN, MPS_CONTROL};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn sha256_of(path: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("running sha256sum");
    assert!(out.status.success(), "sha256sum {}", path.display());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .expect("a digest")
        .to_string()
}

/// The shared libraries (and the loader) `ldd` lists for `bin`.
fn shared_libraries(bin: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd").arg(bin).output().expect("running ldd");
    assert!(out.status.success(), "ldd {} failed", bin.display());
    let text = String::from_utf8_lossy(&out.stdout);
    let mut libs = Vec::new();
    for line in text.lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)", or the loader
        // "/lib64/ld-linux-x86-64.so.2 (0x...)"; "linux-vdso.so.1 (0x...)" has no file.
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(p));
        }
    }
    assert!(
        libs.iter()
            .any(|l| l.to_string_lossy().contains("ld-linux")),
        "ldd named no loader for {}:\n{text}",
        bin.display()
    );
    libs
}

/// The image that runs `gpushare` (built once per binary, shared by every test of
/// this build); its tag.
pub fn ensure_image() -> &'static str {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let bin = crate::gpushare_bin();
        let digest = sha256_of(bin);
        // The version names what else is in the image (bump it when that changes).
        let tag = format!("gpushare-test-host:v3-{}", &digest[..16]);
        if docker(&["image", "inspect", &tag]).status.success() {
            return tag;
        }
        build_image(bin, &tag);
        tag
    })
}

fn build_image(bin: &Path, tag: &str) {
    let root = tempfile::tempdir().expect("tempdir");
    let r = root.path();
    let put = |dest: &str, src: &Path| {
        let to = r.join(dest.trim_start_matches('/'));
        std::fs::create_dir_all(to.parent().expect("a parent")).expect("mkdir");
        // Copy the file's content (the library symlinks resolved).
        std::fs::copy(src, &to).unwrap_or_else(|e| panic!("copying {}: {e}", src.display()));
    };
    put(IMAGE_BIN, bin);
    for lib in shared_libraries(bin) {
        put(&lib.display().to_string(), &lib);
    }
    // etcd (Debian's etcd-server, on PATH or GPUSHARE_ETCD_BIN), for a lab on an
    // etcd store.
    let etcd = crate::etcd::etcd_binary();
    put(ETCD_BIN, &etcd);
    for lib in shared_libraries(&etcd) {
        put(&lib.display().to_string(), &lib);
    }
    let busybox = Path::new("/bin/busybox");
    assert!(
        busybox.exists(),
        "/bin/busybox is missing: install Debian's busybox-static (apt-get install -y busybox-static)"
    );
    put("/bin/busybox", busybox);
    // Every applet as a link in /bin (sh, sleep, ps, kill, cat, tr, grep...).
    let list = Command::new(busybox)
        .arg("--list")
        .output()
        .expect("busybox --list");
    for applet in String::from_utf8_lossy(&list.stdout).split_whitespace() {
        if applet != "busybox" {
            let _ = std::os::unix::fs::symlink("busybox", r.join("bin").join(applet));
        }
    }
    let mps = r.join(MPS_CONTROL.trim_start_matches('/'));
    std::fs::write(
        &mps,
        format!("#!/bin/sh\n# Stand-in for nvidia-cuda-mps-control (no GPU in tests): a healthy daemon,\n# or one that does not answer while {MPS_BROKEN} exists (Lab::set_mps_answering).\n[ -e {MPS_BROKEN} ] && exit 1\nread -r line\n[ \"$line\" = get_default_active_thread_percentage ] || exit 2\necho 100.0\n"),
    )
    .expect("stand-in MPS control");
    for d in [
        "tmp",
        "etc",
        "var/lib",
        "run/gpushare-mps/pipe",
        "proc",
        "sys",
        "dev",
    ] {
        std::fs::create_dir_all(r.join(d)).expect("mkdir");
    }
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&mps, std::fs::Permissions::from_mode(0o755))
            .expect("chmod the stand-in");
    }
    let tar = tempfile::NamedTempFile::new().expect("tarball");
    let tar_path = tar.path().display().to_string();
    let st = Command::new("tar")
        .arg("-C")
        .arg(r)
        .args(["-cf", &tar_path, "."])
        .status()
        .expect("tar");
    assert!(st.success(), "tar failed");
    docker_ok(&[
        "import",
        "--change",
        "ENV PATH=/usr/local/bin:/bin",
        &tar_path,
        tag,
    ]);
}

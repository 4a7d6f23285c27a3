//! TLS to etcd with client certificates (mutual TLS), certificates made by openssl.

use common::Anonymous as _;
use gpushare_testkit_engine::etcd as common;

use common::Etcd;
use gpushare_core::model::StoreState;
use gpushare_engine::store::{Store, StoreError};
use gpushare_store_etcd::{EtcdOptions, EtcdStore, OpenError};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!("this test needs the openssl command (apt-get install -y openssl): {e}")
        });
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by it.
fn make_certs(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=gpushare test CA",
    ]);
    openssl(dir, &ca);
    for (name, ext) in [
        (
            "server",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
        ),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ] {
        std::fs::write(dir.join(format!("{name}.ext")), ext).expect("ext");
        let mut req = vec!["req"];
        req.extend(ec);
        let (key, csr, subj) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("/CN={name}"),
        );
        req.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
        openssl(dir, &req);
        let (pem, ext) = (format!("{name}.pem"), format!("{name}.ext"));
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "2",
                "-extfile",
                &ext,
            ],
        );
    }
}

fn client_opts(dir: &Path) -> EtcdOptions {
    EtcdOptions {
        cacert: Some(dir.join("ca.pem")),
        cert: Some(dir.join("client.pem")),
        key: Some(dir.join("client.key")),
        ..EtcdOptions::default()
    }
}

#[tokio::test]
async fn mutual_tls_from_options_or_url_and_refused_without_a_client_certificate() {
    let certs = tempfile::tempdir().expect("tempdir");
    make_certs(certs.path());
    let p = |n: &str| -> PathBuf { certs.path().join(n) };
    let (server_pem, server_key, ca) = (p("server.pem"), p("server.key"), p("ca.pem"));
    let flags = [
        "--cert-file",
        server_pem.to_str().expect("utf-8"),
        "--key-file",
        server_key.to_str().expect("utf-8"),
        "--trusted-ca-file",
        ca.to_str().expect("utf-8"),
        "--client-cert-auth",
    ];
    let etcd = Etcd::start_full(&flags, "https", client_opts(certs.path())).await;

    let s = EtcdStore::open(&etcd.url("tls"), client_opts(certs.path()))
        .await
        .expect("mutual TLS");
    let st = StoreState {
        serial: 1,
        cluster: "tls".into(),
        ..StoreState::default()
    };
    s.commit(0, &st).await.expect("commit over TLS");

    // The same files named in the URL.
    let url = format!(
        "{}?cacert={}&cert={}&key={}",
        etcd.url("tls"),
        ca.display(),
        p("client.pem").display(),
        p("client.key").display()
    );
    let from_url = EtcdStore::open(&url, EtcdOptions::default())
        .await
        .expect("TLS from the URL");
    assert_eq!(from_url.load().await.expect("load").anon(), st);
    assert_eq!(
        from_url.location(),
        etcd.url("tls"),
        "the query is not shown"
    );

    // Without a client certificate the server refuses the connection.
    let no_cert = EtcdOptions {
        cacert: Some(ca.clone()),
        connect_timeout: Duration::from_secs(2),
        ..EtcdOptions::default()
    };
    match EtcdStore::open(&etcd.url("tls"), no_cert).await {
        Err(OpenError::Store(e @ StoreError::Unreachable { .. })) => {
            assert!(e.to_string().contains(&etcd.url("tls")), "{e}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // A CA file that is not there is named.
    let missing = EtcdOptions {
        cacert: Some(certs.path().join("nope.pem")),
        ..EtcdOptions::default()
    };
    let e = EtcdStore::open(&etcd.url("tls"), missing)
        .await
        .expect_err("missing CA");
    assert!(e.to_string().contains("nope.pem"), "{e}");
}

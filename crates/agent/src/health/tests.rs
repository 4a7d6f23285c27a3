//! The verdicts, from facts given by hand (what NVML would read: NVML itself is not
//! exercised here, there is no GPU; see `health/nvml.rs`).

use super::*;
use gpushare_core::model::GpuInfo;

fn gpus(n: u32) -> Vec<GpuInfo> {
    (0..n).map(|i| GpuInfo::new(i, "l4", 23034)).collect()
}

fn facts(index: u32) -> GpuFacts {
    GpuFacts {
        index,
        ..GpuFacts::default()
    }
}

fn status_of(v: &GpuVerdict, index: u32) -> CheckStatus {
    v.gpus
        .iter()
        .find(|(i, _, _)| *i == index)
        .map(|(_, s, _)| *s)
        .unwrap_or(CheckStatus::Initializing)
}

#[test]
fn clean_gpus_are_ok() {
    let v = judge_gpus(
        4,
        &GpuScan {
            gpus: gpus(4),
            facts: vec![facts(0)],
            ..Default::default()
        },
    );
    assert_eq!((v.status, v.reason), (CheckStatus::Ok, None));
    assert!(v.gpus.iter().all(|(_, s, _)| *s == CheckStatus::Ok));
    assert_eq!(v.gpus.len(), 4);
}

#[test]
fn a_missing_gpu_impairs_the_host_and_the_gpu() {
    let mut list = gpus(4);
    list.remove(2);
    let v = judge_gpus(
        4,
        &GpuScan {
            gpus: list,
            facts: vec![],
            ..Default::default()
        },
    );
    assert_eq!(v.status, CheckStatus::Impaired);
    let reason = v.reason.clone().unwrap_or_default();
    assert!(
        reason.contains("GPU 2 lost") && reason.contains("3 of 4"),
        "{reason}"
    );
    assert_eq!(status_of(&v, 2), CheckStatus::Impaired);
    assert_eq!(status_of(&v, 1), CheckStatus::Ok);
}

#[test]
fn nvml_lost_and_xid_79_impair_the_host() {
    let mut lost = facts(1);
    lost.lost = true;
    let v = judge_gpus(
        2,
        &GpuScan {
            gpus: gpus(1),
            facts: vec![lost],
            ..Default::default()
        },
    );
    assert_eq!(v.status, CheckStatus::Impaired);
    assert_eq!(status_of(&v, 1), CheckStatus::Impaired);

    let mut xid = facts(0);
    xid.xids = vec![79];
    let v = judge_gpus(
        2,
        &GpuScan {
            gpus: gpus(2),
            facts: vec![xid],
            ..Default::default()
        },
    );
    assert_eq!(v.status, CheckStatus::Impaired, "{v:?}");
    let gpu0 = v.gpus[0].2.clone().unwrap_or_default();
    assert!(
        gpu0.contains("Xid 79 (GPU has fallen off the bus)"),
        "{gpu0}"
    );
}

#[test]
fn other_faults_impair_only_their_gpu() {
    let cases: Vec<(GpuFacts, &str)> = vec![
        (
            GpuFacts {
                xids: vec![48],
                ..facts(1)
            },
            "Xid 48 (double-bit ECC error)",
        ),
        (
            GpuFacts {
                xids: vec![94, 94],
                ..facts(1)
            },
            "Xid 94 (contained ECC error)",
        ),
        (
            GpuFacts {
                ecc_uncorrectable: 2,
                ..facts(1)
            },
            "2 uncorrectable ECC error(s)",
        ),
        (
            GpuFacts {
                retired_pages_pending: true,
                ..facts(1)
            },
            "pages pending retirement",
        ),
        (
            GpuFacts {
                row_remap_failed: true,
                ..facts(1)
            },
            "row remapping failed",
        ),
    ];
    for (f, words) in cases {
        let v = judge_gpus(
            2,
            &GpuScan {
                gpus: gpus(2),
                facts: vec![f],
                ..Default::default()
            },
        );
        assert_eq!(v.status, CheckStatus::Ok, "{v:?}");
        assert!(
            v.reason
                .as_deref()
                .unwrap_or_default()
                .contains("GPU 1 impaired"),
            "{v:?}"
        );
        assert_eq!(status_of(&v, 0), CheckStatus::Ok);
        assert_eq!(status_of(&v, 1), CheckStatus::Impaired);
        let why = v.gpus[1].2.clone().unwrap_or_default();
        assert!(why.contains(words), "{why} lacks {words}");
        assert!(!why.contains("Xid 94, Xid 94"), "{why}");
    }
}

#[test]
fn application_xids_are_not_critical() {
    for code in [13, 31, 43, 45, 68, 109] {
        assert_eq!(critical_xid(code), None, "Xid {code}");
        let v = judge_gpus(
            1,
            &GpuScan {
                gpus: gpus(1),
                facts: vec![GpuFacts {
                    xids: vec![code],
                    ..facts(0)
                }],
                ..Default::default()
            },
        );
        assert_eq!(status_of(&v, 0), CheckStatus::Ok, "Xid {code}");
    }
    for (code, _) in CRITICAL_XIDS {
        assert!(critical_xid(code).is_some());
    }
}

#[test]
fn the_book_keeps_since_and_falls_back_to_the_most_gpus_seen() {
    let mut b = HealthBook::default();
    let scan = GpuScan {
        gpus: gpus(2),
        ..Default::default()
    };
    b.record_gpus(None, Ok(&scan), 10);
    assert_eq!(b.status(CheckKind::Gpus), Some(CheckStatus::Ok));
    // One GPU gone: the instance type is unknown, the two seen before are expected.
    let scan = GpuScan {
        gpus: gpus(1),
        ..Default::default()
    };
    b.record_gpus(None, Ok(&scan), 20);
    assert_eq!(b.status(CheckKind::Gpus), Some(CheckStatus::Impaired));
    b.record_gpus(None, Ok(&scan), 30);
    let c = b.health.check(CheckKind::Gpus).cloned();
    assert_eq!(c.map(|c| c.since), Some(20));
    assert_eq!(
        b.health.gpu(1).map(|g| (g.status, g.since)),
        Some((CheckStatus::Impaired, 20))
    );
    // A resumed book remembers the count.
    let mut again = HealthBook::resume(&b.health);
    again.record_gpus(None, Ok(&scan), 40);
    assert_eq!(again.status(CheckKind::Gpus), Some(CheckStatus::Impaired));
    // NVML unreadable: insufficient data.
    again.record_gpus(Some(2), Err("NVML is not available"), 50);
    assert_eq!(
        again.status(CheckKind::Gpus),
        Some(CheckStatus::InsufficientData)
    );
}

#[tokio::test]
async fn the_deep_check_runs_a_real_program_and_reads_its_exit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = |name: &str, body: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("write");
        let mut perm = std::fs::metadata(&p).expect("meta").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
        std::fs::set_permissions(&p, perm).expect("chmod");
        p
    };
    // Stand-ins for `dcgmi diag -r 1` (DCGM needs a GPU).
    let pass = DeepCheck {
        program: script("pass", "exit 0"),
        ..DeepCheck::default()
    };
    assert_eq!(pass.run().await.0, CheckStatus::Ok);
    let fail = DeepCheck {
        program: script("fail", "echo 'Memory test: Fail - GPU 0'; exit 226"),
        ..DeepCheck::default()
    };
    let (status, reason) = fail.run().await;
    assert_eq!(status, CheckStatus::Impaired);
    assert!(reason.unwrap_or_default().contains("Memory test: Fail"));
    let slow = DeepCheck {
        program: script("slow", "sleep 30"),
        timeout: std::time::Duration::from_millis(300),
        ..DeepCheck::default()
    };
    let (status, reason) = slow.run().await;
    assert_eq!(status, CheckStatus::Impaired);
    assert!(reason.unwrap_or_default().contains("did not finish"));
    let missing = DeepCheck {
        program: dir.path().join("no-dcgmi"),
        ..DeepCheck::default()
    };
    assert_eq!(missing.run().await.0, CheckStatus::InsufficientData);
}

//! `gpushare evaluate` through the real binary (issue 49, item 5): nvidia-smi samples
//! of three machines (tests/fixtures/evaluate/fleet: two with L4s, one with A10Gs;
//! compute-apps CSV with and without timestamps and units, --query-gpu CSV, three
//! shapes of pmon) become a proposed fleet and its saving (golden), and `--write`
//! gives configuration that `gpushare validate` accepts and that `gpushare plan`
//! prices as evaluate said. Bad samples are refused with file:line and write nothing.

use gpushare_tests::{gp, workspace_root, Run};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    workspace_root().join("tests/fixtures/evaluate")
}

/// `evaluate ARGS` in `cwd`.
fn evaluate(cwd: &Path, args: &[&str]) -> Run {
    let mut all = vec!["evaluate"];
    all.extend_from_slice(args);
    gp(cwd, &all).run()
}

/// The samples copied into a fresh directory, to spoil one file.
fn copy_fleet() -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tempdir");
    for m in ["gpu-a", "gpu-b", "gpu-c"] {
        let from = fixtures().join("fleet").join(m);
        let to = d.path().join("fleet").join(m);
        std::fs::create_dir_all(&to).expect("mkdir");
        for e in std::fs::read_dir(&from).expect("read fixture dir") {
            let p = e.expect("entry").path();
            std::fs::copy(&p, to.join(p.file_name().expect("name"))).expect("copy");
        }
    }
    std::fs::copy(fixtures().join("mapping.txt"), d.path().join("mapping.txt")).expect("copy");
    d
}

/// The first `$X.YZ` after `marker` in `text`.
fn dollars_after(text: &str, marker: &str) -> String {
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker:?} in:\n{text}"));
    let rest = &text[at + marker.len()..];
    let start = rest.find('$').expect("a dollar figure") + 1;
    rest[start..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect()
}

#[test]
fn three_machines_golden_proposal_and_saving() {
    let r = evaluate(&fixtures(), &["fleet", "--mapping", "mapping.txt"]);
    r.expect_code(0);
    expectorate::assert_contents("golden/evaluate_fleet.txt", &r.stdout);
}

#[test]
fn written_configuration_validates_and_plans_at_the_printed_cost() {
    let d = tempfile::tempdir().expect("tempdir");
    let out = d.path().join("proposed");
    let fleet = fixtures().join("fleet");
    let mapping = fixtures().join("mapping.txt");
    let r = evaluate(
        d.path(),
        &[
            &fleet.display().to_string(),
            "--mapping",
            &mapping.display().to_string(),
            "--write",
            &out.display().to_string(),
            "--cluster",
            "trial",
        ],
    );
    r.expect_code(0);
    let text = std::fs::read_to_string(out.join("evaluate.hcl")).expect("written");
    assert!(text.contains("cluster = \"trial\""), "{text}");
    gp(&out, &["validate"]).run().expect_code(0);
    let plan = gp(&out, &["plan"]).run();
    plan.expect_code(0);
    let printed = dollars_after(&r.stdout, "With gpushare:");
    let planned = dollars_after(&plan.stdout, ", after ");
    assert_eq!(
        printed, planned,
        "evaluate said ${printed} per hour, gpushare plan says ${planned}:\n{}",
        plan.stdout
    );
    assert!(plan.stdout.contains("service.finetune"), "{}", plan.stdout);
    // A second --write does not replace the file without --force.
    let again = evaluate(
        d.path(),
        &[
            &fleet.display().to_string(),
            "--write",
            &out.display().to_string(),
        ],
    );
    again.expect_code(1);
    assert!(again.stderr.contains("exists"), "{}", again.stderr);
    assert_eq!(
        std::fs::read_to_string(out.join("evaluate.hcl")).expect("kept"),
        text
    );
}

#[test]
fn without_a_mapping_processes_group_by_name() {
    let r = evaluate(&fixtures(), &["fleet"]);
    r.expect_code(0);
    for w in [
        "text-embeddings-router:",
        "python3:",
        "python:",
        "tritonserver:",
        "ollama_llama_server:",
    ] {
        assert!(r.stdout.contains(w), "no workload {w}:\n{}", r.stdout);
    }
}

#[test]
fn malformed_csv_names_file_and_line_and_writes_nothing() {
    let d = copy_fleet();
    let csv = d.path().join("fleet/gpu-a/compute-apps.csv");
    let text = std::fs::read_to_string(&csv).expect("read");
    let mut lines: Vec<&str> = text.lines().collect();
    lines[4] = "2025/03/04 10:00:00.421, GPU-5f1c2e0a, 22310, tritonserver, lots MiB";
    std::fs::write(&csv, lines.join("\n")).expect("write");
    let out = d.path().join("out");
    let r = evaluate(
        d.path(),
        &[
            "fleet",
            "--mapping",
            "mapping.txt",
            "--write",
            &out.display().to_string(),
        ],
    );
    r.expect_code(1);
    assert!(
        r.stderr.contains("gpu-a/compute-apps.csv:5: ") && r.stderr.contains("\"lots MiB\""),
        "{}",
        r.stderr
    );
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    assert!(!out.exists(), "an error wrote {}", out.display());
}

#[test]
fn unknown_gpu_name_is_a_clear_error() {
    let d = copy_fleet();
    let gpus = d.path().join("fleet/gpu-c/gpus.csv");
    std::fs::write(
        &gpus,
        "index, uuid, name, memory.total [MiB]\n0, GPU-x, NVIDIA GeForce RTX 4090, 24564 MiB\n",
    )
    .expect("write");
    let r = evaluate(d.path(), &["fleet"]);
    r.expect_code(1);
    assert!(
        r.stderr
            .contains("gpu-c/gpus.csv:2: unknown GPU \"NVIDIA GeForce RTX 4090\"")
            && r.stderr.contains("l4"),
        "{}",
        r.stderr
    );
    let r = evaluate(d.path(), &["fleet", "--gpu-model", "Quadro P4000"]);
    r.expect_code(1);
    assert!(
        r.stderr.contains("--gpu-model \"Quadro P4000\""),
        "{}",
        r.stderr
    );
}

#[test]
fn a_machine_without_its_gpu_list_needs_gpu_model() {
    let d = copy_fleet();
    std::fs::remove_file(d.path().join("fleet/gpu-c/gpus.csv")).expect("rm");
    let r = evaluate(d.path(), &["fleet", "--mapping", "mapping.txt"]);
    r.expect_code(1);
    assert!(
        r.stderr.contains("machine gpu-c: no GPU model"),
        "{}",
        r.stderr
    );
    let r = evaluate(
        d.path(),
        &[
            "fleet",
            "--mapping",
            "mapping.txt",
            "--gpu-model",
            "NVIDIA L4",
        ],
    );
    r.expect_code(0);
    assert!(
        r.stdout
            .contains("embedder: 3 process(es) at once on gpu-a, gpu-c (l4)"),
        "{}",
        r.stdout
    );
}

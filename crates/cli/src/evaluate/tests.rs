//! The readers on real-shaped nvidia-smi output.

use super::samples::{read_file, Machine};

#[test]
fn compute_apps_with_units_and_repeated_headers_are_two_samples() {
    let mut m = Machine::default();
    let text = "pid, process_name, used_gpu_memory [MiB]\n\
                101, /usr/bin/python3, 3120 MiB\n\
                pid, process_name, used_gpu_memory [MiB]\n\
                101, /usr/bin/python3, 3200 MiB\n\
                102, tritonserver, [N/A]\n";
    read_file(&mut m, "a.csv", text).expect("reads");
    assert_eq!(m.samples, 2);
    assert_eq!(m.procs.len(), 3);
    assert_eq!(m.procs[1].used_mib, Some(3200));
    assert_eq!(m.procs[2].used_mib, None);
    assert_eq!((m.procs[0].sample, m.procs[2].sample), (0, 1));
}

#[test]
fn compute_apps_nounits_with_timestamps_group_by_second() {
    let mut m = Machine::default();
    let text = "timestamp, gpu_uuid, pid, process_name, used_gpu_memory\n\
                2025/03/04 10:00:00.101, GPU-1, 7, a, 100\n\
                2025/03/04 10:00:00.180, GPU-1, 8, b, 200\n\
                2025/03/04 10:00:15.100, GPU-1, 7, a, 150\n";
    read_file(&mut m, "a.csv", text).expect("reads");
    assert_eq!(m.samples, 2);
    assert_eq!(m.procs[0].gpu_uuid.as_deref(), Some("GPU-1"));
    assert_eq!(m.procs[2].used_mib, Some(150));
}

#[test]
fn a_process_name_with_a_comma_stays_whole() {
    let mut m = Machine::default();
    read_file(
        &mut m,
        "a.csv",
        "pid, process_name, used_memory [MiB]\n9, my,app, 10 MiB\n",
    )
    .expect("reads");
    assert_eq!(m.procs[0].process_name, "my,app");
}

#[test]
fn malformed_rows_name_their_file_and_line() {
    let mut m = Machine::default();
    let e = read_file(
        &mut m,
        "a.csv",
        "pid, process_name, used_memory [MiB]\n9, app, 10 MiB\n\nx9, app, 10 MiB\n",
    )
    .expect_err("refused");
    assert!(e.to_string().starts_with("a.csv:4: pid \"x9\""), "{e}");
    let e = read_file(
        &mut m,
        "b.csv",
        "pid, process_name, used_memory [MiB]\n9, app, lots\n",
    )
    .expect_err("refused");
    assert!(e.to_string().starts_with("b.csv:2: "), "{e}");
    let e = read_file(&mut m, "c.txt", "hello\n").expect_err("refused");
    assert!(
        e.to_string().starts_with("c.txt:1: not nvidia-smi output"),
        "{e}"
    );
}

#[test]
fn pmon_reads_its_header_and_skips_dashes() {
    let mut m = Machine::default();
    let text = "# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command\n\
                # Idx           #    C/G      %      %      %      %      %      %    name\n\
                    0       4242     C     37     21      -      -      -      -    python3\n\
                    0       4243     C      -      -      -      -      -      -    python3\n\
                    1          -     -      -      -      -      -      -      -    -\n";
    read_file(&mut m, "pmon.txt", text).expect("reads");
    assert_eq!(m.pmon.len(), 2);
    assert_eq!(m.pmon[0].sm, Some(37));
    assert_eq!(m.pmon[1].sm, None);
}

#[test]
fn query_gpu_lists_the_gpus() {
    let mut m = Machine::default();
    let text = "index, uuid, name, memory.total [MiB]\n0, GPU-aa, NVIDIA L4, 23034 MiB\n";
    read_file(&mut m, "gpus.csv", text).expect("reads");
    assert_eq!(m.gpus.len(), 1);
    assert_eq!(m.gpus[0].name, "NVIDIA L4");
    assert_eq!(m.gpus[0].index, Some(0));
}

//! `gpushare reconcile`: one level-triggered pass with --once, and the real loop
//! (following a configuration edit, stopping cleanly on SIGINT).

use gpushare_tests::{arr, example, gp, replace_config, show_json};

#[test]
fn one_pass_converges_and_the_next_finds_nothing_to_do() {
    let d = example("spread");
    let r = gp(d.path(), &["reconcile", "--once"]).run();
    r.expect_code(0);
    assert!(r.stdout.contains("applied"), "{}", r.stdout);
    assert_eq!(arr(&show_json(d.path()), "tasks").len(), 5);
    let r = gp(d.path(), &["reconcile", "--once"]).run();
    r.expect_code(0);
    assert!(r.stdout.contains("no changes"), "{}", r.stdout);
}

#[test]
fn a_failed_pass_with_once_exits_1() {
    let d = example("spread");
    replace_config(d.path(), "service \"x\" {\n");
    gp(d.path(), &["reconcile", "--once"]).run().expect_code(1);
}

/// Polls `show --json` until `want` tasks run, for at most 60 s (a bound, not a timing assertion).
fn wait_for_running_tasks(dir: &std::path::Path, want: usize) -> bool {
    wait_for_tasks(dir, want, true)
}

/// Polls `show --json` until it holds `want` tasks (all running, if `running`), for
/// at most 60 s. (In-process agents start placed tasks at the next pass's observe.)
fn wait_for_tasks(dir: &std::path::Path, want: usize, running: bool) -> bool {
    for _ in 0..300 {
        let r = gp(dir, &["show", "--json"]).run();
        if r.code == 0 {
            let v = r.json();
            let ok = arr(&v, "tasks")
                .iter()
                .filter(|t| !running || t["state"] == "running")
                .count();
            if ok == want && arr(&v, "tasks").len() == want {
                return true;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    false
}

#[test]
fn the_loop_picks_up_configuration_changes_and_stops_on_interrupt() {
    let d = example("spread");
    let child = gp(d.path(), &["reconcile", "--interval", "1"]).spawn();
    let converged = wait_for_running_tasks(d.path(), 5);
    let main = d.path().join("main.hcl");
    let text = std::fs::read_to_string(&main).expect("read");
    let edited = text.replace("desired_count      = 3", "desired_count      = 4");
    assert_ne!(edited, text);
    std::fs::write(&main, edited).expect("write");
    let followed = converged && wait_for_running_tasks(d.path(), 6);
    let sent = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    let out = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(converged, "the loop never converged:\n{stdout}\n{stderr}");
    assert!(
        followed,
        "the loop did not follow the edit:\n{stdout}\n{stderr}"
    );
    assert!(sent.success());
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("interrupted"), "{stdout}");
    assert!(stdout.contains("applied"), "{stdout}");
}

/// With an interval of an hour, a saved configuration file still starts a pass: the
/// loop watches its directory (inotify), so the edit is followed within seconds.
#[test]
fn a_saved_file_starts_a_pass_without_waiting_for_the_interval() {
    let d = example("spread");
    let child = gp(d.path(), &["reconcile", "--interval", "3600"]).spawn();
    let converged = wait_for_tasks(d.path(), 5, false);
    let main = d.path().join("main.hcl");
    let text = std::fs::read_to_string(&main).expect("read");
    let edited = text.replace("desired_count      = 3", "desired_count      = 4");
    assert_ne!(edited, text);
    std::fs::write(&main, edited).expect("write");
    let followed = converged && wait_for_tasks(d.path(), 6, false);
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let out = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(converged, "the loop never converged:\n{stdout}");
    assert!(
        followed,
        "an hour-long interval, and the edit was not followed:\n{stdout}"
    );
    assert!(stdout.contains("reconcile pass 2"), "{stdout}");
}

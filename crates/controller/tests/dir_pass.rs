//! The controller library driven without the binary: a directory source holding the
//! quickstart example, the embedded file store and the local cloud (the backends the
//! settings name), one applying pass, then drift-only passes, then a pass that
//! corrects drift; each checked against the state and the status record the store
//! holds afterwards.

use gpushare_config::LoadOptions;
use gpushare_controller::{
    Controller, Event, Next, Observer, OpenBackends, PassError, PassReport, Policy, Source, Stopped,
};
use gpushare_engine::store::edit::{edit, Edited, JournalRule};
use gpushare_engine::store::{PassOutcomeKind, StatusRecord, Store};
use std::convert::Infallible;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Records the drift the controller reports and the pass numbers it finished; sets
/// `cancel` after `stop_after` passes (a continuous loop's way out).
#[derive(Default)]
struct Recorder {
    drift: Mutex<Vec<String>>,
    finished: Mutex<Vec<(u64, Next)>>,
    stop_after: Option<(u64, Arc<AtomicBool>)>,
}

impl Observer for Recorder {
    fn event(&self, event: Event<'_>) {
        match event {
            Event::Drift { steps } => self
                .drift
                .lock()
                .expect("drift")
                .extend(steps.iter().cloned()),
            Event::Finished(f) => {
                self.finished
                    .lock()
                    .expect("finished")
                    .push((f.pass, f.next));
                if let Some((n, cancel)) = &self.stop_after {
                    if f.pass >= *n {
                        cancel.store(true, Ordering::SeqCst);
                    }
                }
            }
            _ => {}
        }
    }
}

fn quickstart() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/quickstart/main.hcl");
    std::fs::copy(&example, dir.path().join("main.hcl")).expect("copy the quickstart example");
    dir
}

fn load() -> LoadOptions {
    LoadOptions {
        auto_var_files: true,
        ..LoadOptions::default()
    }
}

fn policy(drift_only: bool) -> Policy {
    Policy {
        once: true,
        drift_only,
        ..Policy::every(Duration::from_secs(1))
    }
}

/// One pass of a `once` policy over `dir`; its report, and what the observer saw.
async fn once(dir: &Path, drift_only: bool) -> (Result<PassReport, PassError>, Arc<Recorder>) {
    let recorder = Arc::new(Recorder::default());
    let open = Arc::new(OpenBackends {
        holder: "controller test".into(),
    });
    let stopped = Controller::new(Source::dir(dir, load()), open, policy(drift_only))
        .with_observer(recorder.clone())
        .run(Arc::new(AtomicBool::new(false)))
        .await;
    let report = stopped.map(|s| match s {
        Stopped::Once(r) => *r,
        Stopped::Interrupted => panic!("a once pass was interrupted"),
    });
    (report, recorder)
}

async fn store(dir: &Path) -> Arc<dyn Store> {
    gpushare_backends::open_store(None, dir)
        .await
        .expect("the file store")
        .0
}

async fn status(store: &dyn Store) -> StatusRecord {
    store
        .status()
        .await
        .expect("reading the status")
        .expect("a status record")
}

#[tokio::test]
async fn a_directory_pass_applies_then_drift_only_passes_report_and_a_pass_corrects_drift() {
    let dir = quickstart();
    let (report, _) = once(dir.path(), false).await;
    let report = report.expect("the first pass");
    assert_eq!(report.outcome, PassOutcomeKind::Applied, "{report:?}");
    assert!(report.source_error.is_none() && report.commit.is_none());
    let digest = report.digest.clone().expect("a digest");

    let store = store(dir.path()).await;
    let state = store.load().await.expect("the state");
    assert_eq!(state.cluster, "quickstart");
    // Three services: 6 embedders, 4 rerankers and 2 language models in the example.
    assert_eq!(state.tasks.len(), 12, "{:?}", state.tasks.keys());
    assert!(
        !state.hosts.is_empty()
            && state
                .tasks
                .values()
                .all(|t| state.hosts.contains_key(&t.host))
    );
    assert_eq!(state.tasks.len(), report.fleet.tasks.len());
    let s = status(&*store).await;
    assert_eq!(s.pass, 1);
    assert_eq!(s.outcome, PassOutcomeKind::Applied);
    assert_eq!(s.source, dir.path().display().to_string());
    assert_eq!(s.config_digest.as_deref(), Some(digest.as_str()));
    assert_eq!(s.converged_digest.as_deref(), Some(digest.as_str()));
    assert!(
        s.holder.starts_with("gpushare reconcile (pid"),
        "{}",
        s.holder
    );
    assert!(s.error.is_none() && s.drift_corrections == 0);
    assert!(s.health.is_empty(), "no host is impaired: {:?}", s.health);

    // Nothing changed: a drift-only pass finds nothing, and says so in the record.
    let (report, seen) = once(dir.path(), true).await;
    assert_eq!(
        report.expect("drift-only").outcome,
        PassOutcomeKind::NoChanges
    );
    assert!(seen.drift.lock().expect("drift").is_empty());
    assert_eq!(status(&*store).await.outcome, PassOutcomeKind::NoChanges);

    // A task disappears from the state behind the controller's back: drift. The
    // drift-only pass reports it and leaves the state as it is.
    let gone = state.tasks.keys().next().expect("a task").clone();
    let removed = gone.clone();
    edit(
        &*store,
        "test",
        Duration::from_secs(5),
        JournalRule::RefuseAtOnce,
        async move |s| {
            s.tasks.remove(&removed);
            Ok::<_, Infallible>(Edited::changed(()))
        },
    )
    .await
    .expect("removing a task");
    let (report, seen) = once(dir.path(), true).await;
    let report = report.expect("drift-only");
    assert_eq!(report.outcome, PassOutcomeKind::DriftDetected, "{report:?}");
    assert!(
        !seen.drift.lock().expect("drift").is_empty(),
        "the plan's steps are told"
    );
    let after = store.load().await.expect("the state");
    assert_eq!(after.tasks.len(), 11, "drift-only applies nothing");
    let s = status(&*store).await;
    assert_eq!(s.outcome, PassOutcomeKind::DriftDetected);
    assert_eq!(s.converged_digest.as_deref(), Some(digest.as_str()));

    // An applying pass on the same configuration corrects the drift and counts it.
    let (report, seen) = once(dir.path(), false).await;
    assert_eq!(
        report.expect("apply").outcome,
        PassOutcomeKind::DriftCorrected
    );
    assert!(!seen.drift.lock().expect("drift").is_empty());
    assert_eq!(store.load().await.expect("the state").tasks.len(), 12);
    let s = status(&*store).await;
    assert_eq!(s.outcome, PassOutcomeKind::DriftCorrected);
    assert_eq!(s.drift_corrections, 1);
}

#[tokio::test]
async fn an_invalid_configuration_is_a_permanent_error_and_a_continuous_loop_stops_on_cancel() {
    let dir = quickstart();
    std::fs::write(
        dir.path().join("broken.hcl"),
        "service \"x\" {\n  desired_count = \n}\n",
    )
    .expect("write");
    let (report, seen) = once(dir.path(), false).await;
    let e = report.expect_err("an invalid configuration fails the pass");
    assert!(matches!(e, PassError::Config(_)), "{e:?}");
    assert!(!e.is_transient() && !e.broken());
    assert_eq!(
        *seen.finished.lock().expect("finished"),
        vec![(1, Next::Once)]
    );

    // Fixed: a continuous loop applies, waits the interval, finds nothing to do the
    // next time, and stops when cancelled.
    std::fs::remove_file(dir.path().join("broken.hcl")).expect("fix");
    let cancel = Arc::new(AtomicBool::new(false));
    let recorder = Arc::new(Recorder {
        stop_after: Some((2, cancel.clone())),
        ..Recorder::default()
    });
    let open = Arc::new(OpenBackends {
        holder: "controller test".into(),
    });
    let stopped = Controller::new(
        Source::dir(dir.path(), load()),
        open,
        Policy::every(Duration::from_millis(100)),
    )
    .with_observer(recorder.clone())
    .run(cancel)
    .await
    .expect("the loop");
    assert!(matches!(stopped, Stopped::Interrupted), "{stopped:?}");
    let finished = recorder.finished.lock().expect("finished").clone();
    assert_eq!(
        finished,
        vec![
            (1, Next::Wait(Duration::from_millis(100))),
            (2, Next::Wait(Duration::from_millis(100)))
        ]
    );
    let s = status(&*store(dir.path()).await).await;
    assert_eq!((s.pass, s.outcome), (2, PassOutcomeKind::NoChanges));
}

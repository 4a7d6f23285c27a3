//! The state edit transaction outside apply (`store::edit`), on the file store: an
//! edit commits with serial + 1, one that changes nothing writes nothing, a waiting
//! apply journal refuses as the rule says, and the lock is free again after an edit
//! that failed.

use gpushare_engine::store::edit::{edit, EditError, Edited, JournalRule};
use gpushare_engine::store::{FileStore, Journal, Store};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
#[error("the edit refused")]
struct Refused;

const WAIT: Duration = Duration::from_millis(200);

#[tokio::test]
async fn an_edit_commits_with_the_next_serial_and_an_unchanged_one_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = FileStore::open(dir.path()).expect("open");
    let before = s.load().await.expect("load").serial;
    let out = edit(&s, "test", WAIT, JournalRule::RefuseAtOnce, async |st| {
        st.cluster = "edited".into();
        Ok::<_, Refused>(Edited::changed(7))
    })
    .await
    .expect("edit");
    assert_eq!(out, 7);
    let after = s.load().await.expect("load");
    assert_eq!(
        (after.serial, after.cluster.as_str()),
        (before + 1, "edited")
    );

    edit(&s, "test", WAIT, JournalRule::RefuseChanges, async |st| {
        st.cluster = "not written".into();
        Ok::<_, Refused>(Edited::unchanged(()))
    })
    .await
    .expect("edit");
    let again = s.load().await.expect("load");
    assert_eq!(
        (again.serial, again.cluster.as_str()),
        (before + 1, "edited")
    );

    let e = edit(&s, "test", WAIT, JournalRule::RefuseAtOnce, async |st| {
        st.cluster = "refused".into();
        Err::<Edited<()>, _>(Refused)
    })
    .await
    .expect_err("refused");
    assert!(matches!(e, EditError::Edit(Refused)), "{e:?}");
    assert_eq!(s.load().await.expect("load").cluster, "edited");
    s.lock("after", WAIT)
        .await
        .expect("the lock is free after a failed edit")
        .release()
        .await
        .expect("release");
}

#[tokio::test]
async fn a_waiting_journal_refuses_at_once_or_only_a_change() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = FileStore::open(dir.path()).expect("open");
    s.write_journal(&Journal {
        plan: Default::default(),
        done: 0,
        holder: "gpushare apply (interrupted)".into(),
    })
    .await
    .expect("journal");
    let mut ran = false;
    let e = edit(&s, "test", WAIT, JournalRule::RefuseAtOnce, async |_| {
        ran = true;
        Ok::<_, Refused>(Edited::changed(()))
    })
    .await
    .expect_err("a journal waits");
    assert!(matches!(e, EditError::JournalWaits), "{e:?}");
    assert!(!ran, "refused before the edit ran");
    assert!(
        e.to_string().contains("finish it first (gpushare apply)"),
        "{e}"
    );

    let seen = edit(&s, "test", WAIT, JournalRule::RefuseChanges, async |st| {
        Ok::<_, Refused>(Edited::unchanged(st.serial))
    })
    .await
    .expect("an unchanged edit is answered");
    let e = edit(&s, "test", WAIT, JournalRule::RefuseChanges, async |st| {
        st.cluster = "changed".into();
        Ok::<_, Refused>(Edited::changed(()))
    })
    .await
    .expect_err("a change is refused");
    assert!(matches!(e, EditError::JournalWaits), "{e:?}");
    assert_eq!(
        s.load().await.expect("load").serial,
        seen,
        "nothing written"
    );
}

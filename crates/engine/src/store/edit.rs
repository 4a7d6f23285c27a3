//! The state edit transaction outside apply ([`edit`]): take the store's lock, refuse
//! while an interrupted apply's journal waits (its plan may name what is edited),
//! load, edit, commit with serial + 1, release. `gpushare state` commands, the
//! agent API's registrations and anything else that changes the recorded state by
//! hand go through it.

use super::{Store, StoreError};
use gpushare_core::model::StoreState;
use std::time::Duration;

/// When a waiting apply journal refuses an edit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalRule {
    /// Before the edit runs (for edits that act on the store themselves, such as
    /// `state push` handing over the store's identity).
    RefuseAtOnce,
    /// Only an edit that changes something (an agent joining again with what is
    /// recorded already is answered while a journal waits).
    RefuseChanges,
}

/// What an edit returns: its value, and whether it changed the state (nothing is
/// written when it did not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edited<T> {
    pub value: T,
    pub changed: bool,
}

impl<T> Edited<T> {
    pub fn changed(value: T) -> Edited<T> {
        Edited {
            value,
            changed: true,
        }
    }
    pub fn unchanged(value: T) -> Edited<T> {
        Edited {
            value,
            changed: false,
        }
    }
}

/// Why an edit did not commit: a step of the transaction (with the store's error),
/// or the edit's own error `E`.
#[derive(Debug, thiserror::Error)]
pub enum EditError<E: std::error::Error + 'static> {
    #[error("taking the state lock")]
    Lock(#[source] StoreError),
    #[error("reading the apply journal")]
    ReadJournal(#[source] StoreError),
    #[error("an interrupted apply left a journal: finish it first (gpushare apply), then edit the state")]
    JournalWaits,
    #[error("reading the state")]
    Load(#[source] StoreError),
    #[error("writing the state")]
    Commit(#[source] StoreError),
    #[error("releasing the state lock")]
    Release(#[source] StoreError),
    #[error(transparent)]
    Edit(E),
}

/// Run `edit` on the state under `store`'s lock (held as `holder`, waited for up to
/// `lock_wait`), refusing while a journal waits as `rule` says, and commit what it
/// changed with serial + 1. The lock is released whatever happens; the edit's error
/// comes first, then the release's.
pub async fn edit<T, E: std::error::Error + 'static>(
    store: &dyn Store,
    holder: &str,
    lock_wait: Duration,
    rule: JournalRule,
    edit: impl AsyncFnOnce(&mut StoreState) -> Result<Edited<T>, E>,
) -> Result<T, EditError<E>> {
    let guard = store
        .lock(holder, lock_wait)
        .await
        .map_err(EditError::Lock)?;
    let journal_waits = async || -> Result<(), EditError<E>> {
        match store.read_journal().await {
            Ok(None) => Ok(()),
            Ok(Some(_)) => Err(EditError::JournalWaits),
            Err(e) => Err(EditError::ReadJournal(e)),
        }
    };
    let out = async {
        if rule == JournalRule::RefuseAtOnce {
            journal_waits().await?;
        }
        let mut state = store.load().await.map_err(EditError::Load)?;
        let serial = state.serial;
        let edited = edit(&mut state).await.map_err(EditError::Edit)?;
        if edited.changed {
            if rule == JournalRule::RefuseChanges {
                journal_waits().await?;
            }
            state.serial = serial + 1;
            store
                .commit(serial, &state)
                .await
                .map_err(EditError::Commit)?;
        }
        Ok(edited.value)
    }
    .await;
    let released = guard.release().await.map_err(EditError::Release);
    let out = out?;
    released?;
    Ok(out)
}

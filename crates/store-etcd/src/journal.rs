//! The apply journal: `journal/head` names the journal and its parts, the plan is
//! written in chunks under `journal/plan/<id>/`, and `journal/done` holds the position,
//! written alone (guarded by the head's revision) as the apply advances.

use crate::client::{Compare, CompareOp, DeleteRangeRequest, PutRequest, RangeRequest, TxnRequest};
use crate::keys::{JOURNAL, JOURNAL_DONE, JOURNAL_HEAD, JOURNAL_PLAN};
use crate::{unique_token, EtcdStore};
use gpushare_core::util::lock;
use gpushare_engine::store::{Journal, StoreError};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct JournalHead {
    id: String,
    chunks: usize,
    bytes: usize,
    /// Which apply the journal is (so a position is only ever written to its own).
    #[serde(default)]
    holder: String,
    #[serde(default)]
    base_serial: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct JournalDone {
    id: String,
    done: usize,
}

impl EtcdStore {
    /// [`Store::read_journal`](gpushare_engine::store::Store::read_journal).
    pub(crate) async fn get_journal(&self) -> Result<Option<Journal>, StoreError> {
        let txn = TxnRequest::when(vec![]).and_then(vec![
            RangeRequest::new(self.key(JOURNAL_HEAD)).into(),
            RangeRequest::new(self.key(JOURNAL_DONE)).into(),
        ]);
        let resp = self.txn(|| "reading the journal".into(), txn).await?;
        let mut got = resp
            .ranges()
            .map(|g| g.kvs.first().map(|kv| (kv.value.clone(), kv.mod_revision)));
        let (head, done) = (got.next().flatten(), got.next().flatten());
        let Some((head, head_rev)) = head else {
            return Ok(None);
        };
        let done = done.map(|(v, _)| v);
        let head: JournalHead =
            serde_json::from_slice(&head).map_err(|e| self.corrupt(JOURNAL_HEAD, e))?;
        let plan_prefix = format!("{JOURNAL_PLAN}{}/", head.id);
        let (_, kvs) = self.range(&plan_prefix, 0).await?;
        if kvs.len() != head.chunks {
            return Err(self.corrupt_msg(
                &plan_prefix,
                format!(
                    "{} of the journal's {} parts are there",
                    kvs.len(),
                    head.chunks
                ),
            ));
        }
        let mut bytes = Vec::with_capacity(head.bytes);
        for kv in &kvs {
            bytes.extend_from_slice(&kv.value);
        }
        let mut journal: Journal =
            serde_json::from_slice(&bytes).map_err(|e| self.corrupt(&plan_prefix, e))?;
        if let Some(done) = done {
            let done: JournalDone =
                serde_json::from_slice(&done).map_err(|e| self.corrupt(JOURNAL_DONE, e))?;
            if done.id == head.id {
                journal.done = journal.done.max(done.done);
            }
        }
        *lock(&self.inner.journal_id) = Some((head.id, head_rev));
        Ok(Some(journal))
    }

    /// [`Store::write_journal`](gpushare_engine::store::Store::write_journal): the plan in parts,
    /// then the head and position in one transaction that deletes the journal it replaces.
    pub(crate) async fn put_journal(&self, journal: &Journal) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(journal).map_err(|e| self.corrupt(JOURNAL_HEAD, e))?;
        let old = match self.get_one(JOURNAL_HEAD).await? {
            Some(kv) => serde_json::from_slice::<JournalHead>(&kv.value)
                .ok()
                .map(|h| h.id),
            None => None,
        };
        let id = unique_token();
        let part = self.inner.opts.max_txn_bytes.saturating_sub(4096).max(1024);
        let parts: Vec<&[u8]> = bytes.chunks(part).collect();
        for (i, p) in parts.iter().enumerate() {
            let key = self.key(&format!("{JOURNAL_PLAN}{id}/{i:08}"));
            let size = key.len() + p.len();
            let txn =
                TxnRequest::when(vec![]).and_then(vec![PutRequest::new(key, p.to_vec()).into()]);
            self.txn(|| format!("writing part {} of the journal", i + 1), txn)
                .await?;
            self.tally(1, 0, size);
        }
        let head = JournalHead {
            id: id.clone(),
            chunks: parts.len(),
            bytes: bytes.len(),
            holder: journal.holder.clone(),
            base_serial: journal.plan.base_serial,
        };
        let done = JournalDone {
            id: id.clone(),
            done: journal.done,
        };
        let mut ops = vec![
            PutRequest::new(
                self.key(JOURNAL_HEAD),
                serde_json::to_vec(&head).map_err(|e| self.corrupt(JOURNAL_HEAD, e))?,
            )
            .into(),
            PutRequest::new(
                self.key(JOURNAL_DONE),
                serde_json::to_vec(&done).map_err(|e| self.corrupt(JOURNAL_DONE, e))?,
            )
            .into(),
        ];
        let deletes = usize::from(old.is_some());
        if let Some(old) = old {
            ops.push(
                DeleteRangeRequest::new(self.key(&format!("{JOURNAL_PLAN}{old}/")))
                    .prefix()
                    .into(),
            );
        }
        let head_bytes = serde_json::to_vec(&head).map_or(0, |v| v.len())
            + serde_json::to_vec(&done).map_or(0, |v| v.len())
            + self.key(JOURNAL_HEAD).len()
            + self.key(JOURNAL_DONE).len();
        let resp = self
            .txn(
                || "writing the journal".into(),
                TxnRequest::when(vec![]).and_then(ops),
            )
            .await?;
        self.tally(2, deletes, head_bytes);
        let head_rev = resp.revision();
        *lock(&self.inner.journal_id) = Some((id, head_rev));
        Ok(())
    }

    /// [`Store::advance_journal`](gpushare_engine::store::Store::advance_journal): write only the
    /// position.
    pub(crate) async fn put_journal_position(&self, journal: &Journal) -> Result<(), StoreError> {
        // Only the position is written, under the journal it belongs to: guarded by the
        // head's revision, so a position never lands on another apply's journal.
        for _ in 0..2 {
            let cached = lock(&self.inner.journal_id).clone();
            let (id, head_rev) = match cached {
                Some(c) => c,
                None => match self.get_one(JOURNAL_HEAD).await? {
                    Some(kv) => {
                        let head = serde_json::from_slice::<JournalHead>(&kv.value)
                            .map_err(|e| self.corrupt(JOURNAL_HEAD, e))?;
                        if head.holder != journal.holder
                            || head.base_serial != journal.plan.base_serial
                        {
                            return Err(self.corrupt_msg(
                                JOURNAL_HEAD,
                                format!(
                                    "the journal in the store is {:?}'s over serial {}, not this apply's ({:?} over serial {})",
                                    head.holder, head.base_serial, journal.holder, journal.plan.base_serial
                                ),
                            ));
                        }
                        (head.id, kv.mod_revision)
                    }
                    // No journal: write it whole.
                    None => return self.put_journal(journal).await,
                },
            };
            let done = JournalDone {
                id: id.clone(),
                done: journal.done,
            };
            let v = serde_json::to_vec(&done).map_err(|e| self.corrupt(JOURNAL_DONE, e))?;
            let txn = TxnRequest::when(vec![Compare::mod_revision(
                self.key(JOURNAL_HEAD),
                CompareOp::Equal,
                head_rev,
            )])
            .and_then(vec![
                PutRequest::new(self.key(JOURNAL_DONE), v.clone()).into()
            ]);
            if self
                .txn(|| "advancing the journal".into(), txn)
                .await?
                .succeeded
            {
                self.tally(1, 0, self.key(JOURNAL_DONE).len() + v.len());
                *lock(&self.inner.journal_id) = Some((id, head_rev));
                return Ok(());
            }
            *lock(&self.inner.journal_id) = None;
        }
        Err(self.corrupt_msg(
            JOURNAL_HEAD,
            "the journal was replaced while its position was being written".into(),
        ))
    }

    /// [`Store::clear_journal`](gpushare_engine::store::Store::clear_journal).
    pub(crate) async fn delete_journal(&self) -> Result<(), StoreError> {
        // The head and every part in one transaction.
        let txn =
            TxnRequest::when(vec![]).and_then(vec![DeleteRangeRequest::new(self.key(JOURNAL))
                .prefix()
                .into()]);
        self.txn(|| "clearing the journal".into(), txn).await?;
        *lock(&self.inner.journal_id) = None;
        Ok(())
    }
}

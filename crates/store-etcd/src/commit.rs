//! Committing a state: compare-and-swap on the revision the base snapshot was read
//! at; a small change in one transaction, a large one staged in chunks under a claim,
//! flipped by one write of the meta key and copied into place (finished by the next
//! commit if the writer dies).

use crate::client::{
    prefix_end, Compare, CompareOp, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp,
    TxnRequest, TxnResponse,
};
use crate::error::Message;
use crate::keys::{Meta, CLAIM, DATA, LOCK_POLL, META, META_FORMAT, STAGE, STATE};
use crate::lease::KeepAlive;
use crate::snapshot::Snapshot;
use crate::{unique_token, user_name, EtcdStore, Failpoint};
use gpushare_core::model::StoreState;
use gpushare_core::util::{hostname, lock, unix_now};
use gpushare_engine::fsutil::rfc3339;
use gpushare_engine::store::StoreError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How many times a commit re-reads after a concurrent change that left the serial as it was.
pub(crate) const COMMIT_ATTEMPTS: usize = 8;

/// `commit`: who is writing a large commit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Claim {
    token: String,
    serial: u64,
    holder: String,
    since: String,
}

pub(crate) enum Outcome {
    /// Committed and finished, at this etcd revision.
    Done(i64),
    /// Committed, but the copy into place did not finish (the next commit finishes it).
    Unfinished,
    /// Another writer's large commit holds the claim.
    Claimed,
    /// Something under `state/` changed since the base was read.
    Moved,
}

impl EtcdStore {
    /// [`Store::commit`](gpushare_engine::store::Store::commit): diff against the base, commit
    /// small or staged, and re-read and retry after a concurrent change that left the serial as it
    /// was.
    pub(crate) async fn commit_state(
        &self,
        expected_serial: u64,
        state: &StoreState,
    ) -> Result<(), StoreError> {
        gpushare_engine::store::check_next_serial(expected_serial, state.serial)?;
        let new = self.encode(state)?;
        let meta = Meta {
            format: META_FORMAT,
            serial: state.serial,
            cluster: state.cluster.clone(),
            staged: None,
            capacity_refusals: state.capacity_refusals.clone(),
        };
        let started = Instant::now();
        for attempt in 0..COMMIT_ATTEMPTS {
            let base = self.base(expected_serial).await?;
            if base.serial() != expected_serial {
                // A write of ours whose answer was lost (a member died, the call was
                // repeated) may have landed: then the stored state is exactly ours.
                if attempt > 0 && base.serial() == state.serial {
                    let (snap, now) = self.read_snapshot().await?;
                    if now == *state && snap.meta.as_ref().is_some_and(|m| m.staged.is_none()) {
                        *lock(&self.inner.cache) = Some(snap);
                        return Ok(());
                    }
                }
                return Err(StoreError::Conflict {
                    expected: expected_serial,
                    found: base.serial(),
                });
            }
            let changes = Self::diff(&base.stored, &new);
            let bytes: usize = changes
                .iter()
                .map(|(k, v)| k.len() + v.map_or(0, <[u8]>::len) + self.inner.url.prefix.len() + 32)
                .sum();
            let small = changes.len() + 2 <= self.inner.opts.max_txn_ops
                && bytes + 4096 <= self.inner.opts.max_txn_bytes;
            let outcome = if small {
                self.commit_small(&base, &changes, &meta).await?
            } else {
                self.commit_staged(&base, &changes, &meta).await?
            };
            match outcome {
                Outcome::Done(revision) => {
                    let keys = changes.len();
                    *lock(&self.inner.cache) = Some(Arc::new(Snapshot {
                        revision,
                        meta: Some(meta),
                        meta_revision: revision,
                        stored: new,
                        has_stage: false,
                    }));
                    tracing::debug!(
                        serial = state.serial,
                        keys_written = keys,
                        staged = !small,
                        ms = started.elapsed().as_millis() as u64,
                        store = %self.inner.location,
                        "committed state"
                    );
                    return Ok(());
                }
                Outcome::Unfinished => {
                    *lock(&self.inner.cache) = None;
                    return Ok(());
                }
                Outcome::Claimed => {
                    *lock(&self.inner.cache) = None;
                    self.wait_for_claim().await?;
                }
                Outcome::Moved => {
                    // Re-read: a new serial is a conflict; the same one (a finished copy,
                    // cleaned stage) is retried against the keys as they are now.
                    *lock(&self.inner.cache) = None;
                }
            }
        }
        let found = self.read_snapshot().await?.0.serial();
        Err(StoreError::Conflict {
            expected: expected_serial,
            found,
        })
    }

    /// The snapshot a commit over `expected` diffs against: the cached one when it is
    /// at that serial, else a fresh read.
    pub(crate) async fn base(&self, expected: u64) -> Result<Arc<Snapshot>, StoreError> {
        if let Some(s) = lock(&self.inner.cache).as_ref() {
            if s.serial() == expected {
                return Ok(Arc::clone(s));
            }
        }
        let (s, _) = self.read_snapshot().await?;
        *lock(&self.inner.cache) = Some(Arc::clone(&s));
        Ok(s)
    }

    /// "The state is as `base` read it, and no large commit is claimed."
    ///
    /// Every change to `state/d/` comes with a change to `state/meta` (a small commit,
    /// a large commit's flip and finish) except a large commit's copy, which follows its
    /// flip: so comparing the meta key's revision suffices, unless `base` was read
    /// after a flip whose copy had not finished. Then a writer whose claim has since
    /// expired may have copied more after `base` was read, and the guard compares every
    /// key under `state/` (a range compare, which costs etcd a read of them all).
    pub(crate) fn guard(&self, base: &Snapshot) -> Vec<Compare> {
        let state = if base.meta.as_ref().is_some_and(|m| m.staged.is_some()) {
            Compare::mod_revision(self.key(STATE), CompareOp::Less, base.revision + 1)
                .with_range(prefix_end(self.key(STATE).as_bytes()))
        } else {
            Compare::mod_revision(self.key(META), CompareOp::Equal, base.meta_revision)
        };
        vec![
            state,
            Compare::version(self.key(CLAIM), CompareOp::Equal, 0),
        ]
    }

    pub(crate) fn meta_bytes(&self, meta: &Meta) -> Result<Vec<u8>, StoreError> {
        serde_json::to_vec(meta).map_err(|e| self.corrupt(META, e))
    }

    pub(crate) async fn claim_holder(&self) -> Result<Option<Claim>, StoreError> {
        match self.get_one(CLAIM).await? {
            None => Ok(None),
            Some(kv) => Ok(serde_json::from_slice(&kv.value).ok()),
        }
    }

    /// Wait while another writer's large commit is claimed; `Locked` when it outlasts
    /// twice the claim's TTL.
    pub(crate) async fn wait_for_claim(&self) -> Result<(), StoreError> {
        let started = Instant::now();
        let limit = self.inner.opts.commit_ttl * 2 + Duration::from_secs(5);
        loop {
            let Some(claim) = self.claim_holder().await? else {
                return Ok(());
            };
            if started.elapsed() >= limit {
                return Err(StoreError::Locked {
                    holder: format!("a commit of serial {} by {}", claim.serial, claim.holder),
                    since: claim.since,
                    waited_seconds: started.elapsed().as_secs(),
                });
            }
            tokio::time::sleep(LOCK_POLL).await;
        }
    }

    /// The changes from `stored` to `new`: puts (with values) and deletes (`None`).
    pub(crate) fn diff<'a>(
        stored: &'a BTreeMap<String, Vec<u8>>,
        new: &'a BTreeMap<String, Vec<u8>>,
    ) -> Vec<(&'a str, Option<&'a [u8]>)> {
        let mut out = Vec::new();
        for (k, v) in new {
            if stored.get(k) != Some(v) {
                out.push((k.as_str(), Some(v.as_slice())));
            }
        }
        for k in stored.keys() {
            if !new.contains_key(k) {
                out.push((k.as_str(), None));
            }
        }
        out
    }

    /// Split `ops` (key, value) into transactions within the limits, `reserve_ops`
    /// operations and `reserve_bytes` bytes kept free in each.
    pub(crate) fn chunks(
        &self,
        ops: Vec<RequestOp>,
        sizes: Vec<usize>,
        reserve_ops: usize,
    ) -> Vec<Vec<RequestOp>> {
        let max_ops = self
            .inner
            .opts
            .max_txn_ops
            .saturating_sub(reserve_ops)
            .max(1);
        let max_bytes = self.inner.opts.max_txn_bytes.saturating_sub(4096);
        let mut out: Vec<Vec<RequestOp>> = Vec::new();
        let mut cur = Vec::new();
        let mut bytes = 0;
        for (op, size) in ops.into_iter().zip(sizes) {
            if !cur.is_empty() && (cur.len() >= max_ops || bytes + size > max_bytes) {
                out.push(std::mem::take(&mut cur));
                bytes = 0;
            }
            bytes += size;
            cur.push(op);
        }
        if !cur.is_empty() {
            out.push(cur);
        }
        out
    }

    pub(crate) fn holder_string(&self) -> String {
        let (user, host) = (user_name(), hostname());
        format!("{user}@{host} pid {}", std::process::id())
    }

    /// One transaction: guard, changed keys, meta.
    pub(crate) async fn commit_small(
        &self,
        base: &Snapshot,
        changes: &[(&str, Option<&[u8]>)],
        meta: &Meta,
    ) -> Result<Outcome, StoreError> {
        let mut ops = Vec::with_capacity(changes.len() + 2);
        for (rel, v) in changes {
            let key = self.key(&format!("{DATA}{rel}"));
            ops.push(match v {
                Some(v) => PutRequest::new(key, v.to_vec()).into(),
                None => DeleteRangeRequest::new(key).into(),
            });
        }
        ops.push(PutRequest::new(self.key(META), self.meta_bytes(meta)?).into());
        if base.has_stage {
            ops.push(DeleteRangeRequest::new(self.key(STAGE)).prefix().into());
        }
        let txn = TxnRequest::when(self.guard(base))
            .and_then(ops)
            .or_else(vec![RangeRequest::new(self.key(CLAIM)).into()]);
        let meta_len = self.meta_bytes(meta)?.len() + self.key(META).len();
        let resp = self
            .txn(|| format!("committing serial {}", meta.serial), txn)
            .await?;
        if resp.succeeded {
            let (p, d, b) = self.measure(DATA, changes);
            self.tally(p + 1, d + usize::from(base.has_stage), b + meta_len);
        }
        Ok(self.outcome(&resp))
    }

    pub(crate) fn outcome(&self, resp: &TxnResponse) -> Outcome {
        if resp.succeeded {
            return Outcome::Done(resp.revision());
        }
        let claimed = resp.ranges().any(|g| !g.kvs.is_empty());
        if claimed {
            Outcome::Claimed
        } else {
            Outcome::Moved
        }
    }

    /// The staged commit (see the crate docs): claim, stage, flip, copy into place.
    pub(crate) async fn commit_staged(
        &self,
        base: &Snapshot,
        changes: &[(&str, Option<&[u8]>)],
        meta: &Meta,
    ) -> Result<Outcome, StoreError> {
        let serial = meta.serial;
        let token = unique_token();
        // 1. Claim, under the same guard as a small commit.
        let (keep, claim_rev) = match self.claim_commit(base, serial, &token).await? {
            Ok(claimed) => claimed,
            Err(outcome) => return Ok(outcome),
        };
        // 2. Stage every change.
        let parts = self
            .stage_changes(changes, serial, &token, claim_rev)
            .await?;
        if *lock(&self.inner.failpoint) == Some(Failpoint::BeforeFlip) {
            keep.abandon();
            return Err(self.unreachable(
                large_commit(serial, "failpoint"),
                Message("failpoint before the flip".into()),
            ));
        }
        // 3. Flip: from here on the new state is what every reader sees.
        self.flip_serial(meta, &token, claim_rev).await?;
        tracing::debug!(serial, changes = changes.len(), parts, store = %self.inner.location, "large commit flipped");
        if *lock(&self.inner.failpoint) == Some(Failpoint::AfterFlip) {
            keep.abandon();
            return Ok(Outcome::Unfinished);
        }
        // 4. Copy into place, then clear the stage and the claim. A failure from here on
        // leaves a committed state; the next commit finishes the copy.
        match self.copy_and_finish(changes, meta, claim_rev).await {
            Ok(rev) => {
                self.revoke(keep.id).await;
                Ok(Outcome::Done(rev))
            }
            Err(e) => {
                self.revoke(keep.id).await;
                tracing::warn!(serial, error = %e, store = %self.inner.location, "committed, but the staged values were not all copied into place; the next commit finishes it");
                Ok(Outcome::Unfinished)
            }
        }
    }

    /// Step 1 of a staged commit: put the claim (on a kept lease) under the guard of
    /// `base`. The lease and the claim's create revision, or the outcome when another
    /// commit came first (the lease then revoked). A claim already holding `token` is
    /// ours: a repeated call whose first answer was lost.
    async fn claim_commit(
        &self,
        base: &Snapshot,
        serial: u64,
        token: &str,
    ) -> Result<Result<(KeepAlive, i64), Outcome>, StoreError> {
        let keep = self
            .kept_lease(
                self.inner.opts.commit_ttl,
                &large_commit(serial, "granting the claim's lease"),
                format!("commit claim of serial {serial}"),
            )
            .await?;
        let claim = Claim {
            token: token.to_string(),
            serial,
            holder: self.holder_string(),
            since: rfc3339(unix_now()),
        };
        let claim_bytes = serde_json::to_vec(&claim).map_err(|e| self.corrupt(CLAIM, e))?;
        let txn = TxnRequest::when(self.guard(base))
            .and_then(vec![PutRequest::new(self.key(CLAIM), claim_bytes)
                .lease(keep.id)
                .into()])
            .or_else(vec![RangeRequest::new(self.key(CLAIM)).into()]);
        let resp = self.txn(|| large_commit(serial, "claiming"), txn).await?;
        let ours = resp.ranges().find_map(|g| {
            g.kvs.first().and_then(|kv| {
                serde_json::from_slice::<Claim>(&kv.value)
                    .ok()
                    .filter(|c| c.token == token)
                    .map(|_| kv.create_revision)
            })
        });
        match (self.outcome(&resp), ours) {
            (Outcome::Done(rev), _) | (_, Some(rev)) => Ok(Ok((keep, rev))),
            (other, None) => {
                self.revoke(keep.id).await;
                Ok(Err(other))
            }
        }
    }

    /// Step 2 of a staged commit: every change under the stage of `token` (an empty
    /// value: deleted), in transactions guarded by the claim. The number of parts.
    async fn stage_changes(
        &self,
        changes: &[(&str, Option<&[u8]>)],
        serial: u64,
        token: &str,
        claim_rev: i64,
    ) -> Result<usize, StoreError> {
        let stage = format!("{STAGE}{token}/");
        let mut ops = Vec::with_capacity(changes.len());
        let mut sizes = Vec::with_capacity(changes.len());
        let mut staged_bytes = 0;
        for (rel, v) in changes {
            let key = self.key(&format!("{stage}{rel}"));
            let v = v.map(<[u8]>::to_vec).unwrap_or_default();
            staged_bytes += key.len() + v.len();
            sizes.push(key.len() + v.len() + 16);
            ops.push(PutRequest::new(key, v).into());
        }
        let chunks = self.chunks(ops, sizes, 0);
        let n = chunks.len();
        for (i, chunk) in chunks.into_iter().enumerate() {
            let count = chunk.len();
            let txn = TxnRequest::when(vec![self.claim_is(claim_rev)]).and_then(chunk);
            let resp = self
                .txn(
                    || large_commit(serial, &format!("staging part {} of {n}", i + 1)),
                    txn,
                )
                .await?;
            if !resp.succeeded {
                return Err(self.claim_lost(serial, "staging"));
            }
            self.tally(count, 0, 0);
        }
        lock(&self.inner.stats).bytes += staged_bytes as u64;
        Ok(n)
    }

    /// Step 3 of a staged commit: the meta key to the new serial, naming the stage of
    /// `token`, guarded by the claim.
    async fn flip_serial(
        &self,
        meta: &Meta,
        token: &str,
        claim_rev: i64,
    ) -> Result<(), StoreError> {
        let step = "flipping the serial";
        let flipped = Meta {
            staged: Some(token.to_string()),
            ..meta.clone()
        };
        let flipped_bytes = self.meta_bytes(&flipped)?;
        let flipped_len = self.key(META).len() + flipped_bytes.len();
        let txn = TxnRequest::when(vec![self.claim_is(claim_rev)]).and_then(vec![PutRequest::new(
            self.key(META),
            flipped_bytes,
        )
        .into()]);
        if !self
            .txn(|| large_commit(meta.serial, step), txn)
            .await?
            .succeeded
        {
            return Err(self.claim_lost(meta.serial, step));
        }
        self.tally(1, 0, flipped_len);
        Ok(())
    }

    /// The guard of a staged commit's later steps: the claim is still the one created
    /// at `claim_rev`.
    fn claim_is(&self, claim_rev: i64) -> Compare {
        Compare::create_revision(self.key(CLAIM), CompareOp::Equal, claim_rev)
    }

    /// The error when the claim was gone before a step of the staged commit ran.
    fn claim_lost(&self, serial: u64, step: &str) -> StoreError {
        self.unreachable(
            large_commit(serial, step),
            Message("the commit's claim expired before it finished (etcd was out of reach for longer than the claim's TTL); nothing was committed".into()),
        )
    }

    pub(crate) async fn copy_and_finish(
        &self,
        changes: &[(&str, Option<&[u8]>)],
        meta: &Meta,
        claim_rev: i64,
    ) -> Result<i64, StoreError> {
        let mine = || self.claim_is(claim_rev);
        let mut ops = Vec::with_capacity(changes.len());
        let mut sizes = Vec::with_capacity(changes.len());
        for (rel, v) in changes {
            let key = self.key(&format!("{DATA}{rel}"));
            sizes.push(key.len() + v.map_or(0, <[u8]>::len) + 16);
            ops.push(match v {
                Some(v) => PutRequest::new(key, v.to_vec()).into(),
                None => DeleteRangeRequest::new(key).into(),
            });
        }
        let chunks = self.chunks(ops, sizes, 0);
        for chunk in chunks {
            let txn = TxnRequest::when(vec![mine()]).and_then(chunk);
            if !self
                .txn(|| "copying staged values".into(), txn)
                .await?
                .succeeded
            {
                return Err(
                    self.unreachable("copying staged values".into(), Message("claim lost".into()))
                );
            }
            self.tally(0, 0, 0);
        }
        let (p, d, b) = self.measure(DATA, changes);
        {
            let mut s = lock(&self.inner.stats);
            s.puts += p as u64;
            s.deletes += d as u64;
            s.bytes += b as u64;
        }
        let txn = TxnRequest::when(vec![mine()]).and_then(vec![
            PutRequest::new(self.key(META), self.meta_bytes(meta)?).into(),
            DeleteRangeRequest::new(self.key(STAGE)).prefix().into(),
            DeleteRangeRequest::new(self.key(CLAIM)).into(),
        ]);
        let resp = self.txn(|| "finishing a large commit".into(), txn).await?;
        if !resp.succeeded {
            return Err(self.unreachable(
                "finishing a large commit".into(),
                Message("claim lost".into()),
            ));
        }
        self.tally(1, 2, self.key(META).len() + self.meta_bytes(meta)?.len());
        Ok(resp.revision())
    }
}

/// What a step of the staged commit of `serial` was doing, for its error messages.
fn large_commit(serial: u64, step: &str) -> String {
    format!("{step} (large commit of serial {serial})")
}

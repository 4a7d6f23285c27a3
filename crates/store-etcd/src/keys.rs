//! The keys under the store's prefix (the table in the crate's documentation), the
//! paging and timing constants of calls on them, and `state/meta`'s value ([`Meta`]).

use serde::{Deserialize, Serialize};
use std::time::Duration;

pub(crate) const META: &str = "state/meta";
pub(crate) const STATE: &str = "state/";
pub(crate) const DATA: &str = "state/d/";
pub(crate) const STAGE: &str = "state/stage/";
pub(crate) const CLAIM: &str = "commit";
pub(crate) const LOCK: &str = "lock";
pub(crate) const JOURNAL: &str = "journal/";
pub(crate) const JOURNAL_HEAD: &str = "journal/head";
pub(crate) const JOURNAL_DONE: &str = "journal/done";
pub(crate) const JOURNAL_PLAN: &str = "journal/plan/";
pub(crate) const REPORTS: &str = "report/";
/// The last reconcile pass's status record.
pub(crate) const STATUS: &str = "status";
/// The store's identity (see `StoreState::store_id`), made once with create-if-absent.
pub(crate) const STORE_ID: &str = "store-id";
/// Keys per page when reading a range (responses stay far below the decoding limit).
pub(crate) const PAGE: i64 = 1000;
/// The most a response may be (tonic's default of 4 MiB is too small for a page of
/// large revision families).
pub(crate) const MAX_DECODE: usize = 256 * 1024 * 1024;
pub(crate) const LOCK_POLL: Duration = Duration::from_millis(100);
pub(crate) const META_FORMAT: u32 = 1;

/// `state/meta`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Meta {
    pub(crate) format: u32,
    pub(crate) serial: u64,
    pub(crate) cluster: String,
    /// The token of a flipped large commit whose staged values are not yet copied.
    #[serde(default)]
    pub(crate) staged: Option<String>,
    /// `StoreState::capacity_refusals` (a few recent entries: they ride with the meta).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) capacity_refusals: Vec<gpushare_core::facts::CapacityRefusal>,
}

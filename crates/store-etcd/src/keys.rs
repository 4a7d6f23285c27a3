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
/// Keys of the first page when reading a range; later pages are sized from the bytes
/// per key seen so far ([`page_limit`]).
pub(crate) const PAGE: i64 = 1000;
/// The bytes a page of a range is sized to (far below the decoding limit).
pub(crate) const PAGE_BYTES: usize = 16 * 1024 * 1024;
/// The fewest and the most keys a later page is asked for.
pub(crate) const PAGE_MIN: i64 = 16;
pub(crate) const PAGE_MAX: i64 = 50_000;
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

/// Keys to ask for in the next page of a range, after `keys` keys of `bytes` bytes:
/// as many as make [`PAGE_BYTES`] at that average, between [`PAGE_MIN`] and
/// [`PAGE_MAX`]. Few large pages, not many small ones: etcd (3.4) walks every key
/// left in the range for each page it answers (to count them), so a range read in
/// pages of a fixed number of keys costs the square of its length.
pub(crate) fn page_limit(keys: usize, bytes: usize) -> i64 {
    if keys == 0 {
        return PAGE;
    }
    let per_key = (bytes / keys).max(1);
    i64::try_from(PAGE_BYTES / per_key)
        .unwrap_or(PAGE_MAX)
        .clamp(PAGE_MIN, PAGE_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_sized_from_the_bytes_per_key_seen() {
        assert_eq!(page_limit(0, 0), PAGE, "the first page");
        // 300-byte tasks: as many as make 16 MiB, up to the most keys a page asks for.
        assert_eq!(page_limit(1000, 300_000), PAGE_MAX);
        // 4 KiB values: 4,096 keys make 16 MiB.
        assert_eq!(page_limit(1000, 4096 * 1000), 4096);
        // Values of 1 MiB: 16 keys (16 MiB), not the first page's 1,000 (1 GiB).
        assert_eq!(page_limit(1000, 1000 << 20), PAGE_MIN);
    }
}

//! What the engine gives back: where each task went, the new hosts per pool,
//! and why the others could not be placed.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where a task went.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum HostRef {
    Existing {
        id: String,
    },
    /// The `ordinal`-th new host of `pool` (0-based) in this outcome.
    New {
        pool: String,
        ordinal: u32,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Assignment {
    pub key: String,
    pub host: HostRef,
    pub gpus: Vec<u32>,
}

/// Why a task could not be placed: the nearest fit and what stopped it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unplaced {
    pub key: String,
    pub service: String,
    pub reason: String,
    /// The running task this one was to take over (a move off a drained host, a
    /// replacement by a new revision): it keeps running where it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PlacementOutcome {
    pub assignments: Vec<Assignment>,
    /// New hosts to launch per pool.
    pub new_hosts: BTreeMap<String, u32>,
    pub unplaced: Vec<Unplaced>,
}

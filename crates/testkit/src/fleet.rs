//! The fleet as the console tests compare it: host -> GPU index -> task ids.

use crate::arr;
use std::collections::{BTreeMap, BTreeSet};

pub type Fleet = BTreeMap<String, BTreeMap<u64, BTreeSet<String>>>;

/// Host -> GPU -> tasks, as `show --json` has them (hosts not terminated).
pub fn json_fleet(show: &serde_json::Value) -> Fleet {
    arr(show, "hosts")
        .iter()
        .filter(|h| h["state"] != "terminated")
        .map(|h| {
            let gpus = arr(h, "gpus")
                .iter()
                .map(|g| {
                    let tasks = arr(g, "tasks")
                        .iter()
                        .map(|t| t.as_str().expect("task id").to_string())
                        .collect();
                    (g["index"].as_u64().expect("index"), tasks)
                })
                .collect();
            (h["id"].as_str().expect("id").to_string(), gpus)
        })
        .collect()
}

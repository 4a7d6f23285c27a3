//! `observe`: read the store, the cloud and the agents' reports into one [`Live`].
//!
//! The I/O is in [`observe`]; the merge itself is the pure [`merge`], unit-tested
//! without any file or network.

use crate::cloud::{Cloud, CloudError};
use crate::store::{Store, StoreError};
use gpushare_core::model::{CloudHost, HostReport, HostState, Live, StoreState, TaskState};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    #[error("reading the store {location}")]
    Store {
        location: String,
        #[source]
        source: StoreError,
    },
    #[error("listing the {cloud} cloud's hosts of cluster {cluster:?}")]
    Cloud {
        cloud: &'static str,
        cluster: String,
        #[source]
        source: CloudError,
    },
}

/// Read the store's state and reports and the cloud's hosts of `cluster`, and merge
/// them (see [`merge`]). `now` (seconds since the Unix epoch) becomes `Live::observed_at`.
pub async fn observe(store: &dyn Store, cloud: &dyn Cloud, cluster: &str, now: u64) -> Result<Live, ObserveError> {
    let store_err = |source| ObserveError::Store { location: store.location(), source };
    let state = store.load().await.map_err(store_err)?;
    let reports = store.reports().await.map_err(store_err)?;
    let hosts = cloud
        .list_hosts(cluster)
        .await
        .map_err(|source| ObserveError::Cloud { cloud: cloud.kind(), cluster: cluster.to_string(), source })?;
    let mut live = merge(state, &hosts, &reports, now);
    if live.state.cluster.is_empty() {
        live.state.cluster = cluster.to_string();
    }
    Ok(live)
}

/// Merge the store's records with what the cloud and the agents say. Pure.
///
/// - Host state comes from the cloud (matched by instance id, else by host-id tag or
///   launch token); a host the store has with an instance id the cloud no longer lists
///   is `Terminated`. A host the store marks `Draining` stays so while the cloud runs it.
/// - MPS health, heartbeat, GPU inventory and task states come from the host's report.
/// - Tasks on a terminated host that were not stopped are `Failed`.
/// - Instances of the cluster (not terminated) that no store host claims are strays.
pub fn merge(mut state: StoreState, cloud_hosts: &[CloudHost], reports: &[HostReport], now: u64) -> Live {
    let by_instance: BTreeMap<&str, &CloudHost> = cloud_hosts.iter().map(|c| (c.instance_id.as_str(), c)).collect();
    let by_host_id: BTreeMap<&str, &CloudHost> = cloud_hosts.iter().map(|c| (c.host_id.as_str(), c)).collect();
    let by_token: BTreeMap<&str, &CloudHost> = cloud_hosts.iter().map(|c| (c.launch_token.as_str(), c)).collect();
    let reports: BTreeMap<&str, &HostReport> = reports.iter().map(|r| (r.host_id.as_str(), r)).collect();
    let mut claimed: BTreeSet<&str> = BTreeSet::new();

    for host in state.hosts.values_mut() {
        let cloud = match &host.instance_id {
            Some(id) => by_instance.get(id.as_str()).copied(),
            None => by_host_id
                .get(host.id.as_str())
                .or_else(|| by_token.get(host.launch_token.as_str()))
                .copied(),
        };
        match cloud {
            Some(c) => {
                claimed.insert(c.instance_id.as_str());
                if host.instance_id.is_none() {
                    host.instance_id = Some(c.instance_id.clone());
                }
                if host.zone.is_none() {
                    host.zone = c.zone.clone();
                }
                host.state = match (host.state, c.state) {
                    (HostState::Draining, HostState::Pending | HostState::Running) => HostState::Draining,
                    (_, s) => s,
                };
            }
            // Recorded with an instance id the cloud no longer lists: it is gone.
            None if host.instance_id.is_some() => host.state = HostState::Terminated,
            // Never launched (no instance id and no instance carries its tag): keep the record.
            None => {}
        }
        if let Some(r) = reports.get(host.id.as_str()) {
            host.mps_health = r.mps_health;
            host.last_heartbeat = Some(host.last_heartbeat.map_or(r.at, |h| h.max(r.at)));
            if !r.gpus.is_empty() {
                host.gpus = r.gpus.clone();
            }
        }
    }

    for task in state.tasks.values_mut() {
        let host = state.hosts.get(&task.host);
        let host_gone = host.is_none_or(|h| h.state == HostState::Terminated);
        if let Some(s) = reports.get(task.host.as_str()).and_then(|r| r.tasks.get(&task.id)) {
            task.state = *s;
        }
        if host_gone && !matches!(task.state, TaskState::Stopped | TaskState::Failed) {
            task.state = TaskState::Failed;
        }
    }

    let strays = cloud_hosts
        .iter()
        .filter(|c| c.state != HostState::Terminated && !claimed.contains(c.instance_id.as_str()))
        .cloned()
        .collect();
    Live { state, strays, observed_at: now }
}

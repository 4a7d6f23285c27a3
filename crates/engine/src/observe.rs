//! `observe`: read the store, the cloud and the agents' reports into one [`Live`].
//!
//! The I/O is in [`observe`]; the merge itself is the pure [`merge`], unit-tested
//! without any file or network.

use crate::cloud::{Cloud, CloudError};
use crate::store::{Store, StoreError};
use gpushare_core::model::{CloudHost, Host, HostReport, HostState, Live, StoreState, TaskState};
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

/// The consistency window of [`observe`]: the settings' default, in seconds.
pub const DEFAULT_CONSISTENCY_WINDOW: u64 = 300;

/// Read the store's state and reports and the cloud's hosts of `cluster`, and merge
/// them (see [`merge`]). `now` (seconds since the Unix epoch) becomes `Live::observed_at`.
/// The consistency window is [`DEFAULT_CONSISTENCY_WINDOW`]; see [`observe_within`].
pub async fn observe(
    store: &dyn Store,
    cloud: &dyn Cloud,
    cluster: &str,
    now: u64,
) -> Result<Live, ObserveError> {
    observe_within(store, cloud, cluster, now, DEFAULT_CONSISTENCY_WINDOW).await
}

/// [`observe`] with a consistency window of `window` seconds: a host whose recorded
/// launch (`Host::launched_at`) is younger than that and that the cloud does not list
/// yet is pending, not terminated (see [`merge_within`]).
pub async fn observe_within(
    store: &dyn Store,
    cloud: &dyn Cloud,
    cluster: &str,
    now: u64,
    window: u64,
) -> Result<Live, ObserveError> {
    let store_err = |source| ObserveError::Store {
        location: store.location(),
        source,
    };
    let state = store.load().await.map_err(store_err)?;
    let reports = store.reports().await.map_err(store_err)?;
    let hosts = cloud
        .list_hosts(cluster)
        .await
        .map_err(|source| ObserveError::Cloud {
            cloud: cloud.kind(),
            cluster: cluster.to_string(),
            source,
        })?;
    let mut live = merge_within(state, &hosts, &reports, now, window);
    if live.state.cluster.is_empty() {
        live.state.cluster = cluster.to_string();
    }
    add_cloud_notices(&mut live, cloud, now).await;
    Ok(live)
}

/// A host whose agent has not reported for this many seconds has its notices read
/// from the cloud (DescribeInstanceStatus on EC2): its agent cannot say.
pub const CLOUD_NOTICE_AFTER: u64 = 30;

/// Give the up, launched hosts of `live` whose agent has been quiet for
/// [`CLOUD_NOTICE_AFTER`] seconds (or never reported) the cloud's scheduled event,
/// when it has one and the agent reported none. A cloud that cannot say is logged
/// and changes nothing.
async fn add_cloud_notices(live: &mut Live, cloud: &dyn Cloud, now: u64) {
    let quiet: Vec<String> = live
        .state
        .hosts
        .values()
        .filter(|h| h.state.is_active() && h.health.notice.is_none() && !h.is_registered())
        .filter(|h| {
            h.last_heartbeat
                .is_none_or(|at| now.saturating_sub(at) >= CLOUD_NOTICE_AFTER)
        })
        .filter_map(|h| h.instance_id.clone())
        .collect();
    if quiet.is_empty() {
        return;
    }
    let events = match cloud.scheduled_events(&quiet).await {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(error = %gpushare_core::util::error_chain(&e), "cannot read the cloud's scheduled events of silent hosts");
            return;
        }
    };
    for h in live.state.hosts.values_mut() {
        if let Some(n) = h.instance_id.as_ref().and_then(|i| events.get(i)) {
            tracing::warn!(host = %h.id, notice = %n, "the cloud gave notice for a silent host");
            h.health.notice = Some(n.clone());
        }
    }
}

/// Merge the store's records with what the cloud and the agents say. Pure.
///
/// - Host state comes from the cloud (matched by instance id, else by host-id tag or
///   launch token); a host the store has with an instance id the cloud no longer lists
///   is `Terminated`. A host the store marks `Draining` stays so while the cloud runs it.
/// - MPS health, the health checks (per host and GPU), heartbeat, GPU inventory and
///   task states come from the host's report.
/// - Tasks on a terminated host that were not stopped are `Failed`.
/// - Instances of the cluster (not terminated) that no store host claims are strays.
/// - Store identity: an instance tagged with another store id than
///   `state.store_id` belongs to another state store (same cluster name): it is never
///   matched to a host of this store, never a stray, and listed in `Live::foreign`.
///   An instance without the tag (launched before store identity) is matched by its
///   recorded instance id, or by host id / launch token when its launch token is the
///   host's own; each such match is listed in `Live::adopted` (the plan notes it).
pub fn merge(
    state: StoreState,
    cloud_hosts: &[CloudHost],
    reports: &[HostReport],
    now: u64,
) -> Live {
    merge_within(state, cloud_hosts, reports, now, DEFAULT_CONSISTENCY_WINDOW)
}

/// [`merge`] with a consistency window of `window` seconds. EC2 lists a fresh
/// instance only some time after RunInstances returned: a host recorded with an
/// instance id and a launch time (`Host::launched_at`) less than `window` seconds
/// before `now` that the cloud does not list is `Pending`, whichever process launched
/// it; after the window it is `Terminated`. A launch time after `now` (clocks of two
/// machines) counts as fresh.
pub fn merge_within(
    mut state: StoreState,
    cloud_hosts: &[CloudHost],
    reports: &[HostReport],
    now: u64,
    window: u64,
) -> Live {
    let (foreign, cloud_hosts): (Vec<CloudHost>, Vec<CloudHost>) = cloud_hosts
        .iter()
        .cloned()
        .partition(|c| c.is_foreign_to(&state.store_id));
    let foreign: Vec<CloudHost> = foreign
        .into_iter()
        .filter(|c| c.state != HostState::Terminated)
        .collect();
    let index = CloudIndex::of(&cloud_hosts);
    let reports: BTreeMap<&str, &HostReport> =
        reports.iter().map(|r| (r.host_id.as_str(), r)).collect();
    let mut claimed: BTreeSet<&str> = BTreeSet::new();
    let mut adopted: Vec<CloudHost> = Vec::new();
    let has_identity = !state.store_id.is_empty();

    for host in state.hosts.values_mut() {
        match index.find(host) {
            Some(c) => {
                claimed.insert(c.instance_id.as_str());
                // Only a store with an identity has something to tag them with.
                if c.store_id.is_none() && c.state != HostState::Terminated && has_identity {
                    adopted.push(c.clone());
                }
                merge_listed(host, c);
            }
            None => merge_unlisted(host, now, window),
        }
        if let Some(r) = reports
            .get(host.id.as_str())
            .filter(|r| r.unreadable.is_none())
        {
            merge_report(host, r, now);
        }
    }
    merge_tasks(&mut state, &reports);
    let task_status = gpushare_core::model::reported_task_status(&state, reports.values().copied());
    let host_addresses =
        gpushare_core::model::host_addresses(reports.values().copied(), &state.hosts);

    let strays = cloud_hosts
        .iter()
        .filter(|c| c.state != HostState::Terminated && !claimed.contains(c.instance_id.as_str()))
        .cloned()
        .collect();
    for f in &foreign {
        tracing::debug!(instance_id = %f.instance_id, owner = ?f.store_id, "instance of another state store: not touched");
    }
    Live {
        state,
        strays,
        foreign,
        adopted,
        observed_at: now,
        facts: Default::default(),
        task_status,
        host_addresses,
        target_groups: BTreeMap::new(),
    }
}

/// The cloud's instances of this store, by instance id, host-id tag and launch token.
struct CloudIndex<'c> {
    by_instance: BTreeMap<&'c str, &'c CloudHost>,
    by_host_id: BTreeMap<&'c str, &'c CloudHost>,
    by_token: BTreeMap<&'c str, &'c CloudHost>,
}

impl<'c> CloudIndex<'c> {
    fn of(cloud_hosts: &'c [CloudHost]) -> CloudIndex<'c> {
        let by = |key: fn(&CloudHost) -> &str| {
            cloud_hosts
                .iter()
                .map(|c| (key(c), c))
                .collect::<BTreeMap<&str, &CloudHost>>()
        };
        CloudIndex {
            by_instance: by(|c| c.instance_id.as_str()),
            by_host_id: by(|c| c.host_id.as_str()),
            by_token: by(|c| c.launch_token.as_str()),
        }
    }

    /// The instance of a store host: by its recorded instance id, else by tag.
    fn find(&self, host: &Host) -> Option<&'c CloudHost> {
        match &host.instance_id {
            Some(id) => self.by_instance.get(id.as_str()).copied(),
            // Found by tag: an untagged instance only when it carries this host's own
            // launch token (a host id alone is shared by stores of one cluster name).
            None => self
                .by_host_id
                .get(host.id.as_str())
                .filter(|c| c.store_id.is_some() || c.launch_token == host.launch_token)
                .or_else(|| self.by_token.get(host.launch_token.as_str()))
                .copied(),
        }
    }
}

/// A store host the cloud lists: its instance id, zone and state from the cloud (a
/// draining host stays draining while the cloud runs it).
fn merge_listed(host: &mut Host, c: &CloudHost) {
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

/// A store host the cloud does not list: pending within the consistency window after
/// its launch, terminated after it, kept as it is when it was never launched.
fn merge_unlisted(host: &mut Host, now: u64, window: u64) {
    if host.instance_id.is_none() {
        // Never launched (no instance id and no instance carries its tag): keep the record.
        return;
    }
    // Launched moments ago (by this process or another) and not listed yet: EC2's
    // eventual consistency, not a lost host.
    if host
        .launched_at
        .is_some_and(|at| now.saturating_sub(at) < window)
    {
        tracing::debug!(host = %host.id, instance_id = ?host.instance_id, launched_at = ?host.launched_at, "launched within the consistency window and not listed yet: pending");
        if host.state != HostState::Draining {
            host.state = HostState::Pending;
        }
    } else {
        // Recorded with an instance id the cloud no longer lists: it is gone.
        host.state = HostState::Terminated;
    }
}

/// What a host's agent reported: MPS health, the health checks, the heartbeat and
/// the GPU inventory (clamped to what the instance type has). A heartbeat is never
/// later than `now`: a report stamped ahead (a clock ahead, or a forged time) does not
/// keep a host "heard from" for ever (issue 46).
fn merge_report(host: &mut Host, r: &HostReport, now: u64) {
    host.mps_health = r.mps_health;
    host.health = r.health.clone();
    let at = r.at.min(now);
    host.last_heartbeat = Some(host.last_heartbeat.map_or(at, |h| h.min(now).max(at)));
    if !r.gpus.is_empty() {
        let (gpus, clamped) = gpushare_core::model::clamp_inventory(&host.instance_type, &r.gpus);
        if let Some(why) = clamped {
            tracing::warn!(host = %host.id, "{why}");
        }
        host.gpus = gpus;
    }
}

/// Task states from their hosts' reports; tasks on a host that is gone and were not
/// stopped are failed.
fn merge_tasks(state: &mut StoreState, reports: &BTreeMap<&str, &HostReport>) {
    for task in state.tasks.values_mut() {
        let host = state.hosts.get(&task.host);
        let host_gone = host.is_none_or(|h| h.state == HostState::Terminated);
        if let Some(s) = reports
            .get(task.host.as_str())
            .and_then(|r| r.tasks.get(&task.id))
        {
            task.state = *s;
        }
        if host_gone && !matches!(task.state, TaskState::Stopped | TaskState::Failed) {
            task.state = TaskState::Failed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpushare_core::model::{GpuInfo, Host, MpsHealth, Task, TaskShape};

    fn host(id: &str, instance: Option<&str>, state: HostState) -> Host {
        Host {
            log_request: None,
            id: id.into(),
            instance_id: instance.map(Into::into),
            capacity_provider: "p".into(),
            gpu_instance: None,
            instance_type: "g5.xlarge".into(),
            zone: None,
            state,
            mps_health: MpsHealth::Unknown,
            health: Default::default(),
            gpus: vec![],
            cpu_units: 4096,
            memory_mib: 16384,
            launch_token: format!("tok-{id}"),
            last_heartbeat: None,
            launched_at: None,
            subnet: None,
            image_id: None,
            launch: None,
            market: Default::default(),
            max_price: None,
            registration: None,
            hold: None,
        }
    }

    fn cloud(id: &str, instance: &str, state: HostState) -> CloudHost {
        CloudHost {
            instance_id: instance.into(),
            host_id: id.into(),
            capacity_provider: "p".into(),
            instance_type: "g5.xlarge".into(),
            zone: Some("local-1b".into()),
            state,
            launch_token: format!("tok-{id}"),
            store_id: Some("s-mine".into()),
        }
    }

    fn task(id: &str, host: &str) -> Task {
        Task {
            ports: Vec::new(),
            id: id.into(),
            service: "s".into(),
            family: "f".into(),
            revision: 1,
            host: host.into(),
            gpus: vec![0],
            shape: TaskShape::default(),
            state: TaskState::Pending,
            job: None,
            scrape: None,
        }
    }

    fn state() -> StoreState {
        let mut s = StoreState {
            serial: 7,
            cluster: "c".into(),
            store_id: "s-mine".into(),
            ..StoreState::default()
        };
        for h in [
            host("h-run", Some("i-1"), HostState::Pending),
            host("h-lost", Some("i-2"), HostState::Running),
            host("h-drain", Some("i-3"), HostState::Draining),
            host("h-unlaunched", None, HostState::Pending),
            host("h-tagged", None, HostState::Pending),
        ] {
            s.hosts.insert(h.id.clone(), h);
        }
        for (t, h) in [("t-1", "h-run"), ("t-2", "h-lost"), ("t-3", "h-drain")] {
            s.tasks.insert(t.into(), task(t, h));
        }
        s
    }

    #[test]
    fn merge_takes_host_state_from_the_cloud_and_health_from_reports() {
        let clouds = [
            cloud("h-run", "i-1", HostState::Running),
            cloud("h-drain", "i-3", HostState::Running),
            cloud("h-tagged", "i-4", HostState::Running),
            cloud("h-stray", "i-5", HostState::Running),
            cloud("h-dead-stray", "i-6", HostState::Terminated),
        ];
        let gpus = vec![GpuInfo::new(0, "a10g", 22888)];
        let reports = [
            HostReport {
                logs: None,
                address: None,
                host_id: "h-run".into(),
                at: 90,
                mps_health: MpsHealth::Healthy,
                health: Default::default(),
                gpus: gpus.clone(),
                tasks: [("t-1".to_string(), TaskState::Running)].into(),
                agent_version: String::new(),
                mps_error: None,
                mps_failures: 0,
                task_details: Default::default(),
                agent_at: None,
                unreadable: None,
            },
            HostReport {
                logs: None,
                address: None,
                host_id: "h-drain".into(),
                at: 50,
                mps_health: MpsHealth::Impaired,
                health: Default::default(),
                gpus: vec![],
                tasks: [("t-3".to_string(), TaskState::Failed)].into(),
                agent_version: String::new(),
                mps_error: None,
                mps_failures: 0,
                task_details: Default::default(),
                agent_at: None,
                unreadable: None,
            },
        ];
        let live = merge(state(), &clouds, &reports, 100);
        let h = &live.state.hosts;
        assert_eq!(live.observed_at, 100);
        assert_eq!(live.state.serial, 7);
        assert_eq!(
            (
                h["h-run"].state,
                h["h-run"].mps_health,
                h["h-run"].last_heartbeat
            ),
            (HostState::Running, MpsHealth::Healthy, Some(90))
        );
        assert_eq!(h["h-run"].gpus, gpus);
        assert_eq!(h["h-run"].zone.as_deref(), Some("local-1b"));
        assert_eq!(
            h["h-lost"].state,
            HostState::Terminated,
            "the cloud lost it"
        );
        assert_eq!(
            h["h-drain"].state,
            HostState::Draining,
            "draining is the store's intent"
        );
        assert_eq!(h["h-drain"].mps_health, MpsHealth::Impaired);
        assert_eq!(h["h-unlaunched"].state, HostState::Pending);
        assert_eq!(
            h["h-tagged"].instance_id.as_deref(),
            Some("i-4"),
            "found by its host-id tag"
        );
        let t = &live.state.tasks;
        assert_eq!(t["t-1"].state, TaskState::Running);
        assert_eq!(t["t-2"].state, TaskState::Failed, "its host is gone");
        assert_eq!(t["t-3"].state, TaskState::Failed, "as reported");
        let strays: Vec<_> = live.strays.iter().map(|s| s.instance_id.as_str()).collect();
        assert_eq!(strays, ["i-5"]);
    }

    /// Regression (issue 30, repros 3 and 4): a host's report that claims more GPUs,
    /// or more memory per GPU, than its instance type has is held to the catalogue; a
    /// report the store could not take gives its host nothing (no heartbeat: it turns
    /// silent), and the other hosts' reports still count.
    #[test]
    fn inflated_inventories_are_clamped_and_unreadable_reports_give_nothing() {
        let clouds = [
            cloud("h-run", "i-1", HostState::Running),
            cloud("h-drain", "i-3", HostState::Running),
        ];
        let catalogue = gpushare_core::catalog::lookup("g5.xlarge").expect("g5.xlarge");
        let inflated: Vec<GpuInfo> = (0..8)
            .map(|i| GpuInfo::new(i, "a10g", 1_000_000_000))
            .chain([GpuInfo::new(0, "a10g", 1)])
            .collect();
        let reports = [
            HostReport {
                host_id: "h-run".into(),
                at: 90,
                mps_health: MpsHealth::Healthy,
                health: Default::default(),
                gpus: inflated,
                ..HostReport::default()
            },
            HostReport::from_stored("h-drain", b"not json"),
        ];
        let live = merge(state(), &clouds, &reports, 100);
        let h = &live.state.hosts;
        assert_eq!(
            h["h-run"].gpus,
            vec![GpuInfo::new(0, "a10g", catalogue.gpu_memory_mib)],
            "one GPU of the catalogue's memory"
        );
        assert_eq!(h["h-run"].last_heartbeat, Some(90));
        assert_eq!(
            (h["h-drain"].last_heartbeat, h["h-drain"].mps_health),
            (None, MpsHealth::Unknown)
        );
        let (_, why) = gpushare_core::model::clamp_inventory("g5.xlarge", &reports[0].gpus);
        let why = why.expect("flagged");
        assert!(
            why.contains("7 GPU(s) beyond the 1") && why.contains("twice"),
            "{why}"
        );
    }

    #[test]
    fn merge_without_reports_keeps_unknown_health_and_no_heartbeat() {
        let live = merge(
            state(),
            &[cloud("h-run", "i-1", HostState::ShuttingDown)],
            &[],
            5,
        );
        let h = &live.state.hosts["h-run"];
        assert_eq!(
            (h.state, h.mps_health, h.last_heartbeat),
            (HostState::ShuttingDown, MpsHealth::Unknown, None)
        );
        assert_eq!(live.state.tasks["t-1"].state, TaskState::Pending);
        assert!(live.strays.is_empty());
    }

    /// Regression (issue 15, store takeover): another store of the same cluster name
    /// plans the same host ids; its instances are never matched, never strays.
    #[test]
    fn merge_never_matches_another_stores_instances() {
        let theirs = |id: &str, instance: &str| CloudHost {
            store_id: Some("s-theirs".into()),
            ..cloud(id, instance, HostState::Running)
        };
        let clouds = [
            cloud("h-run", "i-1", HostState::Running),
            // Same host id and token as this store's unlaunched hosts.
            theirs("h-unlaunched", "i-7"),
            theirs("h-tagged", "i-8"),
            // Same instance id as recorded (cannot happen in EC2, but never adopt it).
            theirs("h-drain", "i-3"),
            CloudHost {
                state: HostState::Terminated,
                ..theirs("h-old", "i-9")
            },
        ];
        let live = merge(state(), &clouds, &[], 100);
        let h = &live.state.hosts;
        assert_eq!(h["h-unlaunched"].instance_id, None);
        assert_eq!(h["h-tagged"].instance_id, None);
        assert_eq!(h["h-drain"].state, HostState::Terminated, "not ours");
        assert!(live.strays.is_empty(), "{:?}", live.strays);
        let foreign: Vec<_> = live
            .foreign
            .iter()
            .map(|f| f.instance_id.as_str())
            .collect();
        assert_eq!(foreign, ["i-7", "i-8", "i-3"]);
        assert!(live.adopted.is_empty());
    }

    /// Migration: instances launched before store identity carry no store-id tag;
    /// this store adopts the ones it recorded (or whose launch token is its own).
    #[test]
    fn merge_adopts_untagged_instances_of_its_own_hosts_with_a_note() {
        let untagged = |id: &str, instance: &str| CloudHost {
            store_id: None,
            ..cloud(id, instance, HostState::Running)
        };
        let clouds = [
            untagged("h-run", "i-1"),
            untagged("h-tagged", "i-4"),
            // Same host id as this store's unlaunched host, but another token.
            CloudHost {
                launch_token: "tok-of-someone-else".into(),
                ..untagged("h-unlaunched", "i-5")
            },
        ];
        let live = merge(state(), &clouds, &[], 100);
        let h = &live.state.hosts;
        assert_eq!(h["h-run"].state, HostState::Running);
        assert_eq!(h["h-tagged"].instance_id.as_deref(), Some("i-4"));
        assert_eq!(h["h-unlaunched"].instance_id, None);
        let adopted: Vec<_> = live
            .adopted
            .iter()
            .map(|a| a.instance_id.as_str())
            .collect();
        assert_eq!(adopted, ["i-1", "i-4"]);
        let strays: Vec<_> = live.strays.iter().map(|s| s.instance_id.as_str()).collect();
        assert_eq!(strays, ["i-5"]);
        assert!(live.foreign.is_empty());
        // A store without identity (one that does not fill store_id) matches them
        // as before and has nothing to adopt them with.
        let anonymous = StoreState {
            store_id: String::new(),
            ..state()
        };
        let live = merge(anonymous, &clouds, &[], 100);
        assert_eq!(
            live.state.hosts["h-tagged"].instance_id.as_deref(),
            Some("i-4")
        );
        assert!(live.adopted.is_empty());
    }

    /// Regression (issue 14): only the launching process rode out EC2's eventual
    /// consistency; another process observing right after the launch found the
    /// recorded instance missing from DescribeInstances and marked the host
    /// terminated (and the next plan launched it again).
    #[test]
    fn a_host_launched_within_the_window_and_not_listed_yet_is_pending() {
        let mut s = state();
        for (id, at) in [("h-lost", 1000), ("h-drain", 700)] {
            if let Some(h) = s.hosts.get_mut(id) {
                h.launched_at = Some(at);
            }
        }
        let clouds = [cloud("h-run", "i-1", HostState::Running)];
        // 200 s after h-lost's launch: within a 300 s window.
        let live = merge_within(s.clone(), &clouds, &[], 1200, 300);
        let h = &live.state.hosts;
        assert_eq!(h["h-lost"].state, HostState::Pending);
        assert_eq!(h["h-lost"].instance_id.as_deref(), Some("i-2"));
        assert_eq!(
            live.state.tasks["t-2"].state,
            TaskState::Pending,
            "its task is not failed"
        );
        // Launched 500 s ago: gone. A clock behind the launch's counts as fresh.
        assert_eq!(h["h-drain"].state, HostState::Terminated);
        assert_eq!(
            merge_within(s.clone(), &clouds, &[], 900, 300).state.hosts["h-lost"].state,
            HostState::Pending
        );
        // After the window, or with none, or with no recorded launch time: terminated.
        for (now, window) in [(1300, 300), (1200, 0)] {
            let live = merge_within(s.clone(), &clouds, &[], now, window);
            assert_eq!(live.state.hosts["h-lost"].state, HostState::Terminated);
            assert_eq!(live.state.tasks["t-2"].state, TaskState::Failed);
        }
        let live = merge_within(state(), &clouds, &[], 1200, 300);
        assert_eq!(live.state.hosts["h-lost"].state, HostState::Terminated);
    }

    #[tokio::test]
    async fn observe_errors_name_the_store_or_the_cloud() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = crate::store::FileStore::open(dir.path()).expect("store");
        let cloud = crate::cloud::LocalCloud::open(dir.path()).expect("cloud");
        let live = observe(&store, &cloud, "c", 3).await.expect("empty world");
        assert_eq!((live.state.cluster.as_str(), live.observed_at), ("c", 3));

        std::fs::write(cloud.fleet_path(), b"[").expect("write");
        let e = observe(&store, &cloud, "c", 3)
            .await
            .expect_err("corrupt fleet");
        assert!(
            matches!(e, ObserveError::Cloud { cloud: "local", .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("\"c\""), "{e}");

        std::fs::write(dir.path().join("state.json"), b"{").expect("write");
        let e = observe(&store, &cloud, "c", 3)
            .await
            .expect_err("corrupt state");
        let ObserveError::Store { location, source } = &e else {
            panic!("expected a store error, got {e:?}");
        };
        assert!(location.starts_with("file://"), "{location}");
        assert!(source.to_string().contains("state.json"), "{source}");
    }
}

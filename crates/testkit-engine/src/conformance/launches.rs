//! Launches fixed in the plan, refused for capacity, side by side; the scheduled
//! event of a silent host.

use super::{agents_round, desired, opts, Env, StoreFactory, CLUSTER};
use gpushare_core::model::Desired;
use gpushare_core::plan;
use gpushare_engine::apply::{self, ApplyContext, ApplyError};
use gpushare_engine::cloud::{Cloud, CloudError, Fault, LaunchRequest, LocalCloud};
use gpushare_engine::observe::observe;
use std::time::Duration;

/// Two embedders on a pool of at least three hosts, with zone local-1b out of capacity.
async fn three_hosts_and_local_1b_full(stores: &dyn StoreFactory) -> (Env, Desired) {
    let env = Env::new(stores).await;
    let mut d = desired(2, 0);
    if let Some(p) = d.capacity_providers.get_mut("l4") {
        p.min_size = 3;
    }
    env.cloud
        .set_zone_full("local-1b", true)
        .expect("full zone");
    (env, d)
}

/// Gather, then plan: every launch is fixed in the plan (zone, subnet, image) and
/// carried out exactly; a zone without capacity fails its launch, is recorded in the
/// state, and the next plan launches elsewhere, with no duplicate instance. (The
/// local fleet's "full zone" is a simulated shortage: EC2's InsufficientInstanceCapacity
/// is tested against moto in the ec2 crate.)
pub async fn a_zone_without_capacity_is_recorded_and_the_next_plan_launches_elsewhere(
    stores: &dyn StoreFactory,
) {
    let (mut env, d) = three_hosts_and_local_1b_full(stores).await;
    let p = env.plan(&d, &opts()).await.1;
    let fixed: Vec<(Option<String>, Option<String>, Option<String>)> = p
        .launches
        .iter()
        .map(|l| {
            (
                l.host.zone.clone(),
                l.host.subnet.clone(),
                l.host.image_id.clone(),
            )
        })
        .collect();
    let zone = |z: &str| {
        (
            Some(format!("local-{z}")),
            Some(format!("subnet-local-{z}")),
            Some("ami-local-gpu".to_string()),
        )
    };
    assert_eq!(fixed, [zone("1a"), zone("1b"), zone("1c")]);

    // The launch into local-1b is refused: the step fails, the refusal is recorded,
    // what was launched before it is kept, and no journal is left to redo it.
    match apply::apply(&p, &env.ctx()).await {
        Err(ApplyError::CapacityRefused { source, .. }) => {
            assert!(source.to_string().contains("local-1b"), "{source}")
        }
        other => panic!("expected CapacityRefused, got {other:?}"),
    }
    let st = env.state().await;
    assert_eq!(st.capacity_refusals.len(), 1, "{:?}", st.capacity_refusals);
    assert_eq!(st.capacity_refusals[0].zone.as_deref(), Some("local-1b"));
    assert_eq!(
        st.hosts.len(),
        1,
        "the host launched before the refusal is kept"
    );
    assert!(env.store.read_journal().await.expect("journal").is_none());
    env.assert_consistent().await;

    // The next plan avoids local-1b for the while the refusal counts.
    let p = env.plan(&d, &opts()).await.1;
    let zones: Vec<_> = p
        .launches
        .iter()
        .map(|l| l.host.zone.clone().unwrap_or_default())
        .collect();
    assert_eq!(zones, ["local-1c", "local-1a"]);
    apply::apply(&p, &env.ctx()).await.expect("apply elsewhere");
    env.assert_consistent().await;
    let st = env.state().await;
    assert_eq!(st.hosts.len(), 3);
    assert!(st
        .hosts
        .values()
        .all(|h| h.zone.as_deref() != Some("local-1b")));
    // Each host runs where the plan put it.
    let instances = env.cloud.instances().expect("fleet");
    for h in st.hosts.values() {
        let i = instances
            .iter()
            .find(|i| i.host_id == h.id)
            .expect("instance");
        assert_eq!(Some(&i.zone), h.zone.as_ref(), "{}", h.id);
    }
}

/// A cloud that launches a wave side by side, as EC2 does (`launch_many`): every
/// launch of the wave was already under way when one failed, so every one has a
/// result. The local fleet underneath.
struct SideBySide<'a>(&'a LocalCloud);

#[async_trait::async_trait]
impl Cloud for SideBySide<'_> {
    fn kind(&self) -> &'static str {
        self.0.kind()
    }
    async fn gather(
        &self,
        pools: &std::collections::BTreeMap<String, gpushare_core::model::CapacityProvider>,
    ) -> Result<gpushare_core::facts::CloudFacts, CloudError> {
        self.0.gather(pools).await
    }
    async fn list_hosts(
        &self,
        cluster: &str,
    ) -> Result<Vec<gpushare_core::model::CloudHost>, CloudError> {
        self.0.list_hosts(cluster).await
    }
    async fn launch(
        &self,
        req: &LaunchRequest<'_>,
    ) -> Result<gpushare_core::model::CloudHost, CloudError> {
        self.0.launch(req).await
    }
    async fn launch_many(
        &self,
        reqs: &[LaunchRequest<'_>],
    ) -> Vec<Result<gpushare_core::model::CloudHost, CloudError>> {
        let mut out = Vec::new();
        for req in reqs {
            out.push(self.0.launch(req).await);
        }
        out
    }
    async fn terminate(
        &self,
        cluster: &str,
        store_id: &str,
        instance_id: &str,
    ) -> Result<(), CloudError> {
        self.0.terminate(cluster, store_id, instance_id).await
    }
    async fn claim(
        &self,
        cluster: &str,
        store_id: &str,
        instance_id: &str,
    ) -> Result<(), CloudError> {
        self.0.claim(cluster, store_id, instance_id).await
    }
    async fn preflight(&self, requests: &[LaunchRequest<'_>]) -> Result<(), CloudError> {
        self.0.preflight(requests).await
    }
}

/// A wave launched side by side in which the middle launch meets no capacity: the
/// hosts launched before it and after it are both recorded (none is left running
/// unknown to the state), the refusal is recorded, and the next plan launches only
/// the one host still missing, elsewhere.
pub async fn launches_that_finish_after_a_failed_one_in_a_wave_are_recorded(
    stores: &dyn StoreFactory,
) {
    let (mut env, d) = three_hosts_and_local_1b_full(stores).await;
    let p = env.plan(&d, &opts()).await.1;
    let zones: Vec<_> = p.launches.iter().map(|l| l.host.zone.clone()).collect();
    let zone = |z: &str| Some(format!("local-{z}"));
    assert_eq!(zones, [zone("1a"), zone("1b"), zone("1c")]);
    let cloud = SideBySide(&env.cloud);
    let mut ctx = ApplyContext::new(&*env.store, &cloud);
    ctx.lock_timeout = Duration::from_secs(2);
    match apply::apply(&p, &ctx).await {
        Err(ApplyError::CapacityRefused { source, .. }) => {
            assert!(source.to_string().contains("local-1b"), "{source}")
        }
        other => panic!("expected CapacityRefused, got {other:?}"),
    }
    let st = env.state().await;
    let mut recorded: Vec<_> = st.hosts.values().map(|h| h.zone.clone()).collect();
    recorded.sort();
    assert_eq!(
        recorded,
        [zone("1a"), zone("1c")],
        "both launches around the refusal"
    );
    assert_eq!(st.capacity_refusals.len(), 1, "{:?}", st.capacity_refusals);
    assert!(env.store.read_journal().await.expect("journal").is_none());
    env.assert_consistent().await;

    let p = env.plan(&d, &opts()).await.1;
    assert_eq!(
        p.launches.len(),
        1,
        "only the refused host is launched again"
    );
    assert_ne!(p.launches[0].host.zone, zone("1b"));
    apply::apply(&p, &env.ctx()).await.expect("apply elsewhere");
    env.assert_consistent().await;
    assert_eq!(env.state().await.hosts.len(), 3);
    assert_eq!(env.running_instances().len(), 3, "no duplicate instance");
}

/// The local fleet with a scheduled event on one instance, as EC2's
/// DescribeInstanceStatus lists one; it records the instances it is asked about.
struct WithEvent<'a> {
    cloud: &'a LocalCloud,
    instance: String,
    asked: std::sync::Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl Cloud for WithEvent<'_> {
    fn kind(&self) -> &'static str {
        self.cloud.kind()
    }
    async fn list_hosts(
        &self,
        cluster: &str,
    ) -> Result<Vec<gpushare_core::model::CloudHost>, CloudError> {
        self.cloud.list_hosts(cluster).await
    }
    async fn launch(
        &self,
        req: &LaunchRequest<'_>,
    ) -> Result<gpushare_core::model::CloudHost, CloudError> {
        self.cloud.launch(req).await
    }
    async fn terminate(
        &self,
        cluster: &str,
        store_id: &str,
        instance_id: &str,
    ) -> Result<(), CloudError> {
        self.cloud.terminate(cluster, store_id, instance_id).await
    }
    async fn scheduled_events(
        &self,
        instance_ids: &[String],
    ) -> Result<std::collections::BTreeMap<String, gpushare_core::model::HostNotice>, CloudError>
    {
        self.asked
            .lock()
            .expect("lock")
            .extend(instance_ids.iter().cloned());
        let notice = gpushare_core::model::HostNotice::scheduled(
            "2026-12-09T09:00:00.000Z".into(),
            "instance-retirement".into(),
            "degraded hardware",
            "ec2",
        );
        Ok(instance_ids
            .iter()
            .filter(|i| **i == self.instance)
            .map(|i| (i.clone(), notice.clone()))
            .collect())
    }
}

/// A host whose agent is silent cannot report EC2's notice: observe reads the
/// cloud's scheduled events for it (and for no host that reports), and the plan
/// drains it at once, long before the heartbeat timeout would.
pub async fn a_silent_hosts_scheduled_event_drains_it_before_its_heartbeat_timeout(
    stores: &dyn StoreFactory,
) {
    let mut env = Env::new(stores).await;
    let (d, silent) = env.settled_fleet().await;
    let st = env.state().await;
    let instance = st.hosts[&silent].instance_id.clone().expect("launched");
    env.cloud
        .inject_fault(CLUSTER, &silent, Fault::Silent)
        .expect("fault");
    // Silent for 60 s, within the 300 s timeout: the local fleet alone says nothing.
    assert!(env.plan(&d, &opts()).await.1.is_empty());

    env.now += 60;
    agents_round(&env.store, &env.cloud, env.now).await;
    let cloud = WithEvent {
        cloud: &env.cloud,
        instance: instance.clone(),
        asked: Default::default(),
    };
    let mut live = observe(&*env.store, &cloud, CLUSTER, env.now)
        .await
        .expect("observe");
    assert_eq!(*cloud.asked.lock().expect("lock"), [instance]);
    live.facts = env
        .cloud
        .gather(&d.capacity_providers)
        .await
        .expect("gather");
    let p = plan::plan(&d, &live, &opts()).expect("plan");
    let retired: Vec<&str> = p.retirements.iter().map(|r| r.host_id.as_str()).collect();
    assert_eq!(retired, [silent.as_str()], "{p:?}");
    let why = "scheduled instance event at 2026-12-09T09:00:00.000Z (instance-retirement: degraded hardware; from ec2)";
    assert!(
        !p.moves.is_empty() && p.moves.iter().all(|m| m.reason == why),
        "{:?}",
        p.moves
    );
}

//! Rolling host refresh on EC2 (issue 25): the reconcile pass with `Ec2Cloud` against
//! a real moto_server (through the counting proxy, on 127.0.0.1), the file store, and
//! stand-in agents. An image change rolls a 3-host pool one host per pass: each
//! RunInstances of a replacement carries the new ImageId, and each old instance is
//! terminated only after its tasks moved (the move's successor reported running).
//! Moto's instances run nothing, so the agents' reports are written by a stand-in
//! (every task assigned to a running host reported running); the agent's own loop is
//! tested in crates/agent. Addresses moto hands back are never used.

use gpushare_testkit_engine::ec2 as support;

use gpushare_core::model::{Desired, GpuInfo, HostReport, MpsHealth, TaskState};
use gpushare_ec2::api::{self, DescribeImages, Filter};
use gpushare_ec2::{Ec2Cloud, Ec2Options};
use gpushare_engine::agents::HostAgents;
use gpushare_engine::apply::ProgressEvent;
use gpushare_engine::reconcile::{Backends, PassOutcome, Reconciler, Run};
use gpushare_engine::store::{FileStore, Store};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{direct_client, FaultProxy, Moto};

const CLUSTER: &str = "refresh";

static CLOCK: AtomicU64 = AtomicU64::new(2_000_000);

/// Stand-in agents: every host the store records as launched reports now, healthy,
/// with every task assigned to it running.
struct StandInAgents;

#[async_trait::async_trait]
impl HostAgents for StandInAgents {
    async fn round(
        &self,
        store: &Arc<dyn Store>,
        now: u64,
    ) -> Result<Vec<String>, Box<dyn std::error::Error + Send + Sync>> {
        let st = store.load().await?;
        let mut reported = vec![];
        for h in st.hosts.values().filter(|h| h.instance_id.is_some()) {
            let tasks = st
                .tasks
                .values()
                .filter(|t| t.host == h.id)
                .map(|t| (t.id.clone(), TaskState::Running))
                .collect();
            store
                .put_report(&HostReport {
                    host_id: h.id.clone(),
                    at: now,
                    mps_health: MpsHealth::Healthy,
                    gpus: h
                        .gpus
                        .iter()
                        .map(|g| GpuInfo::new(g.index, g.model.clone(), g.memory_mib))
                        .collect(),
                    tasks,
                    ..HostReport::default()
                })
                .await?;
            reported.push(h.id.clone());
        }
        Ok(reported)
    }
}

fn desired(ami: &str, subnets: &[String], sg: &str) -> Desired {
    serde_json::from_value(serde_json::json!({
        "settings": { "cluster": CLUSTER, "seed": 3, "move_timeout_seconds": 5,
            // Written into the user data only; nothing connects to it.
            "controller_address": "https://controller.internal:7443" },
        "capacity_providers": { "l4": {
            "instance_type": "g6.xlarge", "min_size": 3, "max_size": 6, "image": ami,
            "subnets": subnets, "security_groups": [sg], "max_draining_percent": 34 } },
        "gpu_instances": {},
        "task_definitions": {
            "embedder": { "container": [{ "name": "server", "image": "embedder:1.4", "cpu": 1024, "memory": 2048,
                "gpu": { "mps": { "memory": 8192 } } }] },
        },
        "services": {
            "embedder": { "task_definition": "embedder", "capacity_provider": "l4", "desired_count": 3, "distinct_host": true },
        },
    }))
    .expect("desired")
}

/// Two Linux AMIs moto knows (the old and the new image).
async fn two_amis(direct: &api::Client) -> (String, String) {
    let images = direct
        .describe_images(&DescribeImages {
            owners: vec!["amazon".into()],
            filters: vec![
                Filter::new("architecture", &["x86_64"]),
                Filter::new("root-device-type", &["ebs"]),
            ],
            ..DescribeImages::default()
        })
        .await
        .expect("describe images");
    let mut ids = images
        .into_iter()
        .filter(|i| i.platform.is_none())
        .filter_map(|i| i.image_id);
    let a = ids.next().expect("a linux AMI in moto");
    let b = ids.find(|b| *b != a).expect("a second linux AMI in moto");
    (a, b)
}

async fn pass(r: &Reconciler, d: &Desired, events: &Mutex<Vec<String>>) -> PassOutcome {
    CLOCK.fetch_add(60, Ordering::SeqCst);
    events.lock().expect("events").clear();
    let progress = |e: &ProgressEvent| {
        if let ProgressEvent::StepStarted { description, .. } = e {
            events.lock().expect("events").push(description.clone());
        }
    };
    r.pass(
        d,
        Run {
            cancel: None,
            progress: Some(&progress),
        },
    )
    .await
    .expect("pass")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_change_rolls_the_ec2_hosts_one_per_pass_start_before_stop() {
    support::test_env();
    let moto = Moto::start();
    let direct = direct_client(&moto.endpoint());
    let fx = support::Fixture::create(&direct).await;
    let (ami_a, ami_b) = two_amis(&direct).await;
    let proxy = FaultProxy::start(moto.addr).await;
    let cloud = Ec2Cloud::connect(Ec2Options {
        region: Some(support::REGION.into()),
        endpoint: Some(proxy.endpoint()),
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(200),
        confirm_timeout: Duration::from_secs(10),
        ..Ec2Options::default()
    })
    .await
    .expect("connect");
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn Store> = Arc::new(FileStore::open(dir.path()).expect("store"));
    let backends = Backends {
        store: store.clone(),
        cloud: Arc::new(cloud),
        local: None,
        // Each launch mints its host's join token in the store, as in production.
        joins: Some(Arc::new(gpushare_agent_api::StoreIssuer)),
        state_dir: None,
        agents: Some(Arc::new(StandInAgents)),
        consistency_window_seconds: 300,
        balancer: None,
    };
    let r = Reconciler::new(backends, "refresh moto test")
        .with_clock(|| CLOCK.load(Ordering::SeqCst))
        .with_move_poll(Duration::from_millis(50));
    let subnets: Vec<String> = fx.subnets.iter().map(|s| s.0.clone()).collect();
    let events = Mutex::new(vec![]);

    let d = desired(&ami_a, &subnets, &fx.sg);
    pass(&r, &d, &events).await;
    r.run_agents().await.expect("agents");
    let live = support::live_instances(&direct, CLUSTER).await;
    assert_eq!(live.len(), 3);
    assert!(live
        .iter()
        .all(|i| i.image_id.as_deref() == Some(ami_a.as_str())));
    let old: Vec<String> = live.iter().filter_map(|i| i.instance_id.clone()).collect();

    let d = desired(&ami_b, &subnets, &fx.sg);
    for n in 1..=3 {
        proxy.reset_calls();
        let out = pass(&r, &d, &events).await;
        assert_eq!(out.plan.refreshes[0].now.len(), 1, "pass {n}");
        let report = out.applied.expect("applied");
        assert!(
            report.unconfirmed.is_empty() && report.moves_held.is_empty(),
            "pass {n}: {report:?}"
        );
        let calls = proxy.calls();
        let runs: Vec<_> = calls
            .iter()
            .filter(|c| c.action == "RunInstances")
            .collect();
        assert_eq!(runs.len(), 1, "pass {n}: one replacement");
        assert_eq!(runs[0].params.get("ImageId"), Some(&ami_b), "pass {n}");
        let terminated: Vec<&String> = calls
            .iter()
            .filter(|c| c.action == "TerminateInstances")
            .filter_map(|c| c.params.get("InstanceId.1"))
            .collect();
        assert_eq!(
            terminated.len(),
            1,
            "pass {n}: {calls:?}",
            calls = calls.iter().map(|c| &c.action).collect::<Vec<_>>()
        );
        assert!(
            old.contains(terminated[0]),
            "pass {n}: an old instance is terminated"
        );
        // Start before stop: launch, then the move (apply waits for its successor to
        // be reported running before removing the old task), then the retirement.
        let ev = events.lock().expect("events").clone();
        let at = |p: &str| {
            ev.iter()
                .position(|e| e.starts_with(p))
                .unwrap_or_else(|| panic!("no {p} in {ev:?}"))
        };
        assert!(
            at("launch host") < at("move task") && at("move task") < at("retire host"),
            "{ev:?}"
        );
        let st = store.load().await.expect("load");
        let retired = &out.plan.retirements[0].host_id;
        assert!(!st.hosts.contains_key(retired));
        assert!(st.tasks.values().all(|t| &t.host != retired));
        assert_eq!(st.tasks.len(), 3);
        r.run_agents().await.expect("agents");
    }
    let live = support::live_instances(&direct, CLUSTER).await;
    assert_eq!(live.len(), 3);
    assert!(
        live.iter()
            .all(|i| i.image_id.as_deref() == Some(ami_b.as_str())),
        "every host on the new image"
    );
    assert!(!pass(&r, &d, &events).await.changed());
}

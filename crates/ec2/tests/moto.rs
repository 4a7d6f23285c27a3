//! `Ec2Cloud` against a real moto_server (one per test, on 127.0.0.1), through the
//! fault-injecting proxy. Moto ignores client tokens, so idempotency here rests on the
//! launch-token tag lookup, as it must.

use gpushare_testkit_engine::ec2 as support;

use gpushare_core::model::{CapacityProvider, Host, HostState};
use gpushare_ec2::api::{self, Filter, Instance, InstanceStateName, Tag};
use gpushare_ec2::{render_user_data, tags, Ec2Cloud, Ec2Options, UserDataInput};
use gpushare_engine::cloud::{Cloud, CloudError, LaunchRequest};
use std::time::{Duration, Instant};
use support::{direct_client, tag_of, Fault, FaultProxy, Moto, Rule};

const CLUSTER: &str = "test";
/// How launched hosts join (an address never dialled: these hosts never boot).
static JOIN: std::sync::LazyLock<gpushare_engine::join::JoinGrant> =
    std::sync::LazyLock::new(|| gpushare_engine::join::JoinGrant {
        server: "https://controller.internal:7443".into(),
        token: "0a1b2c3d.00112233445566778899aabbccddeeff".into(),
        ca_hash: format!("sha256:{}", "ab".repeat(32)),
    });
/// The launching store's identity.
const STORE_ID: &str = "0123456789abcdef";

struct Env {
    moto: Moto,
    proxy: FaultProxy,
    direct: api::Client,
    cloud: Ec2Cloud,
    ami: String,
    /// (subnet id, zone)
    subnets: Vec<(String, String)>,
    sg: String,
    /// The AMI's root device name, as gather reports it (the plan carries it).
    root: String,
    /// Hosts planned so far ([`Env::host`]), for the subnet each is planned in.
    planned: std::cell::Cell<usize>,
}

async fn env() -> Env {
    support::test_env();
    let moto = Moto::start();
    let direct = direct_client(&moto.endpoint());
    let support::Fixture { ami, subnets, sg } = support::Fixture::create(&direct).await;
    let root = direct
        .describe_images(&api::DescribeImages {
            image_ids: vec![ami.clone()],
            ..api::DescribeImages::default()
        })
        .await
        .expect("describe the fixture's image")
        .into_iter()
        .next()
        .and_then(|i| i.root_device_name)
        .expect("a root device");
    let proxy = FaultProxy::start(moto.addr).await;
    let cloud = Ec2Cloud::connect(Ec2Options {
        region: Some(support::REGION.into()),
        endpoint: Some(proxy.endpoint()),
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(200),
        confirm_timeout: Duration::from_secs(10),
        page_size: None,
        ..Ec2Options::default()
    })
    .await
    .expect("connect");
    Env {
        moto,
        proxy,
        direct,
        cloud,
        ami,
        subnets,
        sg,
        root,
        planned: std::cell::Cell::new(0),
    }
}

impl Env {
    /// A host as the planner fixes it from the cloud's facts: the pool's image, its
    /// subnets in turn, the subnet's zone (the cloud launches exactly this).
    fn host(&self, id: &str, pool: &str, instance_type: &str) -> Host {
        let mut h = host(id, pool, instance_type);
        let n = self.planned.get();
        self.planned.set(n + 1);
        let (subnet, zone) = &self.subnets[n % self.subnets.len()];
        h.image_id = Some(self.ami.clone());
        h.subnet = Some(subnet.clone());
        h.zone = Some(zone.clone());
        h
    }

    /// The launch request of a planned host, with the image's root device.
    fn req<'a>(&'a self, host: &'a Host, pool: &'a CapacityProvider) -> LaunchRequest<'a> {
        LaunchRequest {
            cluster: CLUSTER,
            host,
            pool,
            root_device: Some(&self.root),
            join: Some(&JOIN),
            store_id: STORE_ID,
        }
    }

    fn pool(&self, extra: serde_json::Value) -> CapacityProvider {
        let base = serde_json::json!({
            "instance_type": "g6.xlarge",
            "max_size": 30,
            "image": self.ami,
            "subnets": self.subnets.iter().map(|s| s.0.clone()).collect::<Vec<_>>(),
            "security_groups": [self.sg],
            "tags": { "team": "ml" },
            "metadata_options": { "http_put_response_hop_limit": 2 },
            "agent": {
                "url": "https://downloads.example.com/gpushare/0.1.0/gpushare-x86_64-linux",
                "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
            }
        });
        support::pool_from_json(base, extra)
    }

    /// Instances of the cluster in moto that are not terminated, counted directly.
    async fn live_instances(&self) -> Vec<Instance> {
        support::live_instances(&self.direct, CLUSTER).await
    }

    async fn all_instances(&self) -> Vec<Instance> {
        support::describe(&self.direct, api::DescribeInstances::default()).await
    }
}

fn host(id: &str, pool: &str, instance_type: &str) -> Host {
    serde_json::from_value(serde_json::json!({
        "id": id, "capacity_provider": pool, "instance_type": instance_type, "state": "pending",
        "gpus": [], "cpu_units": 4096, "memory_mib": 16384, "launch_token": format!("lt-{id}")
    }))
    .expect("valid host")
}

#[tokio::test]
async fn launch_sets_type_tags_imdsv2_and_the_mps_bootstrap() {
    let e = env().await;
    let pool = e.pool(serde_json::json!({}));
    let h = e.host("h-l4-000001", "l4", "g6.xlarge");
    let got = e.cloud.launch(&e.req(&h, &pool)).await.expect("launch");
    assert_eq!(got.host_id, "h-l4-000001");
    assert_eq!(got.launch_token, "lt-h-l4-000001");
    assert!(matches!(got.state, HostState::Pending | HostState::Running));

    let live = e.live_instances().await;
    assert_eq!(live.len(), 1);
    let inst = &live[0];
    assert_eq!(inst.instance_id.as_deref(), Some(got.instance_id.as_str()));
    assert_eq!(inst.instance_type.as_deref(), Some("g6.xlarge"));
    assert_eq!(inst.image_id.as_deref(), Some(e.ami.as_str()));
    assert!(e
        .subnets
        .iter()
        .any(|(s, _)| inst.subnet_id.as_deref() == Some(s.as_str())));
    for (k, v) in [
        (tags::CLUSTER, CLUSTER),
        (tags::POOL, "l4"),
        (tags::HOST_ID, "h-l4-000001"),
        (tags::LAUNCH_TOKEN, "lt-h-l4-000001"),
        (tags::MANAGED_BY, "gpushare"),
        (tags::STORE_ID, STORE_ID),
        ("team", "ml"),
    ] {
        assert_eq!(tag_of(inst, k), Some(v), "tag {k}");
    }

    // IMDSv2 required with the pool's hop limit: on the request the proxy saw, and in
    // moto's DescribeInstances answer.
    let runs: Vec<_> = e
        .proxy
        .calls()
        .into_iter()
        .filter(|c| c.action == "RunInstances")
        .collect();
    assert_eq!(runs.len(), 1);
    let p = &runs[0].params;
    for (param, want) in [
        ("MetadataOptions.HttpTokens", "required"),
        ("MetadataOptions.HttpPutResponseHopLimit", "2"),
        ("TagSpecification.2.ResourceType", "volume"),
        ("BlockDeviceMapping.1.Ebs.Encrypted", "true"),
        ("SecurityGroupId.1", e.sg.as_str()),
    ] {
        assert_eq!(p.get(param).map(String::as_str), Some(want), "{param}");
    }
    assert!(p.get("ClientToken").is_some_and(|t| !t.is_empty()));
    let md = inst
        .metadata_options
        .as_ref()
        .expect("moto reports metadata options");
    assert_eq!(md.http_tokens.as_deref(), Some("required"));
    assert_eq!(md.http_put_response_hop_limit, Some(2));

    // The volumes carry the tags too.
    let vols = support::volumes(
        &e.direct,
        &[],
        &[Filter::new(
            format!("tag:{}", tags::HOST_ID),
            &["h-l4-000001"],
        )],
    )
    .await;
    assert!(!vols.is_empty(), "root volume tagged with the host id");

    // User data decodes to the MPS bootstrap for this host.
    let script = support::user_data(&e.direct, &got.instance_id).await;
    let expected = render_user_data(&UserDataInput {
        cluster: CLUSTER,
        pool_name: "l4",
        pool: &pool,
        host_id: "h-l4-000001",
        join: &JOIN,
    })
    .expect("render");
    assert_eq!(script, expected);
    assert!(script.contains("ExecStart=/usr/bin/nvidia-cuda-mps-control -f"));
    assert!(script.contains("nvidia-smi -c EXCLUSIVE_PROCESS"));
    assert!(script.contains("--host-id h-l4-000001 --cluster test"));
    assert!(script.contains("agent --server https://controller.internal:7443 --ca-hash sha256:"));
}

#[tokio::test]
async fn a_second_launch_with_the_same_token_launches_nothing() {
    let e = env().await;
    let pool = e.pool(serde_json::json!({}));
    let h = e.host("h-l4-000002", "l4", "g6.xlarge");
    let first = e.cloud.launch(&e.req(&h, &pool)).await.expect("launch");
    // A fresh backend (as after a crash and a new process) must find it by its tag.
    let again = Ec2Cloud::connect(Ec2Options {
        region: Some(support::REGION.into()),
        endpoint: Some(e.proxy.endpoint()),
        ..Ec2Options::default()
    })
    .await
    .expect("connect");
    let second = again.launch(&e.req(&h, &pool)).await.expect("relaunch");
    assert_eq!(first.instance_id, second.instance_id);
    assert_eq!(e.live_instances().await.len(), 1, "one instance in moto");
    assert_eq!(e.proxy.count("RunInstances"), 1, "RunInstances sent once");
}

#[tokio::test]
async fn throttled_calls_are_retried_and_the_launch_completes() {
    let e = env().await;
    let pool = e.pool(serde_json::json!({}));
    e.proxy
        .add_rule(Rule::new("RunInstances", Fault::Throttle, 2));
    e.proxy
        .add_rule(Rule::new("DescribeInstances", Fault::Throttle, 1));
    e.proxy
        .add_rule(Rule::new("DescribeSubnets", Fault::Throttle, 1));
    let h = e.host("h-l4-000003", "l4", "g6.xlarge");
    // Apply checks the pool first (DescribeSubnets...), then launches.
    e.cloud
        .preflight(&[e.req(&h, &pool)])
        .await
        .expect("preflight despite throttling");
    e.cloud
        .launch(&e.req(&h, &pool))
        .await
        .expect("launch despite throttling");
    let calls = e.proxy.calls();
    let runs: Vec<_> = calls
        .iter()
        .filter(|c| c.action == "RunInstances")
        .collect();
    assert_eq!(
        runs.len(),
        3,
        "two throttled attempts, then the one that worked"
    );
    assert_eq!(
        runs.iter()
            .filter(|c| c.fault == Some(Fault::Throttle))
            .count(),
        2
    );
    // Retries resend the same client token and subnet.
    assert!(runs
        .windows(2)
        .all(|w| w[0].params.get("ClientToken") == w[1].params.get("ClientToken")));
    assert!(runs
        .windows(2)
        .all(|w| w[0].params.get("SubnetId") == w[1].params.get("SubnetId")));
    assert_eq!(e.live_instances().await.len(), 1);
    // list_hosts retries too.
    e.proxy
        .add_rule(Rule::new("DescribeInstances", Fault::Throttle, 2));
    assert_eq!(e.cloud.list_hosts(CLUSTER).await.expect("list").len(), 1);
}

/// The cloud launches where the plan put a host and nowhere else: no capacity in the
/// planned subnet fails the launch naming it (apply records the refusal and plans
/// again); no other subnet or instance type is tried.
#[tokio::test]
async fn a_capacity_error_fails_the_launch_where_planned_and_tries_nothing_else() {
    let e = env().await;
    let pool = e.pool(serde_json::json!({ "instance_types": ["g6.2xlarge"] }));
    let (full, full_zone) = e.subnets[0].clone();
    e.proxy.add_rule(
        Rule::new("RunInstances", Fault::Capacity, u32::MAX)
            .when_body_contains(&format!("SubnetId={full}")),
    );
    let refused = e.host("h-l4-cap0", "l4", "g6.xlarge");
    assert_eq!(refused.subnet.as_deref(), Some(full.as_str()));
    match e.cloud.launch(&e.req(&refused, &pool)).await {
        Err(CloudError::InsufficientCapacity {
            pool,
            instance_type,
            place,
        }) => {
            assert_eq!((pool.as_str(), instance_type.as_str()), ("l4", "g6.xlarge"));
            assert_eq!(place, Some(format!("subnet {full} ({full_zone})")));
        }
        other => panic!("expected InsufficientCapacity, got {other:?}"),
    }
    assert_eq!(e.proxy.count("RunInstances"), 1, "one try, where planned");
    assert!(e.live_instances().await.is_empty());
    // A host planned in the other subnet launches there.
    let roomy = e.host("h-l4-cap1", "l4", "g6.xlarge");
    e.cloud
        .launch(&e.req(&roomy, &pool))
        .await
        .expect("launch in the planned subnet");
    let live = e.live_instances().await;
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].subnet_id, roomy.subnet);
    assert_eq!(live[0].instance_type.as_deref(), Some("g6.xlarge"));
}

/// A wave goes out side by side (`launch_many`): the launches overlap (at most
/// `max_concurrency` at once), each host is launched where it was planned, and the
/// results come in the requests' order. A capacity error in a wave stops new launches;
/// the results of every launch already started come back (apply records those that
/// succeeded), and nothing after them was tried.
#[tokio::test]
async fn a_wave_launches_side_by_side_and_returns_the_started_results_in_order() {
    let e = env().await;
    let pool = e.pool(serde_json::json!({}));
    e.proxy
        .set_delay("RunInstances", Duration::from_millis(300));
    let hosts: Vec<Host> = (0..6)
        .map(|n| e.host(&format!("h-l4-wave{n}"), "l4", "g6.xlarge"))
        .collect();
    let reqs: Vec<LaunchRequest<'_>> = hosts.iter().map(|h| e.req(h, &pool)).collect();
    let got = e.cloud.launch_many(&reqs).await;
    assert_eq!(got.len(), hosts.len());
    for (h, r) in hosts.iter().zip(&got) {
        let c = r.as_ref().expect("launched");
        assert_eq!((c.host_id.as_str(), &c.zone), (h.id.as_str(), &h.zone));
    }
    assert_eq!(e.live_instances().await.len(), hosts.len());
    let most = e.proxy.most_in_flight("RunInstances");
    assert!(
        (2..=Ec2Options::default().max_concurrency).contains(&most),
        "RunInstances calls at once: {most}"
    );

    // A wave of 40 whose first host's subnet (every other host's, or third's) has no
    // capacity: the launches fail there, and none is started once a failure is in.
    let (full, _) = e.subnets[e.planned.get() % e.subnets.len()].clone();
    e.proxy.add_rule(
        Rule::new("RunInstances", Fault::Capacity, u32::MAX)
            .when_body_contains(&format!("SubnetId={full}")),
    );
    let hosts: Vec<Host> = (0..40)
        .map(|n| e.host(&format!("h-l4-second{n}"), "l4", "g6.xlarge"))
        .collect();
    let reqs: Vec<LaunchRequest<'_>> = hosts.iter().map(|h| e.req(h, &pool)).collect();
    let got = e.cloud.launch_many(&reqs).await;
    assert!(
        got.len() < hosts.len(),
        "launches kept starting after a failure: {} results",
        got.len()
    );
    let first_err = got.iter().position(Result::is_err).expect("a failure");
    assert!(matches!(
        got[first_err],
        Err(CloudError::InsufficientCapacity { .. })
    ));
    assert_eq!(hosts[first_err].subnet.as_deref(), Some(full.as_str()));
    for (h, r) in hosts.iter().zip(&got) {
        match r {
            Ok(c) => assert_eq!(c.host_id, h.id),
            Err(_) => assert_eq!(h.subnet.as_deref(), Some(full.as_str()), "{}", h.id),
        }
    }
    let launched = got.iter().filter(|r| r.is_ok()).count();
    assert_eq!(e.live_instances().await.len(), 6 + launched);
    assert_eq!(
        e.proxy.count("RunInstances"),
        6 + got.len(),
        "one call per result: nothing tried without a result"
    );
}

/// A host planned without an image or root device (no facts when planned) is refused
/// before any call that launches.
#[tokio::test]
async fn a_launch_planned_without_image_or_root_device_is_refused() {
    let e = env().await;
    let pool = e.pool(serde_json::json!({}));
    let mut h = e.host("h-l4-noimg", "l4", "g6.xlarge");
    h.image_id = None;
    let err = e
        .cloud
        .launch(&e.req(&h, &pool))
        .await
        .expect_err("no image");
    assert!(err.to_string().contains("names no image"), "{err}");
    let h = e.host("h-l4-noroot", "l4", "g6.xlarge");
    let req = LaunchRequest {
        root_device: None,
        ..e.req(&h, &pool)
    };
    let err = e.cloud.launch(&req).await.expect_err("no root device");
    assert!(err.to_string().contains("names no root device"), "{err}");
    assert_eq!(e.proxy.count("RunInstances"), 0);
}

#[tokio::test]
async fn a_quota_error_stops_with_a_clear_message() {
    let e = env().await;
    let pool = e.pool(serde_json::json!({}));
    e.proxy
        .add_rule(Rule::new("RunInstances", Fault::Quota, u32::MAX));
    let h = e.host("h-l4-quota", "l4", "g6.xlarge");
    let err = e.cloud.launch(&e.req(&h, &pool)).await.expect_err("quota");
    let msg = err.to_string();
    assert!(matches!(err, CloudError::Quota { .. }), "{err:?}");
    assert!(
        msg.contains("quota") && msg.contains("g6.xlarge") && msg.contains("InstanceLimitExceeded"),
        "{msg}"
    );
    assert_eq!(
        e.proxy.count("RunInstances"),
        1,
        "a quota error is not retried, nor tried in another subnet"
    );
    assert!(e.live_instances().await.is_empty());
}

#[tokio::test]
async fn invalid_pools_fail_before_any_launch() {
    let e = env().await;
    let h = |t: &str| e.host("h-bad-1", "bad", t);
    let cases: Vec<(CapacityProvider, &str, Vec<&str>)> = vec![
        (e.pool(serde_json::json!({ "instance_type": "g6.xlargee" })), "g6.xlargee", vec!["unknown instance type", "g6.xlarge"]),
        (e.pool(serde_json::json!({ "instance_type": "m5.large" })), "m5.large", vec!["m5.large", "no GPU"]),
        (e.pool(serde_json::json!({ "subnets": ["subnet-0000dead"] })), "g6.xlarge", vec!["subnet-0000dead"]),
        (
            e.pool(serde_json::json!({ "agent": { "url": format!("https://example.com/{}", "x".repeat(17000)), "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" } })),
            "g6.xlarge",
            vec!["16384 bytes"],
        ),
        (e.pool(serde_json::json!({ "image": "ami-00000000deadbeef" })), "g6.xlarge", vec!["ami-00000000deadbeef", "does not exist"]),
        (
            e.pool(serde_json::json!({ "image": null })),
            "g6.xlarge",
            vec!["sets no image", "Deep Learning Base"],
        ),
    ];
    for (pool, itype, words) in &cases {
        let hh = h(itype);
        // Apply's preflight checks every launch before the first one runs.
        let err = e
            .cloud
            .preflight(&[e.req(&hh, pool)])
            .await
            .expect_err("refused");
        let msg = err.to_string();
        for w in words {
            assert!(msg.contains(w), "{msg:?} should contain {w:?}");
        }
    }
    assert_eq!(e.proxy.count("RunInstances"), 0, "nothing launched");
    assert!(e.all_instances().await.is_empty());
}

#[tokio::test]
async fn list_hosts_reports_strays_and_terminate_spares_untagged_instances() {
    let e = env().await;
    let pool = e.pool(serde_json::json!({}));
    let mut launched = Vec::new();
    for i in 0..3 {
        let h = e.host(&format!("h-l4-list{i}"), "l4", "g6.xlarge");
        launched.push(e.cloud.launch(&e.req(&h, &pool)).await.expect("launch"));
    }
    // Someone else's instance in the same account, and one tagged by hand with our cluster.
    let other_id = support::run_untagged(&e.direct, &e.ami).await;
    let stray_id = support::run_tagged(
        &e.direct,
        &e.ami,
        "g6.xlarge",
        &[Tag::new(tags::CLUSTER, CLUSTER)],
    )
    .await;

    let hosts = e.cloud.list_hosts(CLUSTER).await.expect("list");
    assert_eq!(hosts.len(), 4, "{hosts:?}");
    for l in &launched {
        let h = hosts
            .iter()
            .find(|h| h.instance_id == l.instance_id)
            .expect("listed");
        assert_eq!(h.host_id, l.host_id);
        assert_eq!(h.capacity_provider, "l4");
        assert_eq!(h.launch_token, l.launch_token);
        assert_eq!(h.state, HostState::Running);
        assert!(h
            .zone
            .as_deref()
            .is_some_and(|z| z.starts_with("us-east-1")));
    }
    let s = hosts
        .iter()
        .find(|h| h.instance_id == stray_id)
        .expect("the stray is listed");
    assert_eq!(s.host_id, stray_id, "no host-id tag: keyed by instance id");
    assert!(!hosts.iter().any(|h| h.instance_id == other_id));

    // Refuses to terminate what is not ours.
    let err = e
        .cloud
        .terminate(CLUSTER, STORE_ID, &other_id)
        .await
        .expect_err("not ours");
    assert!(err.to_string().contains("refusing to terminate"), "{err}");

    for l in &launched {
        e.cloud
            .terminate(CLUSTER, STORE_ID, &l.instance_id)
            .await
            .expect("terminate");
        // Idempotent.
        e.cloud
            .terminate(CLUSTER, STORE_ID, &l.instance_id)
            .await
            .expect("terminate again");
    }
    e.cloud
        .terminate(CLUSTER, STORE_ID, &stray_id)
        .await
        .expect("terminate stray");
    assert!(e.live_instances().await.is_empty());
    let all = e.all_instances().await;
    let survivor = all
        .iter()
        .find(|i| i.instance_id.as_deref() == Some(other_id.as_str()))
        .expect("untagged still there");
    assert_eq!(survivor.state_name(), Some(InstanceStateName::Running));
    let listed = e.cloud.list_hosts(CLUSTER).await.expect("list");
    assert!(
        listed.iter().all(|h| h.state == HostState::Terminated),
        "{listed:?}"
    );
    // A gone instance terminates without error.
    e.cloud
        .terminate(CLUSTER, STORE_ID, "i-0123456789abcdef0")
        .await
        .expect("unknown id is already gone");
}

/// Regression (issue 15, store takeover): another store of the same cluster name
/// never adopts this store's instance at launch and cannot terminate it.
#[tokio::test]
async fn another_store_never_adopts_or_terminates_this_stores_instance() {
    let e = env().await;
    let pool = e.pool(serde_json::json!({}));
    let h = e.host("h-l4-000001", "l4", "g6.xlarge");
    let mine = e.cloud.launch(&e.req(&h, &pool)).await.expect("launch");
    assert_eq!(mine.store_id.as_deref(), Some(STORE_ID));
    let live = e.live_instances().await;
    assert_eq!(tag_of(&live[0], tags::STORE_ID), Some(STORE_ID));
    let listed = e.cloud.list_hosts(CLUSTER).await.expect("list");
    assert_eq!(listed[0].store_id.as_deref(), Some(STORE_ID));

    // Same host id and (here, forcibly) the same launch token: still not adopted.
    let theirs = LaunchRequest {
        store_id: "fedcba9876543210",
        ..e.req(&h, &pool)
    };
    let err = e.cloud.launch(&theirs).await.expect_err("not adopted");
    assert!(
        matches!(&err, CloudError::ForeignInstance { owner, action: "adopt", .. } if owner == STORE_ID),
        "{err:?}"
    );
    let err = e
        .cloud
        .terminate(CLUSTER, "fedcba9876543210", &mine.instance_id)
        .await
        .expect_err("not theirs to terminate");
    assert!(
        err.to_string().contains("belongs to another state store"),
        "{err}"
    );
    assert_eq!(e.live_instances().await.len(), 1, "still running");
}

#[tokio::test]
async fn an_auth_failure_is_an_error_never_an_empty_fleet() {
    let e = env().await;
    let pool = e.pool(serde_json::json!({}));
    let h = e.host("h-l4-auth", "l4", "g6.xlarge");
    e.cloud.launch(&e.req(&h, &pool)).await.expect("launch");
    e.proxy
        .add_rule(Rule::new("DescribeInstances", Fault::Auth, u32::MAX));
    let err = e.cloud.list_hosts(CLUSTER).await.expect_err("auth failure");
    let chain = format!(
        "{err}: {}",
        std::error::Error::source(&err)
            .map(|s| s.to_string())
            .unwrap_or_default()
    );
    assert!(chain.contains("AuthFailure"), "{chain}");
    assert_eq!(
        e.proxy.count("DescribeInstances"),
        2,
        "one lookup before the launch, one list: not retried"
    );
}

#[tokio::test]
async fn not_found_right_after_a_launch_is_waited_out() {
    let e = env().await;
    let pool = e.pool(serde_json::json!({}));
    let h = e.host("h-l4-nf", "l4", "g6.xlarge");
    let got = e.cloud.launch(&e.req(&h, &pool)).await.expect("launch");
    // The next two lookups by id say NotFound, as EC2 may right after RunInstances.
    e.proxy.add_rule(
        Rule::new("DescribeInstances", Fault::NotFound, 2)
            .when_body_contains(&format!("InstanceId.1={}", got.instance_id)),
    );
    e.cloud
        .terminate(CLUSTER, STORE_ID, &got.instance_id)
        .await
        .expect("terminate after the wait");
    assert!(
        e.live_instances().await.is_empty(),
        "terminated, not taken for gone"
    );
    let faulted = e
        .proxy
        .calls()
        .iter()
        .filter(|c| c.fault == Some(Fault::NotFound))
        .count();
    assert_eq!(faulted, 2);
}

#[tokio::test]
async fn list_hosts_follows_pages() {
    support::test_env();
    let e = env().await;
    let cloud = Ec2Cloud::connect(Ec2Options {
        region: Some(support::REGION.into()),
        endpoint: Some(e.proxy.endpoint()),
        page_size: Some(5),
        ..Ec2Options::default()
    })
    .await
    .expect("connect");
    let pool = e.pool(serde_json::json!({}));
    for i in 0..12 {
        let h = e.host(&format!("h-l4-page{i:02}"), "l4", "g6.xlarge");
        cloud.launch(&e.req(&h, &pool)).await.expect("launch");
    }
    e.proxy.reset_calls();
    let hosts = cloud.list_hosts(CLUSTER).await.expect("list");
    assert_eq!(hosts.len(), 12);
    let pages = e
        .proxy
        .calls()
        .into_iter()
        .filter(|c| c.action == "DescribeInstances")
        .collect::<Vec<_>>();
    assert_eq!(pages.len(), 3, "12 instances in pages of 5");
    assert!(pages
        .iter()
        .skip(1)
        .all(|c| c.params.contains_key("NextToken")));
}

/// Issue 5's closing figure: API calls (counted by the proxy) and wall time of
/// launching 20 hosts and listing them. The time is printed, never asserted.
#[tokio::test]
async fn twenty_hosts_api_call_budget() {
    let e = env().await;
    let pool = e.pool(serde_json::json!({}));
    let start = Instant::now();
    let mut hosts = Vec::new();
    for i in 0..20 {
        hosts.push(e.host(&format!("h-l4-tw{i:02}"), "l4", "g6.xlarge"));
    }
    let reqs: Vec<_> = hosts.iter().map(|h| e.req(h, &pool)).collect();
    e.cloud.preflight(&reqs).await.expect("preflight");
    for r in &reqs {
        e.cloud.launch(r).await.expect("launch");
    }
    let listed = e.cloud.list_hosts(CLUSTER).await.expect("list");
    let elapsed = start.elapsed();
    assert_eq!(listed.len(), 20);
    let counts = e.proxy.counts();
    let total: u32 = counts.values().sum();
    eprintln!("20-host launch against moto: {elapsed:?}, {total} API calls: {counts:?}");
    assert_eq!(counts.get("RunInstances"), Some(&20));
    // Per pool once: DescribeInstanceTypes, DescribeImages, DescribeSubnets; per host: a
    // token lookup and RunInstances; one list.
    assert_eq!(counts.get("DescribeInstanceTypes"), Some(&1));
    assert_eq!(counts.get("DescribeImages"), Some(&1));
    assert_eq!(counts.get("DescribeSubnets"), Some(&1));
    assert_eq!(counts.get("DescribeInstances"), Some(&21));
    assert_eq!(total, 44);
    // Spread: both subnets used, evenly.
    let live = e.live_instances().await;
    for (s, _) in &e.subnets {
        assert_eq!(
            live.iter()
                .filter(|i| i.subnet_id.as_deref() == Some(s.as_str()))
                .count(),
            10,
            "subnet {s}"
        );
    }
    drop(e.moto);
}

/// The RunInstances calls the proxy passed on to moto (not faulted).
fn run_calls(e: &Env) -> Vec<support::Call> {
    e.proxy
        .calls()
        .into_iter()
        .filter(|c| c.action == "RunInstances" && c.fault.is_none())
        .collect()
}

#[tokio::test]
async fn a_spot_pool_requests_one_time_spot_terminated_on_interruption() {
    let e = env().await;
    let spot = e.pool(serde_json::json!({ "market": "spot", "max_price": "1.25" }));
    let h = e.host("h-l4-spot01", "l4", "g6.xlarge");
    let got = e
        .cloud
        .launch(&e.req(&h, &spot))
        .await
        .expect("spot launch");
    let runs = run_calls(&e);
    assert_eq!(runs.len(), 1);
    let p = &runs[0].params;
    for (k, v) in [
        ("InstanceMarketOptions.MarketType", "spot"),
        (
            "InstanceMarketOptions.SpotOptions.SpotInstanceType",
            "one-time",
        ),
        (
            "InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior",
            "terminate",
        ),
        ("InstanceMarketOptions.SpotOptions.MaxPrice", "1.25"),
    ] {
        assert_eq!(p.get(k).map(String::as_str), Some(v), "{k} in {p:?}");
    }
    let live = e.live_instances().await;
    assert_eq!(live.len(), 1);
    assert_eq!(
        live[0].instance_id.as_deref(),
        Some(got.instance_id.as_str())
    );

    // No max_price: EC2's default (the on-demand price), so none is sent.
    let spot = e.pool(serde_json::json!({ "market": "spot" }));
    e.proxy.reset_calls();
    let h = e.host("h-l4-spot02", "l4", "g6.xlarge");
    e.cloud
        .launch(&e.req(&h, &spot))
        .await
        .expect("spot launch");
    let p = &run_calls(&e)[0].params;
    assert_eq!(
        p.get("InstanceMarketOptions.MarketType")
            .map(String::as_str),
        Some("spot")
    );
    assert!(
        !p.contains_key("InstanceMarketOptions.SpotOptions.MaxPrice"),
        "{p:?}"
    );

    // On-demand sends no market options at all.
    let od = e.pool(serde_json::json!({}));
    e.proxy.reset_calls();
    let h = e.host("h-l4-od0001", "l4", "g6.xlarge");
    e.cloud
        .launch(&e.req(&h, &od))
        .await
        .expect("on-demand launch");
    let p = &run_calls(&e)[0].params;
    assert!(
        !p.keys().any(|k| k.starts_with("InstanceMarketOptions")),
        "{p:?}"
    );
}

/// A host the plan put on one of the pool's fallback `instance_types` (the planner
/// chose it after refusals of the first) launches as that type, with a client token
/// of its own; a refusal of it is an error, never another type.
#[tokio::test]
async fn a_host_planned_as_a_fallback_type_launches_as_that_type_only() {
    let e = env().await;
    let pool = e.pool(serde_json::json!({
        "market": "spot",
        "instance_types": ["g6.2xlarge", "g6.4xlarge"]
    }));
    let h = e.host("h-l4-fall01", "l4", "g6.4xlarge");
    let got = e
        .cloud
        .launch(&e.req(&h, &pool))
        .await
        .expect("launch as planned");
    assert_eq!(got.instance_type, "g6.4xlarge");
    let live = e.live_instances().await;
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].instance_type.as_deref(), Some("g6.4xlarge"));
    assert_eq!(tag_of(&live[0], tags::HOST_ID), Some("h-l4-fall01"));
    let token = |c: &support::Call| c.params.get("ClientToken").cloned();
    let first = e
        .proxy
        .calls()
        .iter()
        .filter(|c| c.action == "RunInstances")
        .find_map(token);
    assert_eq!(
        first,
        Some(gpushare_ec2::client_token(
            CLUSTER,
            STORE_ID,
            &h.launch_token,
            h.subnet.as_deref(),
            Some("g6.4xlarge")
        ))
    );

    // Too expensive for Spot where planned: an error naming the planned type.
    e.proxy
        .add_rule(Rule::new("RunInstances", Fault::SpotPriceTooLow, u32::MAX));
    let h = e.host("h-l4-fall02", "l4", "g6.2xlarge");
    match e.cloud.launch(&e.req(&h, &pool)).await {
        Err(CloudError::InsufficientCapacity { instance_type, .. }) => {
            assert_eq!(instance_type, "g6.2xlarge")
        }
        other => panic!("expected InsufficientCapacity, got {other:?}"),
    }
    let tried: Vec<String> = e
        .proxy
        .calls()
        .into_iter()
        .filter(|c| c.action == "RunInstances")
        .map(|c| c.params.get("InstanceType").cloned().unwrap_or_default())
        .collect();
    assert_eq!(tried, ["g6.4xlarge", "g6.2xlarge"]);
    assert_eq!(e.live_instances().await.len(), 1);
}

#[tokio::test]
async fn an_on_demand_pool_takes_spot_max_price_too_low_as_an_error_not_a_fallback() {
    // SpotMaxPriceTooLow only means "no capacity at this price" for a Spot launch.
    let e = env().await;
    let pool = e.pool(serde_json::json!({ "instance_types": ["g6.2xlarge"] }));
    e.proxy
        .add_rule(Rule::new("RunInstances", Fault::SpotPriceTooLow, 1));
    let h = e.host("h-l4-odfb01", "l4", "g6.xlarge");
    let err = e
        .cloud
        .launch(&e.req(&h, &pool))
        .await
        .expect_err("not a fallback");
    assert!(matches!(err, CloudError::Api { .. }), "{err:?}");
    assert_eq!(e.proxy.count("RunInstances"), 1);
}

/// Gather (issue 14): per pool, the image, the subnets with their zones and EC2's own
/// figures for the instance type (DescribeInstanceTypes); a pool that cannot launch is
/// an error naming it, before any plan is made.
#[tokio::test]
async fn gather_reports_image_subnets_zones_and_ec2s_instance_figures() {
    let e = env().await;
    let pools =
        std::collections::BTreeMap::from([("l4".to_string(), e.pool(serde_json::json!({})))]);
    let facts = e.cloud.gather(&pools).await.expect("gather");
    let p = &facts.pools["l4"];
    assert_eq!(p.image_id, e.ami);
    assert_eq!(p.root_device.as_deref(), Some(e.root.as_str()));
    let subnets: Vec<(String, String)> = p
        .subnets
        .iter()
        .map(|s| (s.id.clone(), s.zone.clone()))
        .collect();
    assert_eq!(subnets, e.subnets);
    let i = p.instance.as_ref().expect("EC2's figures");
    assert_eq!(
        (
            i.instance_type.as_str(),
            i.gpu_count,
            i.gpu_memory_mib,
            i.vcpus,
            i.memory_mib
        ),
        ("g6.xlarge", 1, 22888, 4, 16384)
    );
    let bad = std::collections::BTreeMap::from([(
        "broken".to_string(),
        e.pool(serde_json::json!({ "subnets": ["subnet-0000dead"] })),
    )]);
    match e.cloud.gather(&bad).await {
        Err(CloudError::InvalidPool { pool, message }) => {
            assert_eq!(pool, "broken");
            assert!(message.contains("subnet-0000dead"), "{message}");
        }
        other => panic!("expected InvalidPool, got {other:?}"),
    }
    assert_eq!(e.proxy.count("RunInstances"), 0);
}

/// DescribeInstanceStatus against moto: the call is accepted (every instance id
/// named, `IncludeAllInstances`), and an instance without scheduled events gives no
/// notice. moto models no scheduled events, so their decoding is tested on EC2's
/// documented answer (`cloud/events.rs`).
#[tokio::test]
async fn scheduled_events_are_read_per_instance_and_none_gives_no_notice() {
    let e = env().await;
    let pool = e.pool(serde_json::json!({}));
    let h = e.host("h-l4-event1", "l4", "g6.xlarge");
    let got = e.cloud.launch(&e.req(&h, &pool)).await.expect("launch");
    e.proxy.reset_calls();
    let notices = e
        .cloud
        .scheduled_events(std::slice::from_ref(&got.instance_id))
        .await
        .expect("DescribeInstanceStatus");
    assert!(notices.is_empty(), "{notices:?}");
    let calls: Vec<_> = e
        .proxy
        .calls()
        .into_iter()
        .filter(|c| c.action == "DescribeInstanceStatus")
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(
        calls[0].params.get("InstanceId.1").map(String::as_str),
        Some(got.instance_id.as_str())
    );
    assert_eq!(
        calls[0]
            .params
            .get("IncludeAllInstances")
            .map(String::as_str),
        Some("true")
    );
    // An unknown instance id is EC2's error, not "no events".
    let err = e
        .cloud
        .scheduled_events(&["i-0000000000000dead".to_string()])
        .await
        .expect_err("an unknown instance");
    assert!(
        gpushare_core::util::error_chain(&err).contains("DescribeInstanceStatus"),
        "{err}"
    );
}

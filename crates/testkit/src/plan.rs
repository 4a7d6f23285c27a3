//! Fixtures for the planner tests (gpushare-core's tests and benchmarks): Desired
//! values as plain struct literals.

use gpushare_core::model::{
    AgentSource, CapacityProvider, Container, Deployment, DeploymentState, Desired, GpuSpec,
    HostSource, HostState, Job, Live, Market, MetadataOptions, MpsHealth, MpsSettings, MpsShare,
    PlacementStrategy, RefreshSettings, RootVolume, Service, Settings, StoreState, Task,
    TaskDefinition, TaskState,
};
use gpushare_core::plan::{plan, Options, Plan};
use std::collections::BTreeMap;

pub fn pool(instance_type: &str, min_size: u32, max_size: u32) -> CapacityProvider {
    CapacityProvider {
        host_port_range: None,
        instance_type: instance_type.into(),
        hosts: HostSource::Launched,
        host_hourly_cost: None,
        instance_types: vec![],
        market: Market::OnDemand,
        max_price: None,
        min_size,
        max_size,
        image: None,
        subnets: vec![],
        security_groups: vec![],
        instance_profile: None,
        key_name: None,
        mps: MpsSettings::default(),
        metadata_options: MetadataOptions::default(),
        root_volume: RootVolume::default(),
        agent: AgentSource::default(),
        tags: BTreeMap::new(),
        max_draining_percent: 25,
        unhealthy_threshold_percent: 50,
        refresh: RefreshSettings::default(),
        reserve_compute: false,
        auto_repair: true,
        deep_check: false,
    }
}

pub fn container(name: &str, image: &str, gpu: Option<GpuSpec>) -> Container {
    Container {
        name: name.into(),
        image: image.into(),
        command: vec![],
        env: BTreeMap::new(),
        secret_env: BTreeMap::new(),
        cpu: 2048,
        memory: 4096,
        gpu,
        essential: true,
        ..Default::default()
    }
}

/// A one-container task definition sharing a GPU through MPS.
pub fn mps_td(image: &str, memory: u64, max_compute_percent: Option<u8>) -> TaskDefinition {
    TaskDefinition {
        containers: vec![container(
            "server",
            image,
            Some(GpuSpec {
                count: None,
                mps: Some(MpsShare {
                    processes: 1,
                    memory,
                    max_compute_percent,
                }),
            }),
        )],
        ..Default::default()
    }
}

/// A one-container task definition with whole GPUs.
pub fn whole_td(image: &str, count: u32) -> TaskDefinition {
    TaskDefinition {
        containers: vec![container(
            "server",
            image,
            Some(GpuSpec {
                count: Some(count),
                mps: None,
            }),
        )],
        ..Default::default()
    }
}

pub fn service(task_definition: &str, capacity_provider: &str, desired_count: u32) -> Service {
    Service {
        task_definition: task_definition.into(),
        capacity_provider: capacity_provider.into(),
        desired_count,
        placement_strategy: PlacementStrategy::Binpack,
        distinct_host: false,
        instance_types: vec![],
        deployment: Deployment::default(),
        reserve_compute: false,
        load_balancers: Vec::new(),
        auto_scaling: None,
    }
}

/// The quickstart-like fleet: an embedder and a reranker on L4, an LLM on A10G.
pub fn quickstart(embedders: u32) -> Desired {
    let mut d = Desired {
        settings: Settings {
            cluster: "inference".into(),
            seed: 7,
            ..Settings::default()
        },
        ..Desired::default()
    };
    d.capacity_providers
        .insert("l4".into(), pool("g6.12xlarge", 0, 4));
    d.capacity_providers
        .insert("a10g".into(), pool("g5.xlarge", 0, 3));
    d.task_definitions.insert(
        "embedder".into(),
        mps_td("ghcr.io/example/embedder:1.4", 6144, Some(25)),
    );
    d.task_definitions.insert(
        "reranker".into(),
        mps_td("ghcr.io/example/reranker:2.0", 4096, None),
    );
    d.task_definitions
        .insert("llm".into(), whole_td("ghcr.io/example/llm:0.9", 1));
    d.services
        .insert("embedder".into(), service("embedder", "l4", embedders));
    d.services
        .insert("reranker".into(), service("reranker", "l4", 2));
    d.services.insert("llm".into(), service("llm", "a10g", 1));
    d
}

/// The live world as it is once `plan` is applied (hosts up and reporting).
pub fn live_after(p: &Plan, observed_at: u64) -> Live {
    Live {
        state: p.after.clone(),
        strays: p.strays.clone(),
        foreign: p.foreign.clone(),
        adopted: vec![],
        observed_at,
        facts: Default::default(),
        task_status: Default::default(),
        host_addresses: Default::default(),
        target_groups: Default::default(),
    }
}

/// Mark every host running and healthy, every task running (what agents report),
/// and, as the next pass of the reconcile loop writes them, the deployments that
/// are done COMPLETED (`desired_count` tasks of their revision, none of another).
pub fn settle(live: Live) -> Live {
    complete_deployments(settle_reports(live))
}

/// The deployments of `live` that are done, COMPLETED (what the plan that finds
/// them done writes: plan_deployments.rs tests that plan itself).
fn complete_deployments(mut live: Live) -> Live {
    let tasks: Vec<Task> = live.state.tasks.values().cloned().collect();
    for (addr, r) in live.state.resources.iter_mut() {
        let Some(d) = r.deployment.as_mut() else {
            continue;
        };
        let desired = r.attrs["desired_count"].as_u64().unwrap_or(0) as usize;
        let of: Vec<&Task> = tasks.iter().filter(|t| t.service == addr.name).collect();
        let done = of
            .iter()
            .all(|t| t.family == d.family && t.revision == d.revision)
            && of.len() >= desired;
        if d.state == DeploymentState::InProgress && done {
            d.state = DeploymentState::Completed;
            d.healthy_tasks = of.len() as u32;
            d.pending_tasks = 0;
            d.updated_at = live.observed_at;
        }
    }
    live
}

/// Mark every host running and healthy, every task running (what agents report).
pub fn settle_reports(mut live: Live) -> Live {
    let mut n = 0;
    for h in live.state.hosts.values_mut() {
        n += 1;
        if h.state == HostState::Pending {
            h.state = HostState::Running;
            h.instance_id = Some(format!("i-{n:08x}"));
            h.mps_health = MpsHealth::Healthy;
            h.last_heartbeat = Some(live.observed_at);
        }
    }
    for t in live.state.tasks.values_mut() {
        if t.state == TaskState::Pending {
            t.state = TaskState::Running;
        }
    }
    live
}

pub fn empty_live() -> Live {
    Live {
        state: StoreState {
            serial: 0,
            cluster: "inference".into(),
            ..StoreState::default()
        },
        strays: vec![],
        observed_at: 1_000,
        ..Live::default()
    }
}

pub fn plan_ok(d: &Desired, live: &Live, o: &Options) -> Plan {
    match plan(d, live, o) {
        Ok(p) => p,
        Err(e) => panic!("plan failed: {e}"),
    }
}

/// A mixed fleet on g6.12xlarge (4 x L4 of 22888 MiB): 4 tasks of half a GPU
/// (11444 MiB) capped at 70 % and 8 tasks of a quarter (5722 MiB) capped at 30 %.
///
/// By memory: 4 x 1/2 + 8 x 1/4 = 4 GPUs exactly (one half and two quarters
/// each), one host. Reserved: no GPU holds two halves (140), a GPU with a half
/// holds at most one quarter (70 + 30 = 100; + 30 more = 130), so the 4 GPUs of
/// the halves hold 4 quarters; the other 4 quarters (30 each, 3 per GPU at most)
/// need 2 more GPUs: 6 at least, two hosts. 6 is reachable (4 x (70+30), 30+30+30, 30).
/// `reserve_compute`: set on the pool.
pub fn mixed_caps(reserve_compute: bool) -> Desired {
    let mut d = inference();
    let mut p = pool("g6.12xlarge", 0, 4);
    p.reserve_compute = reserve_compute;
    d.capacity_providers.insert("l4".into(), p);
    for (name, memory, cap, count) in [("half", 11444, 70, 4), ("quarter", 5722, 30, 8)] {
        let mut td = mps_td(&format!("ghcr.io/example/{name}:1"), memory, Some(cap));
        td.containers[0].cpu = 1024;
        td.containers[0].memory = 2048;
        d.task_definitions.insert(name.into(), td);
        d.services.insert(name.into(), service(name, "l4", count));
    }
    d
}

/// One pool `l4` of `instance_type` hosts (0 to 10) and one MPS service of `n` tasks
/// of 8 GiB, cluster `inference`, seed 3.
pub fn one_service(instance_type: &str, n: u32) -> Desired {
    let mut d = Desired {
        settings: Settings {
            cluster: "inference".into(),
            seed: 3,
            ..Settings::default()
        },
        ..Desired::default()
    };
    d.capacity_providers
        .insert("l4".into(), pool(instance_type, 0, 10));
    d.task_definitions
        .insert("embedder".into(), mps_td("img:1", 8192, None));
    d.services
        .insert("embedder".into(), service("embedder", "l4", n));
    d
}

/// An empty configuration of cluster "inference" with seed 7.
pub fn inference() -> Desired {
    Desired {
        settings: Settings {
            cluster: "inference".into(),
            seed: 7,
            ..Settings::default()
        },
        ..Desired::default()
    }
}

/// A job of `completions` indexed runs of task definition `task_definition` in
/// `pool`, `parallelism` at once, one retry each.
pub fn job(task_definition: &str, pool: &str, completions: u32, parallelism: u32) -> Job {
    Job {
        task_definition: task_definition.into(),
        capacity_provider: pool.into(),
        completions,
        parallelism,
        max_retries: 1,
        timeout_seconds: None,
        indexed: true,
        priority: None,
        expected_run_seconds: None,
        ttl_after_finished_seconds: None,
    }
}

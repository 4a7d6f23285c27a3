//! End to end: the real `gpushare` binary with `cloud = "ec2"` against a real
//! moto_server, through the fault proxy (which also counts the API calls).
//! Only 127.0.0.1 is connected to; the addresses moto gives instances are never used.

use gpushare_testkit_engine::ec2 as support;

/// A real etcd (Debian's etcd-server) for the fleets' state (several stores of one
/// cluster, leases). Hosts never read it: they join the controller named by
/// `controller_address` (never dialled here: moto's instances do not boot).
use gpushare_testkit_engine::etcd as etcd_support;

use gpushare_ec2::api::{self, Instance, InstanceStateName};
use gpushare_ec2::tags;
use gpushare_testkit::gp;
use std::path::Path;
use std::time::Instant;
use support::{direct_client, tag_of, Fault, FaultProxy, Moto, Rule};

const CLUSTER: &str = "e2e";

struct World {
    _moto: Moto,
    etcd: etcd_support::Etcd,
    proxy: FaultProxy,
    direct: api::Client,
    ami: String,
    subnets: Vec<String>,
    sg: String,
    dir: tempfile::TempDir,
}

async fn world() -> World {
    support::test_env();
    let moto = Moto::start();
    let direct = direct_client(&moto.endpoint());
    let fx = support::Fixture::create(&direct).await;
    let proxy = FaultProxy::start(moto.addr).await;
    World {
        _moto: moto,
        etcd: etcd_support::Etcd::start().await,
        proxy,
        direct,
        ami: fx.ami,
        subnets: fx.subnets.into_iter().map(|s| s.0).collect(),
        sg: fx.sg,
        dir: tempfile::tempdir().expect("tempdir"),
    }
}

impl World {
    /// Write the configuration: one L4 pool and a service of `replicas` tasks of
    /// 8 GiB MPS each (two per g6.xlarge GPU), plus `extra` HCL.
    fn config(&self, replicas: u32, extra: &str) {
        self.config_at(self.path(), replicas, extra)
    }

    /// [`World::config`] written to `dir` (another state store of the same cluster).
    fn config_at(&self, dir: &Path, replicas: u32, extra: &str) {
        let subnets = self
            .subnets
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        let store = self.etcd.url(&store_prefix(dir));
        let hcl = format!(
            r#"gpushare {{
  cluster      = "{CLUSTER}"
  cloud        = "ec2"
  region       = "us-east-1"
  ec2_endpoint = "{endpoint}"
  store        = "{store}"
  controller_address = "https://controller.internal:7443"
}}

capacity_provider "l4" {{
  instance_type   = "g6.xlarge"
  max_size        = 20
  image           = "{ami}"
  subnets         = [{subnets}]
  security_groups = ["{sg}"]

  agent {{
    url    = "https://downloads.example.com/gpushare/0.1.0/gpushare-x86_64-linux"
    sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
  }}
}}

task_definition "embedder" {{
  container "server" {{
    image  = "ghcr.io/example/embedder:1.4"
    cpu    = 1024
    memory = 2048
    gpu {{
      mps {{
        memory = 8192
      }}
    }}
  }}
}}

service "embedder" {{
  task_definition   = "embedder"
  capacity_provider = "l4"
  desired_count     = {replicas}
}}
{extra}"#,
            endpoint = self.proxy.endpoint(),
            ami = self.ami,
            sg = self.sg,
        );
        std::fs::write(dir.join("main.hcl"), hcl).expect("write config");
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Instances of the cluster that are pending or running, counted in moto directly.
    async fn live(&self) -> Vec<Instance> {
        support::live_instances(&self.direct, CLUSTER).await
    }

    fn show_hosts(&self) -> Vec<serde_json::Value> {
        let run = gp(self.path(), &["show", "--json"]).run();
        run.expect_code(0);
        run.json()["hosts"].as_array().cloned().unwrap_or_default()
    }

    fn plan_json(&self) -> serde_json::Value {
        gp(self.path(), &["plan", "--json"]).run().plan_doc()
    }
}

/// The etcd key prefix of the store of the configuration in `dir` (one store per directory).
fn store_prefix(dir: &Path) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    dir.hash(&mut h);
    format!("store-{:016x}", h.finish())
}

impl World {
    /// The store id the store of the configuration in `dir` made for itself.
    async fn store_id_of(&self, dir: &Path) -> String {
        let key = format!("{}/store-id", store_prefix(dir));
        let kv = self
            .etcd
            .client()
            .await
            .get(key.clone())
            .await
            .expect("reading the store id")
            .unwrap_or_else(|| panic!("no {key} in etcd"));
        String::from_utf8_lossy(&kv.value).trim().to_string()
    }
}

/// Ids of the pending or running instances of the cluster tagged with `store_id`.
fn ids_of_store(live: &[Instance], store_id: &str) -> Vec<String> {
    let mut ids: Vec<String> = live
        .iter()
        .filter(|i| tag_of(i, tags::STORE_ID) == Some(store_id))
        .filter_map(|i| i.instance_id.as_deref().map(str::to_string))
        .collect();
    ids.sort();
    ids
}

/// Regression (issue 15): two state stores with the same cluster name in one account
/// took over each other's instances. teamB, a fresh store, planned the same host ids
/// and launch tokens as teamA, adopted teamA's instance at launch (found by the
/// launch-token tag) and terminated it on `destroy`. Now teamB launches its own
/// instance, names teamA's as another store's, and its destroy leaves teamA running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_store_of_the_same_cluster_never_takes_over_the_first_ones_instances() {
    let w = world().await;
    let team_a = w.path().join("teamA");
    let team_b = w.path().join("teamB");
    for dir in [&team_a, &team_b] {
        std::fs::create_dir_all(dir).expect("mkdir");
        // Two tasks of 8 GiB: one g6.xlarge host each.
        w.config_at(dir, 2, "");
    }

    gp(&team_a, &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    let a_instances = recorded_instances(&team_a);
    assert_eq!(a_instances.len(), 1, "teamA runs one host");
    assert_eq!(live_ids(&w).await, a_instances);

    // teamB plans (and launches) a host of its own.
    let plan = gp(&team_b, &["plan", "--json"]).run().plan_doc();
    assert_eq!(plan["summary"]["launch"], 1, "{plan:#}");
    gp(&team_b, &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    let b_instances = recorded_instances(&team_b);
    assert_eq!(b_instances.len(), 1, "teamB records one host");
    assert_ne!(
        b_instances, a_instances,
        "teamB launched its own instance instead of adopting teamA's"
    );
    let mut both = [a_instances.clone(), b_instances.clone()].concat();
    both.sort();
    assert_eq!(live_ids(&w).await, both, "two instances run");

    // teamB's plan names teamA's instance as another store's, and changes nothing.
    let id_a = w.store_id_of(&team_a).await;
    let id_b = w.store_id_of(&team_b).await;
    assert_ne!(id_a, id_b, "each store its own identity");
    let plan = gp(&team_b, &["plan"]).run();
    plan.expect_code(0);
    assert!(
        plan.stdout
            .contains(&format!("instance {} (host id", a_instances[0]))
            && plan.stdout.contains(&format!(
                "belongs to another state store (store id {id_a}): not touched"
            )),
        "teamB's plan names teamA's instance:\n{}",
        plan.stdout
    );
    let live = w.live().await;
    assert_eq!(
        ids_of_store(&live, &id_a),
        a_instances,
        "tagged with teamA's id"
    );
    assert_eq!(
        ids_of_store(&live, &id_b),
        b_instances,
        "tagged with teamB's id"
    );

    // teamB's destroy terminates its own instance and nothing of teamA's.
    gp(&team_b, &["destroy", "--auto-approve"])
        .run()
        .expect_code(0);
    assert_eq!(
        live_ids(&w).await,
        a_instances,
        "teamA's fleet still running after teamB's destroy"
    );
    assert!(recorded_instances(&team_b).is_empty());
    let a_show = gp(&team_a, &["show", "--json"]).run().json();
    let a_hosts = a_show["hosts"].as_array().expect("hosts");
    assert_eq!(a_hosts.len(), 1);
    assert_eq!(a_hosts[0]["instance_id"], a_instances[0].as_str());
    assert_eq!(a_hosts[0]["state"], "running");
    // teamA's next plan changes nothing.
    gp(&team_a, &["plan", "--detailed-exitcode"])
        .run()
        .expect_code(0);
}

/// Migration (issue 15): instances launched before store identity carry no store-id
/// tag. The store that recorded them adopts them once: its plan notes it, apply tags
/// the instance and its volume, and the next plan changes nothing. Another store of
/// the same cluster never adopts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_launched_before_store_identity_are_adopted_once_by_their_store() {
    let w = world().await;
    let team_a = w.path().join("teamA");
    let team_b = w.path().join("teamB");
    for dir in [&team_a, &team_b] {
        std::fs::create_dir_all(dir).expect("mkdir");
        w.config_at(dir, 2, "");
    }
    gp(&team_a, &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    let a_instances = recorded_instances(&team_a);
    assert_eq!(a_instances.len(), 1);
    // As launched before store identity: no store-id tag on the instance or its volume.
    let inst = &w.live().await[0];
    let mut resources = a_instances.clone();
    resources.extend(inst.volume_ids().map(str::to_string));
    assert!(resources.len() > 1, "the instance has its root volume");
    let mut delete = api::Params::new("DeleteTags");
    delete
        .list("ResourceId", &resources)
        .set("Tag.1.Key", tags::STORE_ID);
    w.direct
        .call::<api::model::Ignored>(&delete)
        .await
        .expect("delete the store-id tag");
    assert_eq!(tag_of(&w.live().await[0], tags::STORE_ID), None);

    // Another store never adopts it (it is not its host's token).
    let b_plan = gp(&team_b, &["plan", "--json"]).run().plan_doc();
    assert!(
        b_plan["adopted"].as_array().is_none_or(|a| a.is_empty()),
        "{b_plan:#}"
    );

    let id_a = w.store_id_of(&team_a).await;
    let plan = gp(&team_a, &["plan", "--detailed-exitcode"]).run();
    plan.expect_code(2);
    assert!(
        plan.stdout.contains(&format!(
            "instance {} (host h-", a_instances[0]
        )) && plan.stdout.contains(&format!(
            "no gpushare:store-id tag (launched before store identity): adopted by this state store; apply tags it with store id {id_a}"
        )) && plan.stdout.contains("1 untagged instance to adopt"),
        "{}",
        plan.stdout
    );
    gp(&team_a, &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    assert_eq!(
        tag_of(&w.live().await[0], tags::STORE_ID),
        Some(id_a.as_str()),
        "tagged once adopted"
    );
    let volumes = support::volumes(&w.direct, &resources[1..], &[]).await;
    assert_eq!(volumes.len(), resources.len() - 1);
    for v in &volumes {
        assert_eq!(v.tag(tags::STORE_ID), Some(id_a.as_str()), "{v:?}");
    }
    assert_eq!(
        recorded_instances(&team_a),
        a_instances,
        "the same instance"
    );
    gp(&team_a, &["plan", "--detailed-exitcode"])
        .run()
        .expect_code(0);
}

/// Instance ids recorded in the store of the configuration in `dir` (`show --json`).
fn recorded_instances(dir: &Path) -> Vec<String> {
    let run = gp(dir, &["show", "--json"]).run();
    run.expect_code(0);
    let mut ids: Vec<String> = run.json()["hosts"]
        .as_array()
        .map(|hs| {
            hs.iter()
                .filter_map(|h| h["instance_id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

/// Ids of the cluster's pending or running instances, sorted.
async fn live_ids(w: &World) -> Vec<String> {
    let mut ids: Vec<String> = w
        .live()
        .await
        .iter()
        .filter_map(|i| i.instance_id.as_deref().map(str::to_string))
        .collect();
    ids.sort();
    ids
}

fn is_launch(step: &serde_json::Value) -> bool {
    let lower = |s: &str| s.to_ascii_lowercase();
    match step {
        serde_json::Value::Object(m) => {
            m.keys().any(|k| lower(k) == "launch")
                || ["type", "kind", "step", "action"].iter().any(|k| {
                    m.get(*k)
                        .and_then(|v| v.as_str())
                        .is_some_and(|v| lower(v) == "launch")
                })
        }
        _ => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_converges_scales_down_and_destroy_spares_untagged_instances() {
    let w = world().await;
    // Someone else's instance in the same account.
    let other_id = support::run_untagged(&w.direct, &w.ami).await;

    w.config(6, "");
    let plan = w.plan_json();
    let planned = plan["summary"]["launch"].as_u64().expect("summary.launch") as usize;
    assert_eq!(planned, 3, "6 tasks of 8 GiB, two per L4: three hosts");
    gp(w.path(), &["apply", "--auto-approve"])
        .run()
        .expect_code(0);

    let live = w.live().await;
    assert_eq!(live.len(), planned, "the planned number of instances");
    let hosts = w.show_hosts();
    assert_eq!(hosts.len(), planned);
    let list = gp(w.path(), &["token", "list", "--json"]).run();
    list.expect_code(0);
    let tokens = list.json();
    let mut seen_tokens = std::collections::BTreeSet::new();
    for inst in &live {
        assert_eq!(inst.instance_type.as_deref(), Some("g6.xlarge"));
        let host_id = tag_of(inst, tags::HOST_ID).expect("host-id tag");
        assert!(
            hosts.iter().any(|h| h["id"] == host_id),
            "{host_id} is in the store"
        );
        assert_eq!(tag_of(inst, tags::POOL), Some("l4"));
        assert_eq!(tag_of(inst, tags::MANAGED_BY), Some("gpushare"));
        assert!(tag_of(inst, tags::LAUNCH_TOKEN).is_some_and(|t| !t.is_empty()));
        let md = inst.metadata_options.as_ref().expect("metadata options");
        assert_eq!(
            md.http_tokens.as_deref(),
            Some("required"),
            "IMDSv2 required"
        );
        let id = inst.instance_id.as_deref().expect("id");
        let script = support::user_data(&w.direct, id).await;
        assert!(script.contains("nvidia-smi -c EXCLUSIVE_PROCESS"));
        assert!(script.contains("ExecStart=/usr/bin/nvidia-cuda-mps-control -f"));
        // The host joins the controller with a token minted for it at launch (bound to
        // its host id, single-use), pinning the cluster CA; it never reads the store.
        assert!(!script.contains("--store"), "{script}");
        let ca_hash = tokens["ca_hash"].as_str().expect("ca hash");
        assert!(
            script.contains(&format!(
                "agent --server https://controller.internal:7443 --ca-hash {ca_hash} --host-id {host_id} --cluster {CLUSTER}"
            )),
            "{script}"
        );
        let token = script
            .lines()
            .find_map(|l| l.split("GPUSHARE_JOIN_TOKEN=%s\\n' '").nth(1))
            .and_then(|r| r.split('\'').next())
            .expect("the join token line");
        let token_id = token.split('.').next().expect("token id");
        let minted = tokens["tokens"]
            .as_array()
            .expect("tokens")
            .iter()
            .find(|t| t["id"] == token_id)
            .unwrap_or_else(|| panic!("token {token_id} is not in the store: {tokens:#}"));
        assert_eq!(minted["host_id"].as_str(), Some(host_id), "{minted:#}");
        assert_eq!(minted["uses_left"], 1, "{minted:#}");
        assert!(seen_tokens.insert(token.to_string()), "one token per host");
    }

    // A second apply launches nothing.
    let runs_before = w.proxy.count("RunInstances");
    gp(w.path(), &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    assert_eq!(
        w.proxy.count("RunInstances"),
        runs_before,
        "no RunInstances on the second apply"
    );
    assert_eq!(w.live().await.len(), planned);
    gp(w.path(), &["plan", "--detailed-exitcode"])
        .run()
        .expect_code(0);

    // Fewer replicas: the emptied hosts are retired (terminated in EC2).
    w.config(2, "");
    gp(w.path(), &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    let live = w.live().await;
    assert_eq!(live.len(), 1, "two tasks fit one host");
    assert_eq!(w.show_hosts().len(), 1);
    assert_eq!(w.proxy.count("TerminateInstances"), 2);

    // destroy terminates every instance of the cluster, and nothing else.
    gp(w.path(), &["destroy", "--auto-approve"])
        .run()
        .expect_code(0);
    assert!(
        w.live().await.is_empty(),
        "every cluster instance terminated"
    );
    let all = support::describe(
        &w.direct,
        api::DescribeInstances {
            instance_ids: vec![other_id.clone()],
            ..api::DescribeInstances::default()
        },
    )
    .await;
    let state = all[0].state_name();
    assert_eq!(
        state,
        Some(InstanceStateName::Running),
        "the untagged instance survives"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_apply_is_retried_and_completes() {
    let w = world().await;
    w.config(4, "");
    w.proxy
        .add_rule(Rule::new("RunInstances", Fault::Throttle, 3));
    w.proxy
        .add_rule(Rule::new("DescribeInstances", Fault::Throttle, 2));
    let run = gp(w.path(), &["apply", "--auto-approve"]).run();
    run.expect_code(0);
    assert_eq!(w.live().await.len(), 2);
    let throttled = w
        .proxy
        .calls()
        .iter()
        .filter(|c| c.fault == Some(Fault::Throttle))
        .count();
    assert_eq!(throttled, 5, "every injected throttle was met and retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_killed_between_run_instances_and_the_store_write_is_resumed_without_a_duplicate()
{
    let w = world().await;
    w.config(4, "");
    let plan = w.plan_json();
    let steps = plan["steps"].as_array().expect("plan steps");
    let first_launch = steps.iter().position(is_launch).expect("a launch step") + 1;
    let planned = steps.iter().filter(|s| is_launch(s)).count();
    assert_eq!(planned, 2);
    // Abort after the second launch's RunInstances, before its state commit.
    let crashed = gp(w.path(), &["apply", "--auto-approve"])
        .env(
            "GPUSHARE_FAILPOINT",
            &format!("before-commit:{}", first_launch + 1),
        )
        .run();
    assert_ne!(crashed.code, 0, "the failpoint aborts the process");
    assert_eq!(
        w.proxy.count("RunInstances"),
        2,
        "both launches reached EC2 before the crash"
    );
    assert_eq!(w.live().await.len(), 2);

    gp(w.path(), &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    assert_eq!(
        w.proxy.count("RunInstances"),
        2,
        "the resumed apply found the instance by its launch-token tag"
    );
    let live = w.live().await;
    assert_eq!(live.len(), planned, "no duplicate instance");
    let hosts = w.show_hosts();
    assert_eq!(hosts.len(), planned);
    for h in &hosts {
        let id = h["instance_id"].as_str().expect("instance id recorded");
        assert!(
            live.iter().any(|i| i.instance_id.as_deref() == Some(id)),
            "{id} is the live instance"
        );
    }
    gp(w.path(), &["plan", "--detailed-exitcode"])
        .run()
        .expect_code(0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_pool_fails_before_anything_is_launched() {
    let w = world().await;
    // A second, valid-looking pool whose subnet does not exist, used by a second service.
    let extra = format!(
        r#"
capacity_provider "broken" {{
  instance_type = "g6.xlarge"
  max_size      = 2
  image         = "{ami}"
  subnets       = ["subnet-0000dead"]
}}

service "other" {{
  task_definition   = "embedder"
  capacity_provider = "broken"
  desired_count     = 1
}}
"#,
        ami = w.ami
    );
    w.config(2, &extra);
    let run = gp(w.path(), &["apply", "--auto-approve"]).run();
    run.expect_code(1);
    assert!(
        run.stderr.contains("subnet-0000dead"),
        "names the subnet:\n{}",
        run.stderr
    );
    assert_eq!(w.proxy.count("RunInstances"), 0, "nothing launched");
    assert!(w.live().await.is_empty());
    let show = gp(w.path(), &["show", "--json"]).run();
    assert!(
        show.json()["hosts"].as_array().is_none_or(|h| h.is_empty()),
        "nothing recorded"
    );

    // Unknown instance type: named, with a suggestion, nothing launched.
    w.config(2, "");
    let hcl = std::fs::read_to_string(w.path().join("main.hcl"))
        .expect("read")
        .replace("\"g6.xlarge\"", "\"g6.xlargee\"");
    std::fs::write(w.path().join("main.hcl"), hcl).expect("write");
    let run = gp(w.path(), &["apply", "--auto-approve"]).run();
    run.expect_code(1);
    assert!(run.stderr.contains("g6.xlargee"), "{}", run.stderr);
    assert_eq!(w.proxy.count("RunInstances"), 0);
}

/// Issue 5's closing figure, through the CLI: a 20-host apply against moto, timed, and
/// its EC2 API calls counted by the proxy. The time is printed, never asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_host_apply_counts_its_api_calls() {
    let w = world().await;
    w.config(40, "");
    let start = Instant::now();
    gp(w.path(), &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    let elapsed = start.elapsed();
    let counts = w.proxy.counts();
    let total: u32 = counts.values().sum();
    eprintln!(
        "gpushare apply of 20 hosts against moto: {elapsed:?}, {total} EC2 API calls: {counts:?}"
    );
    assert_eq!(w.live().await.len(), 20);
    assert_eq!(counts.get("RunInstances"), Some(&20));
}

impl World {
    /// Add `line` to the gpushare block of the configuration.
    fn with_setting(&self, line: &str) {
        let path = self.path().join("main.hcl");
        let hcl = std::fs::read_to_string(&path).expect("read config");
        let hcl = hcl.replacen(
            "  store        =",
            &format!("  {line}\n  store        ="),
            1,
        );
        std::fs::write(&path, hcl).expect("write config");
    }
}

/// Regression (issue 14): a process that had not launched a host itself and observed
/// it before DescribeInstances listed it marked it terminated, and the next plan
/// launched it again. The store records each launch's time: within the consistency
/// window an unlisted host is pending, in every process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_another_process_just_launched_and_ec2_does_not_list_yet_is_pending() {
    let w = world().await;
    w.config(2, "");
    gp(w.path(), &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    let ids = recorded_instances(w.path());
    assert_eq!(ids.len(), 1);
    // EC2 does not list the fresh instance yet (as another caller may see it).
    w.proxy.hide_instance(&ids[0]);
    w.proxy.reset_calls();

    // A second process, within the (default, 300 s) window.
    let plan = w.plan_json();
    assert_eq!(plan["summary"]["launch"], 0, "{plan:#}");
    gp(w.path(), &["plan", "--detailed-exitcode"])
        .run()
        .expect_code(0);
    let hosts = w.show_hosts();
    assert_eq!(hosts.len(), 1);
    assert_eq!(hosts[0]["state"], "pending", "{hosts:#?}");
    gp(w.path(), &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    assert_eq!(w.proxy.count("RunInstances"), 0, "no second launch");
    assert_eq!(live_ids(&w).await, ids);
    assert!(
        w.proxy.count("DescribeInstances") > 0,
        "the processes did ask EC2"
    );

    // Without a window the same answer reads as a lost host: the hiding is real.
    w.with_setting("consistency_window_seconds = 0");
    let plan = w.plan_json();
    assert_eq!(plan["summary"]["launch"], 1, "{plan:#}");
}

/// AWS_MAX_ATTEMPTS (and a profile's max_attempts) set how many attempts a call
/// gets; gpushare's own default (8) applies only when neither is set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_max_attempts_sets_the_attempts_seen_at_the_proxy() {
    let w = world().await;
    w.config(2, "");
    let throttled = || {
        w.proxy.clear_rules();
        w.proxy.reset_calls();
        w.proxy
            .add_rule(Rule::new("DescribeInstances", Fault::Throttle, 3));
    };

    throttled();
    let run = gp(w.path(), &["plan"]).env("AWS_MAX_ATTEMPTS", "2").run();
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(
        w.proxy.count("DescribeInstances"),
        2,
        "{:?}",
        w.proxy.counts()
    );

    let profile = w.path().join("aws-config");
    std::fs::write(&profile, "[default]\nmax_attempts = 2\n").expect("profile");
    throttled();
    let run = gp(w.path(), &["plan"])
        .env("AWS_CONFIG_FILE", &profile.display().to_string())
        .run();
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(
        w.proxy.count("DescribeInstances"),
        2,
        "the profile's max_attempts"
    );

    // Neither set: gpushare's 8 attempts ride out three throttles.
    throttled();
    gp(w.path(), &["plan"]).run().expect_code(0);
    let faulted = w
        .proxy
        .calls()
        .iter()
        .filter(|c| c.action == "DescribeInstances" && c.fault.is_some())
        .count();
    assert_eq!(faulted, 3);
    assert!(
        w.proxy.count("DescribeInstances") >= 4,
        "{:?}",
        w.proxy.counts()
    );
}

/// Tags beyond EC2's limits are refused at validate, located, before any EC2 call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_over_ec2_limits_are_refused_before_any_call() {
    let w = world().await;
    w.config(
        2,
        r#"
gpu_instance "pinned" {
  capacity_provider = capacity_provider.l4
  tags = {
    "aws:owner" = "me"
  }
}
"#,
    );
    w.proxy.reset_calls();
    let run = gp(w.path(), &["plan"]).run();
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stderr.contains("reserved for AWS") && run.stderr.contains("main.hcl:"),
        "{}",
        run.stderr
    );
    assert!(w.proxy.calls().is_empty(), "{:?}", w.proxy.counts());
}

impl World {
    /// [`World::config`] with `lines` added to the L4 pool.
    fn config_pool(&self, replicas: u32, lines: &str) {
        self.config(replicas, "");
        let path = self.path().join("main.hcl");
        let text = std::fs::read_to_string(&path).expect("read config");
        let text = text.replacen(
            "  instance_type   = \"g6.xlarge\"\n",
            &format!("  instance_type   = \"g6.xlarge\"\n{lines}"),
            1,
        );
        assert!(text.contains(lines));
        std::fs::write(&path, text).expect("write config");
    }
}

/// Issue 14 (Spot): a Spot pool launches Spot instances (the requests as moto gets
/// them), its cost is shown as an upper bound, and an instance EC2 interrupts (here
/// terminated directly in moto, as an interruption with `terminate` behaviour leaves
/// it) is replaced by the next plan, which places its tasks again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_pool_launches_spot_and_an_interrupted_hosts_tasks_are_placed_again() {
    let w = world().await;
    w.config_pool(4, "  market          = \"spot\"\n  max_price       = 0.9\n");
    let plan = gp(w.path(), &["plan"]).run();
    // The Spot hosts cost EC2's current Spot price (moto's DescribeSpotPriceHistory
    // says $0.00001 an hour), not their max_price; moto serves no Price List API and
    // the EC2 endpoint is overridden, so On-Demand prices are the table's.
    assert!(
        plan.stdout
            .contains("g6.xlarge spot (at most $0.90/h) in capacity_provider.l4")
            && plan.stdout.contains(
                "Cost per hour (prices: us-east-1 table, no regional prices, as of "
            )
            && plan.stdout.contains("; Spot at EC2's current price): now $0.00, after $0.00;")
            && !plan.stdout.contains("at most $1.80")
            && plan.stdout.contains(
                "Prices: no regional prices for us-east-1 (us-east-1 table used): the EC2 endpoint is overridden"
            ),
        "{}{}",
        plan.stdout,
        plan.stderr
    );
    gp(w.path(), &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    let runs: Vec<_> = w
        .proxy
        .calls()
        .into_iter()
        .filter(|c| c.action == "RunInstances")
        .collect();
    assert_eq!(runs.len(), 2, "4 tasks of 8 GiB, two per L4: two hosts");
    for r in &runs {
        let p = &r.params;
        assert_eq!(
            p.get("InstanceMarketOptions.MarketType")
                .map(String::as_str),
            Some("spot")
        );
        assert_eq!(
            p.get("InstanceMarketOptions.SpotOptions.SpotInstanceType")
                .map(String::as_str),
            Some("one-time")
        );
        assert_eq!(
            p.get("InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior")
                .map(String::as_str),
            Some("terminate")
        );
        assert_eq!(
            p.get("InstanceMarketOptions.SpotOptions.MaxPrice")
                .map(String::as_str),
            Some("0.9")
        );
    }
    let live = w.live().await;
    assert_eq!(live.len(), 2);

    // EC2 interrupts one of them.
    let gone = live[0].instance_id.as_deref().expect("id").to_string();
    let gone_host = tag_of(&live[0], tags::HOST_ID)
        .expect("host id")
        .to_string();
    let tasks_before = gp(w.path(), &["show", "--json"]).run().json()["tasks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let on_gone = tasks_before
        .iter()
        .filter(|t| t["host"] == gone_host.as_str())
        .count();
    assert_eq!(on_gone, 2, "two tasks on each host");
    w.direct
        .terminate_instances(std::slice::from_ref(&gone))
        .await
        .expect("terminate in moto");

    // The next plan replaces it and places its two tasks on the replacement.
    let plan = w.plan_json();
    let launches = plan["launches"].as_array().cloned().unwrap_or_default();
    assert_eq!(launches.len(), 1, "{plan:#}");
    let new_host = launches[0]["host"]["id"]
        .as_str()
        .expect("new host id")
        .to_string();
    assert_eq!(launches[0]["host"]["market"], "spot");
    let starts = plan["starts"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        starts
            .iter()
            .filter(|s| s["task"]["host"] == new_host.as_str())
            .count(),
        2,
        "{plan:#}"
    );
    gp(w.path(), &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    let live = w.live().await;
    assert_eq!(live.len(), 2, "back to two instances");
    assert!(live
        .iter()
        .all(|i| i.instance_id.as_deref() != Some(gone.as_str())));
    let tasks = gp(w.path(), &["show", "--json"]).run().json()["tasks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(tasks.len(), 4);
    assert!(tasks.iter().all(|t| t["host"] != gone_host.as_str()));
    assert_eq!(
        tasks
            .iter()
            .filter(|t| t["host"] == new_host.as_str())
            .count(),
        2
    );
    assert_eq!(w.proxy.count("RunInstances"), 3, "one replacement launched");
}

/// (subnet, zone, image) of each launch a `plan --json` fixed, in plan order.
fn planned_launches(plan: &serde_json::Value) -> Vec<(String, String, String)> {
    plan["launches"]
        .as_array()
        .map(|ls| {
            ls.iter()
                .map(|l| {
                    let h = &l["host"];
                    let s = |k: &str| h[k].as_str().unwrap_or("").to_string();
                    (s("subnet"), s("zone"), s("image_id"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Gather, then plan (issue 14): the plan fixes the AMI, subnet and zone of every
/// launch and shows them; the same inputs give the same plan; `apply` of the saved
/// plan sends exactly those (the RunInstances moto receives). A zone that answers
/// InsufficientInstanceCapacity fails its launch and is recorded (the wave's other
/// launch, already under way beside it, finishes and is recorded too); the next plan
/// places the host in the other zone and the fleet converges with no duplicate instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_plan_launches_exactly_where_it_says_and_a_refused_zone_is_avoided_next() {
    let w = world().await;
    w.config(6, "");
    let first = planned_launches(&w.plan_json());
    assert_eq!(first.len(), 3, "{first:?}");
    assert_eq!(
        first,
        planned_launches(&w.plan_json()),
        "same inputs, same plan"
    );
    let zones: Vec<&str> = first.iter().map(|l| l.1.as_str()).collect();
    assert_eq!(
        zones,
        ["us-east-1a", "us-east-1b", "us-east-1a"],
        "spread over the zones"
    );
    assert!(first.iter().all(|l| l.2 == w.ami));
    let run = gp(w.path(), &["plan", "-out=saved.plan"]).run();
    run.expect_code(0);
    assert!(
        run.stdout.contains(&format!(
            "in subnet {} (us-east-1b), image {}",
            w.subnets[1], w.ami
        )),
        "the plan shows where each host launches:\n{}",
        run.stdout
    );
    gp(w.path(), &["apply", "saved.plan"]).run().expect_code(0);
    let sent: Vec<(String, String)> = w
        .proxy
        .calls()
        .into_iter()
        .filter(|c| c.action == "RunInstances" && c.fault.is_none())
        .map(|c| {
            let p = |k: &str| c.params.get(k).cloned().unwrap_or_default();
            (p("SubnetId"), p("ImageId"))
        })
        .collect();
    let mut expected: Vec<(String, String)> =
        first.iter().map(|l| (l.0.clone(), l.2.clone())).collect();
    let mut got = sent.clone();
    expected.sort();
    got.sort();
    assert_eq!(
        got, expected,
        "RunInstances sent exactly the planned subnets and image"
    );
    assert_eq!(w.live().await.len(), 3);

    // us-east-1b has no g6.xlarge capacity any more.
    let full = w.subnets[1].clone();
    w.proxy.add_rule(
        Rule::new("RunInstances", Fault::Capacity, u32::MAX)
            .when_body_contains(&format!("SubnetId={full}")),
    );
    w.config(10, "");
    let next = planned_launches(&w.plan_json());
    assert_eq!(next.len(), 2, "{next:?}");
    assert_eq!(
        next[0].1, "us-east-1b",
        "the zone with fewer hosts first: {next:?}"
    );
    let run = gp(w.path(), &["apply", "--auto-approve"]).run();
    run.expect_code(1);
    assert!(
        run.stderr.contains("no capacity") && run.stderr.contains(&full),
        "names the refused subnet:\n{}",
        run.stderr
    );
    // The wave's two launches ran side by side: the us-east-1a one was already under
    // way when us-east-1b refused, so it finished and is recorded; nothing was
    // launched in the refused zone.
    let live = w.live().await;
    assert_eq!(
        live.len(),
        4,
        "the side-by-side launch in us-east-1a finished"
    );
    assert_eq!(
        live.iter()
            .filter(|i| i.subnet_id.as_deref() == Some(full.as_str()))
            .count(),
        1,
        "nothing launched in the refused zone"
    );
    assert_eq!(
        recorded_instances(w.path()),
        live_ids(&w).await,
        "the host launched beside the refused one is in the state"
    );
    // The refusal is in the state: the next plan places the last host in us-east-1a.
    let again = planned_launches(&w.plan_json());
    assert_eq!(
        again.iter().map(|l| l.1.as_str()).collect::<Vec<_>>(),
        ["us-east-1a"],
        "{again:?}"
    );
    gp(w.path(), &["apply", "--auto-approve"])
        .run()
        .expect_code(0);
    let live = w.live().await;
    assert_eq!(live.len(), 5, "converged: ten tasks, two per host");
    let mut ids: Vec<&str> = live
        .iter()
        .filter_map(|i| i.instance_id.as_deref())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 5, "no duplicate instance");
    assert_eq!(
        live.iter()
            .filter(|i| i.subnet_id.as_deref() == Some(full.as_str()))
            .count(),
        1,
        "only the first round's host is in the refused subnet"
    );
    assert_eq!(recorded_instances(w.path()), live_ids(&w).await);
}

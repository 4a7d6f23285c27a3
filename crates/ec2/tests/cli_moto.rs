//! End to end: the real `gpushare` binary with `cloud = "ec2"` against a real
//! moto_server, through the fault proxy (which also counts the API calls).
//! Only 127.0.0.1 is connected to; the addresses moto gives instances are never used.

mod support;

use aws_sdk_ec2::types::InstanceStateName;
use gpushare_ec2::tags;
use gpushare_tests::gp;
use std::path::Path;
use std::time::Instant;
use support::{direct_client, tag_of, Fault, FaultProxy, Moto, Rule};

const CLUSTER: &str = "e2e";

struct World {
    _moto: Moto,
    proxy: FaultProxy,
    direct: aws_sdk_ec2::Client,
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
        let subnets = self
            .subnets
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        let hcl = format!(
            r#"gpushare {{
  cluster      = "{CLUSTER}"
  cloud        = "ec2"
  region       = "us-east-1"
  ec2_endpoint = "{endpoint}"
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
        std::fs::write(self.dir.path().join("main.hcl"), hcl).expect("write config");
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Instances of the cluster that are pending or running, counted in moto directly.
    async fn live(&self) -> Vec<aws_sdk_ec2::types::Instance> {
        support::live_instances(&self.direct, CLUSTER).await
    }

    fn show_hosts(&self) -> Vec<serde_json::Value> {
        let run = gp(self.path(), &["show", "--json"]).run();
        run.expect_code(0);
        run.json()["hosts"].as_array().cloned().unwrap_or_default()
    }

    fn plan_json(&self) -> serde_json::Value {
        let run = gp(self.path(), &["plan", "--json"]).run();
        run.json()
    }
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
    for inst in &live {
        assert_eq!(inst.instance_type().map(|t| t.as_str()), Some("g6.xlarge"));
        let host_id = tag_of(inst, tags::HOST_ID).expect("host-id tag");
        assert!(
            hosts.iter().any(|h| h["id"] == host_id),
            "{host_id} is in the store"
        );
        assert_eq!(tag_of(inst, tags::POOL), Some("l4"));
        assert_eq!(tag_of(inst, tags::MANAGED_BY), Some("gpushare"));
        assert!(tag_of(inst, tags::LAUNCH_TOKEN).is_some_and(|t| !t.is_empty()));
        let md = inst.metadata_options().expect("metadata options");
        assert_eq!(
            md.http_tokens().map(|t| t.as_str()),
            Some("required"),
            "IMDSv2 required"
        );
        let id = inst.instance_id().expect("id");
        let script = support::user_data(&w.direct, id).await;
        assert!(script.contains("nvidia-smi -c EXCLUSIVE_PROCESS"));
        assert!(script.contains("ExecStart=/usr/bin/nvidia-cuda-mps-control -f"));
        assert!(script.contains("agent --store "));
        assert!(script.contains(&format!("--host-id {host_id} --cluster {CLUSTER}")));
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
    let all = w
        .direct
        .describe_instances()
        .instance_ids(&other_id)
        .send()
        .await
        .expect("describe other");
    let state = all.reservations()[0].instances()[0]
        .state()
        .and_then(|s| s.name())
        .cloned();
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
            live.iter().any(|i| i.instance_id() == Some(id)),
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

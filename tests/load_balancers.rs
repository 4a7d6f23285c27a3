//! Load balancers end to end (issue 48): a service behind a real moto ELBv2 target
//! group (target type `ip`), its tasks run by real `gpushare agent` processes (the
//! process runtime) on a local fleet with external agents, each reporting its own
//! address. The group is read with boto3 (moto's own SDK), never with gpushare's
//! client: 3 healthy tasks are registered with their host ports; a new revision
//! rolls through without the group ever holding fewer healthy targets than the
//! service's minimum; scale-in to 1 and destroy leave 1, then 0 targets, and apply's
//! progress shows each deregistration before its task's stop.
//!
//! The tasks need no GPU; the agents run without MPS and read their GPU inventory
//! from a file. No address moto hands back is ever connected to (moto does not
//! probe targets).

use gpushare_testkit::moto::{moto_binary, Moto};
use gpushare_tests::{file_store_reports, file_store_state, gp, kill_task_processes, local_agent};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const AWS_ENV: [(&str, &str); 4] = [
    ("AWS_ACCESS_KEY_ID", "testing"),
    ("AWS_SECRET_ACCESS_KEY", "testing"),
    ("AWS_REGION", "us-east-1"),
    ("AWS_EC2_METADATA_DISABLED", "true"),
];

/// boto3 against moto: `create` makes a VPC and an `ip` target group and prints
/// its ARN; `targets ARN` prints the group's targets as JSON; `watch ARN OUT STOP`
/// appends the count of healthy targets to OUT every 100 ms until STOP exists.
const BOTO: &str = r#"
import boto3, json, os, sys, time
elb = boto3.client("elbv2", endpoint_url=os.environ["MOTO"], region_name="us-east-1")
def targets(arn):
    d = elb.describe_target_health(TargetGroupArn=arn)["TargetHealthDescriptions"]
    return [{"id": t["Target"]["Id"], "port": t["Target"]["Port"], "state": t["TargetHealth"]["State"]} for t in d]
if sys.argv[1] == "create":
    ec2 = boto3.client("ec2", endpoint_url=os.environ["MOTO"], region_name="us-east-1")
    vpc = ec2.create_vpc(CidrBlock="127.0.0.0/16")["Vpc"]["VpcId"]
    tg = elb.create_target_group(Name="web", Protocol="HTTP", Port=80, VpcId=vpc, TargetType="ip")
    arn = tg["TargetGroups"][0]["TargetGroupArn"]
    elb.modify_target_group_attributes(TargetGroupArn=arn, Attributes=[{"Key": "deregistration_delay.timeout_seconds", "Value": "5"}])
    print(arn)
elif sys.argv[1] == "targets":
    print(json.dumps(targets(sys.argv[2])))
elif sys.argv[1] == "watch":
    with open(sys.argv[3], "a") as out:
        while not os.path.exists(sys.argv[4]):
            n = sum(1 for t in targets(sys.argv[2]) if t["state"] == "healthy")
            out.write(f"{n}\n"); out.flush()
            time.sleep(0.1)
"#;

fn boto(moto: &Moto, args: &[&str]) -> Command {
    let python = moto_binary()
        .parent()
        .map(|d| d.join("python3"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("python3"));
    let mut c = Command::new(python);
    c.arg("-c")
        .arg(BOTO)
        .args(args)
        .env("MOTO", moto.endpoint())
        .envs(AWS_ENV);
    c
}

fn boto_out(moto: &Moto, args: &[&str]) -> String {
    let out = boto(moto, args)
        .output()
        .expect("python3 with boto3 (moto's venv)");
    assert!(
        out.status.success(),
        "boto3 {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The group's targets: (address, port) -> state.
fn targets(moto: &Moto, arn: &str) -> BTreeMap<(String, u16), String> {
    let v: serde_json::Value =
        serde_json::from_str(&boto_out(moto, &["targets", arn])).expect("targets JSON");
    v.as_array()
        .expect("a list")
        .iter()
        .map(|t| {
            let id = t["id"].as_str().expect("id").to_string();
            let port = t["port"].as_u64().expect("port") as u16;
            ((id, port), t["state"].as_str().expect("state").to_string())
        })
        .collect()
}

fn config(moto: &Moto, arn: &str, count: u32, version: &str) -> String {
    format!(
        r#"
gpushare {{
  cluster              = "lb"
  cloud                = "local"
  local_agents         = "external"
  region               = "us-east-1"
  elbv2_endpoint       = "{endpoint}"
  move_timeout_seconds = 90
}}

capacity_provider "l4" {{
  instance_type   = "g6.xlarge"
  max_size        = 4
  host_port_range = "41000-41099"
}}

task_definition "web" {{
  container "web" {{
    image   = "unused-by-the-process-runtime"
    command = ["sleep", "600"]
    cpu     = 1024
    memory  = 512
    env     = {{ VERSION = "{version}" }}
    port_mapping {{
      container_port = 8080
    }}
  }}
}}

service "web" {{
  task_definition   = "web"
  capacity_provider = "l4"
  desired_count     = {count}
  distinct_host     = true

  deployment {{
    min_healthy_seconds = 1
    min_healthy_percent = 100
    max_surge_percent   = 100
  }}

  load_balancer {{
    target_group_arn = "{arn}"
    container_name   = "web"
    container_port   = 8080
  }}
}}
"#,
        endpoint = moto.endpoint()
    )
}

/// One `gpushare agent` per host of the state (process runtime), each with its
/// own address.
struct Agents {
    dir: PathBuf,
    running: BTreeMap<String, Child>,
    tasks_seen: BTreeSet<String>,
}

impl Agents {
    fn new(dir: &Path) -> Agents {
        Agents {
            dir: dir.to_path_buf(),
            running: BTreeMap::new(),
            tasks_seen: BTreeSet::new(),
        }
    }

    /// Start an agent for every host of the state that has none, host number `n`
    /// reporting the loopback address 127.0.1.(10 + n), inside the test's own moto VPC
    /// (moto checks no target; nothing connects to these addresses).
    fn start_missing(&mut self) {
        let Some(state) = file_store_state(&self.dir.join(".gpushare")) else {
            return;
        };
        let hosts: Vec<String> = state["hosts"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        if let Some(tasks) = state["tasks"].as_object() {
            self.tasks_seen.extend(tasks.keys().cloned());
        }
        for id in hosts {
            if self.running.contains_key(&id) {
                continue;
            }
            let address = format!("127.0.1.{}", 10 + self.running.len());
            let child = local_agent(&self.dir, "lb", &id, &address)
                .args(["--runtime", "process"])
                .spawn()
                .expect("spawning gpushare agent");
            self.running.insert(id, child);
        }
    }

    /// (address, host port) of each task the agents report running.
    fn running_targets(&self) -> BTreeSet<(String, u16)> {
        let state = file_store_state(&self.dir.join(".gpushare")).expect("a state");
        let reports = file_store_reports(&self.dir.join(".gpushare"));
        let mut out = BTreeSet::new();
        for r in &reports {
            for (id, s) in &r.tasks {
                if *s != gpushare_core::model::TaskState::Running {
                    continue;
                }
                let port = state["tasks"][id]["ports"][0]["host_port"].as_u64();
                if let (Some(a), Some(p)) = (&r.address, port) {
                    out.insert((a.clone(), p as u16));
                }
            }
        }
        out
    }
}

impl Drop for Agents {
    fn drop(&mut self) {
        for c in self.running.values_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for t in &self.tasks_seen {
            kill_task_processes(t);
        }
    }
}

/// `gpushare ARGS` in `dir` with moto's AWS credentials and region.
fn aws_gp(dir: &Path, args: &[&str]) -> gpushare_tests::Gp {
    AWS_ENV.iter().fold(gp(dir, args), |g, (k, v)| g.env(k, v))
}

/// Run `gpushare ARGS` to completion while starting agents for new hosts.
fn run_with_agents(dir: &Path, agents: &mut Agents, args: &[&str]) -> (i32, String) {
    let out_path = dir.join("run.out");
    let out = std::fs::File::create(&out_path).expect("output file");
    let mut child =
        aws_gp(dir, args).spawn_with(Stdio::from(out.try_clone().expect("dup")), Stdio::from(out));
    let deadline = Instant::now() + Duration::from_secs(300);
    let code = loop {
        agents.start_missing();
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code().unwrap_or(-1);
        }
        assert!(
            Instant::now() < deadline,
            "gpushare {args:?} did not finish"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    agents.start_missing();
    (code, std::fs::read_to_string(&out_path).unwrap_or_default())
}

/// The tasks apply's progress in `out` says it stopped.
fn stopped_tasks(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.split("stop task ").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// In `out`, the step line that deregisters task `task` comes before the one that stops it.
fn deregistered_before_stop(out: &str, task: &str) {
    let find = |what: &str| {
        out.lines()
            .position(|l| l.contains(what) && l.contains(task))
            .unwrap_or_else(|| panic!("no line with {what:?} and {task}:\n{out}"))
    };
    let dereg = find("deregister");
    let stop = find("stop task");
    assert!(
        dereg < stop,
        "task {task}: stop before deregistration:\n{out}"
    );
}

#[test]
fn a_service_behind_a_target_group_registers_rolls_scales_in_and_destroys() {
    let moto = Moto::start();
    let arn = boto_out(&moto, &["create"]);
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let mut agents = Agents::new(dir);
    let write = |count: u32, version: &str| {
        std::fs::write(
            dir.join("main.gpushare.hcl"),
            config(&moto, &arn, count, version),
        )
        .expect("config")
    };
    write(3, "1");
    // 1. Three tasks on three hosts; each joins the group once healthy.
    let (code, out) = run_with_agents(dir, &mut agents, &["apply", "--auto-approve"]);
    assert_eq!(code, 0, "{out}");
    let want = agents.running_targets();
    assert_eq!(want.len(), 3, "{out}");
    let got = targets(&moto, &arn);
    assert_eq!(
        got.keys().cloned().collect::<BTreeSet<_>>(),
        want,
        "the group's targets are the tasks' addresses and host ports\n{out}"
    );
    assert!(got.values().all(|s| s == "healthy"), "{got:?}");
    // `endpoints` and `show` give the group's verdict beside the container's health.
    let e = aws_gp(dir, &["endpoints", "--json"]).run();
    e.expect_code(0);
    let list = e.json()["endpoints"]
        .as_array()
        .cloned()
        .expect("endpoints");
    assert_eq!(list.len(), 3, "{}", e.stdout);
    for ep in &list {
        assert_eq!(ep["target_health"]["web"], "healthy", "{ep}");
    }
    let shown = aws_gp(dir, &["show"]).run();
    assert!(
        shown.stdout.contains("Target groups") && shown.stdout.matches(" healthy").count() >= 3,
        "{}",
        shown.stdout
    );

    // 2. A new revision rolls through: the group never holds fewer than 3 healthy
    //    targets (min_healthy_percent = 100 of 3), sampled every 100 ms by boto3.
    write(3, "2");
    let samples = dir.join("healthy.txt");
    let stop = dir.join("stop-watching");
    let mut watch = boto(
        &moto,
        &[
            "watch",
            &arn,
            &samples.display().to_string(),
            &stop.display().to_string(),
        ],
    )
    .spawn()
    .expect("watcher");
    // Room for one more host at a time (max_size 4, one task per host): the
    // rollout takes a pass per task, as `gpushare reconcile` would run them.
    let mut out = String::new();
    for _pass in 0..8 {
        let (code, o) = run_with_agents(dir, &mut agents, &["apply", "--auto-approve"]);
        assert_eq!(code, 0, "{o}");
        out.push_str(&o);
        if o.contains("No changes") {
            break;
        }
    }
    std::fs::write(&stop, "").expect("stop file");
    let _ = watch.wait();
    let counts: Vec<usize> = std::fs::read_to_string(&samples)
        .expect("samples")
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert!(counts.len() > 5, "too few samples: {counts:?}");
    assert!(
        counts.iter().all(|n| *n >= 3),
        "the group fell below 3 healthy targets during the deployment: {counts:?}\n{out}"
    );
    let after = agents.running_targets();
    let got: BTreeSet<(String, u16)> = targets(&moto, &arn).keys().cloned().collect();
    assert_eq!(got, after, "{out}");
    let state = file_store_state(&dir.join(".gpushare")).expect("state");
    let revisions: Vec<u64> = state["tasks"]
        .as_object()
        .expect("tasks")
        .values()
        .map(|t| t["revision"].as_u64().expect("revision"))
        .collect();
    assert_eq!(
        revisions,
        [2, 2, 2],
        "every task runs the new revision\n{out}"
    );
    let _ = want;

    // 3. Scale in to 1: two deregistrations, each before its task's stop.
    write(1, "2");
    let (code, out) = run_with_agents(dir, &mut agents, &["apply", "--auto-approve"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(targets(&moto, &arn).len(), 1, "{out}");
    let stopped = stopped_tasks(&out);
    assert_eq!(stopped.len(), 2, "{out}");
    for t in &stopped {
        deregistered_before_stop(&out, t);
    }

    // 4. Destroy: the last target leaves before its task stops.
    let (code, out) = run_with_agents(dir, &mut agents, &["destroy", "--auto-approve"]);
    assert_eq!(code, 0, "{out}");
    assert!(targets(&moto, &arn).is_empty(), "{out}");
    let stopped = stopped_tasks(&out);
    assert_eq!(stopped.len(), 1, "{out}");
    deregistered_before_stop(&out, &stopped[0]);
}

//! `cloud = "ec2"` through the real `terraform` binary, against a real `moto_server`
//! on 127.0.0.1 (a free port): apply launches tagged instances, a second plan is
//! clean, destroy terminates every instance of the cluster. Loopback only: no address
//! moto hands out for an instance is ever connected to.
#![cfg(feature = "ec2")]

/// A real etcd (Debian's etcd-server) holds the state. Hosts never read it: they join
/// the controller named by `controller_address` (never dialled: moto's instances do
/// not boot).
use gpushare_testkit_engine::ec2 as support;
use gpushare_testkit_engine::etcd as etcd_support;
mod tfwork;

use gpushare_ec2::api::InstanceStateName;
use std::process::Output;
use tfwork::Workdir;

const CLUSTER: &str = "tf-ec2";

/// `terraform ARGS` with test credentials; `endpoint_env`: the endpoint through the
/// standard AWS_ENDPOINT_URL_EC2 instead of the provider's `endpoints`.
fn run(w: &Workdir, args: &[&str], endpoint_env: Option<&str>) -> Output {
    let mut c = w.command(args);
    c.env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_REGION", support::REGION)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", "/nonexistent/gpushare-test-aws-config")
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            "/nonexistent/gpushare-test-aws-credentials",
        )
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("AWS_ENDPOINT_URL_EC2");
    if let Some(e) = endpoint_env {
        c.env("AWS_ENDPOINT_URL_EC2", e);
    }
    w.output(c, args)
}

fn ok(w: &Workdir, args: &[&str], endpoint_env: Option<&str>) {
    let out = run(w, args, endpoint_env);
    assert!(out.status.success(), "terraform {} failed", args.join(" "));
}

fn config(ami: &str, subnet: &str, sg: &str, store: &str) -> String {
    format!(
        r#"terraform {{
  required_providers {{
    gpushare = {{
      source = "gpushare/gpushare"
    }}
  }}
}}

variable "ec2_endpoint" {{
  type    = string
  default = null
}}

provider "gpushare" {{
  cluster   = "{CLUSTER}"
  cloud     = "ec2"
  region    = "us-east-1"
  store     = "{store}"
  controller_address = "https://controller.internal:7443"
  endpoints = var.ec2_endpoint == null ? {{}} : {{ ec2 = var.ec2_endpoint }}
}}

resource "gpushare_capacity_provider" "l4" {{
  name            = "l4"
  instance_type   = "g6.xlarge"
  max_size        = 4
  image           = "{ami}"
  subnets         = ["{subnet}"]
  security_groups = ["{sg}"]
}}

resource "gpushare_task_definition" "embedder" {{
  name = "embedder"

  container {{
    name   = "server"
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

resource "gpushare_service" "embedder" {{
  name              = "embedder"
  task_definition   = gpushare_task_definition.embedder.name
  capacity_provider = gpushare_capacity_provider.l4.name
  desired_count     = 4
}}
"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn terraform_applies_an_ec2_config_against_moto_and_destroys_it() {
    support::test_env();
    let moto = support::Moto::start();
    let endpoint = moto.endpoint();
    let direct = support::direct_client(&endpoint);
    let fx = support::Fixture::create(&direct).await;
    let (subnet, _zone) = fx.subnets[0].clone();
    let etcd = etcd_support::Etcd::start().await;
    let w = Workdir::new(&config(&fx.ami, &subnet, &fx.sg, &etcd.url("tf-ec2")));
    let var = format!("-var=ec2_endpoint={endpoint}");

    // Apply with `endpoints = { ec2 = ... }` in the provider block.
    ok(&w, &["apply", "-auto-approve", "-no-color", &var], None);
    let live = support::live_instances(&direct, CLUSTER).await;
    // Four 8 GiB MPS tasks, two per g6.xlarge (one 24 GiB L4): two hosts.
    assert_eq!(live.len(), 2, "instances in moto: {live:?}");
    let mut host_ids = Vec::new();
    for i in &live {
        assert_eq!(i.instance_type.as_deref(), Some("g6.xlarge"), "{i:?}");
        assert_eq!(i.image_id.as_deref(), Some(fx.ami.as_str()));
        assert_eq!(i.subnet_id.as_deref(), Some(subnet.as_str()));
        assert_eq!(support::tag_of(i, "gpushare:cluster"), Some(CLUSTER));
        assert_eq!(support::tag_of(i, "gpushare:pool"), Some("l4"));
        assert_eq!(support::tag_of(i, "gpushare:managed-by"), Some("gpushare"));
        host_ids.push(
            support::tag_of(i, "gpushare:host-id")
                .expect("host-id tag")
                .to_string(),
        );
    }
    host_ids.sort();
    host_ids.dedup();
    assert_eq!(host_ids.len(), 2, "distinct host ids: {host_ids:?}");

    // No perpetual diff.
    let out = run(
        &w,
        &["plan", "-detailed-exitcode", "-no-color"],
        Some(&endpoint),
    );
    assert_eq!(out.status.code(), Some(0), "plan after apply is not clean");
    assert_eq!(
        support::live_instances(&direct, CLUSTER).await.len(),
        2,
        "plan launched nothing"
    );

    // Destroy must reach moto to terminate the hosts: this time the endpoint comes only
    // from the standard AWS_ENDPOINT_URL_EC2 (the provider block's `endpoints` is empty).
    ok(
        &w,
        &["destroy", "-auto-approve", "-no-color"],
        Some(&endpoint),
    );
    let all = support::tagged_instances(&direct, CLUSTER, None).await;
    assert_eq!(
        all.len(),
        2,
        "every instance ever launched is still listed: {all:?}"
    );
    for i in &all {
        assert_eq!(
            i.state_name(),
            Some(InstanceStateName::Terminated),
            "instance {:?} not terminated",
            i.instance_id.as_deref()
        );
    }
    drop(moto);
}

//! Rolling host refresh through the real `terraform` binary (issue 25): a new pool
//! image is an in-place update (not `-/+`), the plan's fleet warning lists the hosts
//! to refresh, each apply rolls one batch (the pool plans an update with `host_ids`
//! unknown while hosts are left to roll), and the fleet ends on the new image.

mod tfwork;

use gpushare_core::model::StoreState;
use gpushare_core::plan::outdated_settings;
use gpushare_engine::store::{FileStore, Store};
use tfwork::Workdir;

const MAIN: &str = r#"
terraform {
  required_providers {
    gpushare = {
      source = "gpushare/gpushare"
    }
  }
}

variable "image" {
  type    = string
  default = "ami-a"
}

provider "gpushare" {
  cluster   = "tf-refresh"
  state_dir = ".gpushare"
}

resource "gpushare_capacity_provider" "l4" {
  name                 = "l4"
  instance_type        = "g6.xlarge"
  min_size             = 3
  max_size             = 6
  image                = var.image
  max_draining_percent = 34
}

resource "gpushare_task_definition" "embedder" {
  name = "embedder"

  container {
    name   = "server"
    image  = "ghcr.io/example/embedder:1.4"
    cpu    = 1024
    memory = 2048

    gpu {
      mps {
        memory = 6144
      }
    }
  }
}

resource "gpushare_service" "embedder" {
  name              = "embedder"
  task_definition   = gpushare_task_definition.embedder.name
  capacity_provider = gpushare_capacity_provider.l4.name
  desired_count     = 3
  distinct_host     = true
}
"#;

fn store(w: &Workdir) -> StoreState {
    let store = FileStore::open(w.path().join(".gpushare")).unwrap();
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(store.load())
        .unwrap()
}

fn outdated(st: &StoreState) -> usize {
    let pool: gpushare_core::model::CapacityProvider = serde_json::from_value(
        st.resources[&"capacity_provider.l4".parse().unwrap()]
            .attrs
            .clone(),
    )
    .unwrap();
    st.hosts
        .values()
        .filter(|h| !outdated_settings(h, &pool).is_empty())
        .count()
}

/// The pool's planned actions and the plan's text, for `-var image=IMAGE`.
fn plan(w: &Workdir, image: &str) -> (Vec<String>, String) {
    let var = format!("image={image}");
    let out = w.run(&["plan", "-out=tfplan", "-no-color", "-var", &var]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&w.ok(&["show", "-json", "tfplan"])).unwrap();
    let actions = json["resource_changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|rc| rc["address"] == "gpushare_capacity_provider.l4")
        .map(|rc| {
            rc["change"]["actions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default();
    (actions, text)
}

#[test]
fn a_new_image_updates_the_pool_in_place_and_each_apply_rolls_a_batch() {
    let w = Workdir::new(MAIN);
    w.ok(&["apply", "-auto-approve", "-no-color"]);
    let st = store(&w);
    assert_eq!(st.hosts.len(), 3);
    assert_eq!(outdated(&st), 0);

    // The image change: an update in place, with the hosts to refresh listed.
    let (actions, text) = plan(&w, "ami-b");
    assert_eq!(actions, ["update"], "{text}");
    assert!(!text.contains("must be replaced"), "{text}");
    assert!(text.contains("Hosts to refresh"), "{text}");
    assert!(text.contains("(image ami-a -> ami-b)"), "{text}");
    assert!(
        text.contains("capacity_provider.l4: 1 now, 2 later within max_draining_percent 34"),
        "{text}"
    );
    w.ok(&["apply", "-auto-approve", "-no-color", "tfplan"]);
    assert_eq!(outdated(&store(&w)), 2);

    // Two hosts left to roll: the unchanged pool still plans an update, and each
    // apply rolls one more.
    for left in [1, 0] {
        let (actions, text) = plan(&w, "ami-b");
        assert_eq!(actions, ["update"], "{text}");
        assert!(
            text.contains("Hosts to refresh in capacity_provider.l4"),
            "{text}"
        );
        w.ok(&["apply", "-auto-approve", "-no-color", "tfplan"]);
        let st = store(&w);
        assert_eq!(outdated(&st), left);
        assert_eq!(st.hosts.len(), 3);
        assert_eq!(st.tasks.len(), 3);
    }
    // Done: no diff.
    let out = w.run(&[
        "plan",
        "-detailed-exitcode",
        "-no-color",
        "-var",
        "image=ami-b",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "plan after the rollout is not clean"
    );
}

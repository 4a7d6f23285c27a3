use super::*;
use gpushare_core::model::{CapacityProvider, Host, MpsHealth};

pub(crate) fn pool(instance_type: &str) -> CapacityProvider {
    serde_json::from_value(serde_json::json!({ "instance_type": instance_type, "max_size": 4 }))
        .expect("pool")
}

fn host(id: &str, instance_type: &str) -> Host {
    Host {
        id: id.into(),
        instance_id: None,
        capacity_provider: "l4".into(),
        gpu_instance: None,
        instance_type: instance_type.into(),
        zone: Some("local-1b".into()),
        state: HostState::Pending,
        mps_health: MpsHealth::Unknown,
        health: Default::default(),
        gpus: catalogue_gpus(instance_type),
        cpu_units: 0,
        memory_mib: 0,
        launch_token: format!("token-{id}"),
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

async fn launch(cloud: &LocalCloud, h: &Host) -> Result<CloudHost, CloudError> {
    let p = pool(&h.instance_type);
    cloud
        .launch(&LaunchRequest {
            cluster: "c",
            host: h,
            pool: &p,
            root_device: None,
            join: None,
            store_id: "s1",
        })
        .await
}

#[tokio::test]
async fn launch_is_idempotent_by_token_and_in_the_planned_zone_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cloud = LocalCloud::open(dir.path()).expect("open");
    let a = launch(&cloud, &host("h-a", "g6.12xlarge"))
        .await
        .expect("launch a");
    let again = launch(&cloud, &host("h-a", "g6.12xlarge"))
        .await
        .expect("launch a again");
    assert_eq!(a, again);
    assert!(
        a.instance_id.starts_with("i-local-") && a.instance_id.len() == "i-local-".len() + 17,
        "{}",
        a.instance_id
    );
    let b = launch(&cloud, &host("h-b", "g6.12xlarge"))
        .await
        .expect("launch b");
    let c = launch(&cloud, &host("h-c", "g6.12xlarge"))
        .await
        .expect("launch c");
    let d = launch(&cloud, &host("h-d", "g6.12xlarge"))
        .await
        .expect("launch d");
    let zones: Vec<_> = [&a, &b, &c, &d]
        .iter()
        .map(|h| h.zone.clone().unwrap_or_default())
        .collect();
    assert_eq!(zones, ["local-1b"; 4], "each where its plan put it");
    // A host the plan gave no zone is refused: the cloud picks none.
    let mut nowhere = host("h-z", "g6.12xlarge");
    nowhere.zone = None;
    let e = launch(&cloud, &nowhere).await.expect_err("no zone");
    assert!(
        matches!(&e, CloudError::InvalidRequest { message, .. } if message.contains("names no zone")),
        "{e:?}"
    );
    let mut pinned = host("h-e", "g6.12xlarge");
    pinned.zone = Some("local-1c".into());
    assert_eq!(
        launch(&cloud, &pinned)
            .await
            .expect("pinned")
            .zone
            .as_deref(),
        Some("local-1c")
    );
    assert_eq!(cloud.instances().expect("instances").len(), 5);
    assert_eq!(cloud.list_hosts("c").await.expect("list").len(), 5);
    assert!(cloud.list_hosts("other").await.expect("list").is_empty());
    // The fleet survives reopening (it lives in the file).
    let reopened = LocalCloud::open(dir.path()).expect("reopen");
    assert_eq!(reopened.list_hosts("c").await.expect("list")[1], b);
}

#[tokio::test]
async fn unknown_instance_type_is_refused_with_close_matches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cloud = LocalCloud::open(dir.path()).expect("open");
    let e = launch(&cloud, &host("h-a", "g6.13xlarge"))
        .await
        .expect_err("unknown type");
    assert!(e.to_string().contains("g6.12xlarge"), "{e}");
    assert!(cloud.instances().expect("instances").is_empty());
}

#[tokio::test]
async fn terminate_is_idempotent_and_keeps_other_clusters_safe() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cloud = LocalCloud::open(dir.path()).expect("open");
    let a = launch(&cloud, &host("h-a", "g5.xlarge"))
        .await
        .expect("launch");
    assert!(cloud
        .terminate("other", "s1", &a.instance_id)
        .await
        .is_err());
    let e = cloud
        .terminate("c", "s2", &a.instance_id)
        .await
        .expect_err("another store's instance");
    assert!(
        matches!(&e, CloudError::ForeignInstance { owner, .. } if owner == "s1"),
        "{e:?}"
    );
    assert_eq!(
        cloud.list_hosts("c").await.expect("list")[0].state,
        HostState::Running
    );
    cloud
        .terminate("c", "s1", &a.instance_id)
        .await
        .expect("terminate");
    cloud
        .terminate("c", "s1", &a.instance_id)
        .await
        .expect("terminate again");
    cloud
        .terminate("c", "s1", "i-local-nothere")
        .await
        .expect("unknown is already gone");
    assert_eq!(
        cloud.list_hosts("c").await.expect("list")[0].state,
        HostState::Terminated
    );
}

/// Regression (issue 15): another store never adopts this store's instance, and
/// an untagged instance (launched before store identity) is claimed once.
#[tokio::test]
async fn launch_never_adopts_another_stores_instance_and_claim_tags_untagged_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cloud = LocalCloud::open(dir.path()).expect("open");
    let h = host("h-a", "g5.xlarge");
    let mine = launch(&cloud, &h).await.expect("launch");
    assert_eq!(mine.store_id.as_deref(), Some("s1"));
    let p = pool("g5.xlarge");
    let theirs = LaunchRequest {
        cluster: "c",
        host: &h,
        pool: &p,
        root_device: None,
        join: None,
        store_id: "s2",
    };
    let e = cloud.launch(&theirs).await.expect_err("not adopted");
    assert!(
        matches!(
            &e,
            CloudError::ForeignInstance {
                action: "adopt",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(cloud.claim("c", "s2", &mine.instance_id).await.is_err());
    assert_eq!(cloud.instances().expect("instances").len(), 1);

    // Launched before store identity: no store id; claimed by its store, once.
    let old = LaunchRequest {
        store_id: "",
        ..theirs.clone()
    };
    let h_old = host("h-old", "g5.xlarge");
    let untagged = cloud
        .launch(&LaunchRequest {
            host: &h_old,
            ..old
        })
        .await
        .expect("launch");
    assert_eq!(untagged.store_id, None);
    cloud
        .claim("c", "s1", &untagged.instance_id)
        .await
        .expect("claim");
    cloud
        .claim("c", "s1", &untagged.instance_id)
        .await
        .expect("claim again");
    assert!(cloud.claim("c", "s2", &untagged.instance_id).await.is_err());
    let listed = cloud.list_hosts("c").await.expect("list");
    assert!(listed.iter().all(|h| h.store_id.as_deref() == Some("s1")));
}

#[tokio::test]
async fn corrupt_fleet_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cloud = LocalCloud::open(dir.path()).expect("open");
    std::fs::write(cloud.fleet_path(), b"{\"instances\": 3}").expect("write");
    let e = cloud.list_hosts("c").await.expect_err("corrupt");
    assert!(e.to_string().contains("local-fleet.json"), "{e}");
    assert!(launch(&cloud, &host("h-a", "g5.xlarge")).await.is_err());
}

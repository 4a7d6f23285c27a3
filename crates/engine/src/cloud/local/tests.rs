use super::*;
use gpushare_core::model::{CapacityProvider, Host};

pub(crate) fn pool(instance_type: &str) -> CapacityProvider {
    serde_json::from_value(serde_json::json!({ "instance_type": instance_type, "max_size": 4 }))
        .expect("pool")
}

fn host(id: &str, instance_type: &str) -> Host {
    gpushare_testkit::model::host(id)
        .pool("l4")
        .instance_type(instance_type)
        .zone("local-1b")
        .build()
}

/// The request to launch `host` in cluster `c` for store `s1`.
fn request<'a>(host: &'a Host, pool: &'a CapacityProvider) -> LaunchRequest<'a> {
    LaunchRequest {
        cluster: "c",
        host,
        pool,
        root_device: None,
        join: None,
        store_id: "s1",
    }
}

async fn launch(cloud: &LocalCloud, h: &Host) -> Result<CloudHost, CloudError> {
    let p = pool(&h.instance_type);
    cloud.launch(&request(h, &p)).await
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

/// A wave launches in order up to and including the first failure, and adopts what
/// an earlier launch left by its token.
#[tokio::test]
async fn a_wave_launches_in_order_and_stops_at_the_first_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cloud = LocalCloud::open(dir.path()).expect("open");
    let first = launch(&cloud, &host("h-a", "g6.12xlarge"))
        .await
        .expect("launch a");
    cloud.set_zone_full("local-1c", true).expect("full zone");
    let mut hosts: Vec<Host> = ["h-a", "h-b", "h-c", "h-d", "h-e"]
        .iter()
        .map(|id| host(id, "g6.12xlarge"))
        .collect();
    hosts[3].zone = Some("local-1c".into());
    let p = pool("g6.12xlarge");
    let reqs: Vec<LaunchRequest<'_>> = hosts.iter().map(|h| request(h, &p)).collect();
    let got = cloud.launch_many(&reqs).await;
    assert_eq!(got.len(), 4, "h-e is not tried after h-d fails: {got:?}");
    assert_eq!(got[0].as_ref().expect("h-a adopted"), &first);
    let ids: Vec<String> = got[..3]
        .iter()
        .map(|r| r.as_ref().expect("launched").instance_id.clone())
        .collect();
    assert_eq!(
        ids[1..],
        [instance_id("c", "token-h-b"), instance_id("c", "token-h-c")]
    );
    assert!(
        matches!(&got[3], Err(CloudError::InsufficientCapacity { place: Some(p), .. }) if p.contains("local-1c")),
        "{:?}",
        got[3]
    );
    let fleet: Vec<String> = cloud
        .instances()
        .expect("instances")
        .into_iter()
        .map(|i| i.host_id)
        .collect();
    assert_eq!(fleet, ["h-a", "h-b", "h-c"]);
    // An invalid request ends the wave after what came before it.
    let mut nowhere = host("h-f", "g6.12xlarge");
    nowhere.zone = None;
    let g = host("h-g", "g6.12xlarge");
    let reqs: Vec<LaunchRequest<'_>> = [&g, &nowhere].into_iter().map(|h| request(h, &p)).collect();
    let got = cloud.launch_many(&reqs).await;
    assert!(got[0].is_ok(), "{got:?}");
    assert!(
        matches!(&got[1], Err(CloudError::InvalidRequest { host_id, .. }) if host_id == "h-f"),
        "{got:?}"
    );
    assert_eq!(cloud.instances().expect("instances").len(), 4);
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

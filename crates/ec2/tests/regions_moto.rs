//! Issue 29 against a real moto_server (one per test, on 127.0.0.1): the default image
//! per partition, the Spot prices EC2 gives (moto serves DescribeSpotPriceHistory,
//! at $0.00001 an hour for every type and zone it offers), and the fallback to the
//! built-in table where no Price List API answers. Moto serves no Price List API
//! (it has no `pricing` service): pointed at moto, GetProducts fails, which is the
//! fallback tested here; the parsing of GetProducts answers is tested on hand-written
//! answers in `src/pricing/tests.rs`.

use gpushare_testkit_engine::ec2 as support;

use gpushare_core::catalog::{PriceBook, PriceSource};
use gpushare_core::facts::CloudFacts;
use gpushare_core::model::CapacityProvider;
use gpushare_ec2::pricing::{record_name, CachedPrices};
use gpushare_ec2::{Ec2Cloud, Ec2Options};
use gpushare_engine::cloud::{Cloud, CloudError};
use gpushare_engine::store::{FileStore, Store};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use support::Moto;

async fn cloud(moto: &Moto, region: &str, pricing_endpoint: Option<String>) -> Ec2Cloud {
    support::test_env();
    Ec2Cloud::connect(Ec2Options {
        region: Some(region.into()),
        endpoint: Some(moto.endpoint()),
        pricing_endpoint,
        max_attempts: 1,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        ..Ec2Options::default()
    })
    .await
    .expect("connect")
}

/// One pool `l4` of g6.xlarge in the default VPC, without an image unless `extra` sets one.
fn pools(extra: serde_json::Value) -> BTreeMap<String, CapacityProvider> {
    let base = serde_json::json!({
        "instance_type": "g6.xlarge",
        "max_size": 4,
        "agent": {
            "url": "https://downloads.example.com/gpushare/0.1.0/gpushare-x86_64-linux",
            "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
        }
    });
    BTreeMap::from([("l4".to_string(), support::pool_from_json(base, extra))])
}

fn book(facts: &CloudFacts) -> &PriceBook {
    facts
        .prices
        .as_ref()
        .expect("the ec2 cloud always gathers a price book")
}

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[tokio::test]
async fn the_default_image_is_the_newest_deep_learning_base_ami_owned_by_amazon() {
    // moto serves the images of this file, as owned by `amazon`.
    let amis = fixture("dlami_images.json");
    let moto = Moto::start_with_env(&[("MOTO_AMIS_PATH", &amis)]);
    let c = cloud(&moto, "us-east-1", None).await;
    let facts = c
        .gather(&pools(serde_json::json!({})))
        .await
        .expect("gather");
    // The newest x86_64 one (a newer arm64 one and a newer Ubuntu image are not it).
    assert_eq!(facts.pools["l4"].image_id, "ami-0d1a0000000000002");
}

#[tokio::test]
async fn a_pool_without_image_where_no_default_is_published_fails_naming_the_attribute() {
    let moto = Moto::start();
    let c = cloud(&moto, "us-gov-west-1", None).await;
    match c.gather(&pools(serde_json::json!({}))).await {
        Err(CloudError::InvalidPool { pool, message }) => {
            assert_eq!(pool, "l4");
            for w in [
                "sets no image",
                "Deep Learning Base",
                "us-gov-west-1",
                "partition aws-us-gov",
                "`image` attribute",
            ] {
                assert!(message.contains(w), "{message:?} should contain {w:?}");
            }
        }
        other => panic!("expected InvalidPool, got {other:?}"),
    }
}

#[tokio::test]
async fn a_spot_pool_gets_ec2s_current_spot_price_and_the_tables_on_demand_prices() {
    let moto = Moto::start();
    let c = cloud(&moto, "us-east-1", None).await;
    let mut spot = pools_with_moto_image(&c).await;
    spot.get_mut("l4").expect("l4").market = gpushare_core::model::Market::Spot;
    let facts = c.gather(&spot).await.expect("gather");
    let b = book(&facts);
    assert_eq!(b.source, PriceSource::Table);
    assert_eq!(b.fleet_region.as_deref(), Some("us-east-1"));
    let zones = b.spot.get("g6.xlarge").expect("Spot prices for g6.xlarge");
    assert!(!zones.is_empty());
    assert!(
        zones.keys().all(|z| z.starts_with("us-east-1")),
        "{zones:?}"
    );
    assert_eq!(b.spot("g6.xlarge", None), Some(0.00001));
    let note = b.note.as_deref().unwrap_or_default();
    assert!(note.contains("EC2 endpoint is overridden"), "{note}");
    assert!(b
        .label()
        .starts_with("prices: us-east-1 table, no regional prices, as of "));

    // An On-Demand pool asks no Spot price.
    let mut od = spot.clone();
    od.get_mut("l4").expect("l4").market = Default::default();
    assert!(book(&c.gather(&od).await.expect("gather")).spot.is_empty());
}

/// A pool of one of moto's own images, so gathering gets to the prices.
async fn pools_with_moto_image(c: &Ec2Cloud) -> BTreeMap<String, CapacityProvider> {
    let images = c
        .client()
        .describe_images(&gpushare_ec2::api::DescribeImages {
            owners: vec!["amazon".into()],
            ..Default::default()
        })
        .await
        .expect("images");
    let ami = images
        .iter()
        .find_map(|i| i.image_id.clone().filter(|_| i.platform.is_none()))
        .expect("a moto image");
    pools(serde_json::json!({ "image": ami }))
}

#[tokio::test]
async fn moto_serves_no_price_list_api_and_the_table_is_used_with_why() {
    let moto = Moto::start();
    let c = cloud(&moto, "eu-west-1", Some(moto.endpoint())).await;
    let facts = c
        .gather(&pools_with_moto_image(&c).await)
        .await
        .expect("gather");
    let b = book(&facts);
    assert_eq!(b.source, PriceSource::Table);
    assert_eq!(b.fleet_region.as_deref(), Some("eu-west-1"));
    let note = b.note.as_deref().unwrap_or_default();
    assert!(
        note.starts_with(&format!("the AWS Price List API at {}", moto.endpoint()))
            && note.contains("GetProducts for g6.xlarge failed"),
        "{note}"
    );
    assert!(b
        .label()
        .starts_with("prices: us-east-1 table, no regional prices for eu-west-1, as of "));
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[tokio::test]
async fn prices_cached_in_the_store_are_used_for_a_day_then_kept_while_the_api_fails() {
    let moto = Moto::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn Store> = Arc::new(FileStore::open(dir.path()).expect("file store"));
    // The Price List endpoint is moto, which fails every GetProducts.
    let c = cloud(&moto, "eu-west-1", Some(moto.endpoint()))
        .await
        .with_price_cache(store.clone());
    let p = pools_with_moto_image(&c).await;
    let name = record_name("eu-west-1");
    let write = |read_at: u64, version: u64| {
        let store = store.clone();
        let name = name.clone();
        async move {
            let rec = CachedPrices {
                region: "eu-west-1".into(),
                read_at,
                on_demand: BTreeMap::from([("g6.xlarge".to_string(), 0.8816)]),
                missing: Default::default(),
            };
            store
                .put_record(&name, &serde_json::to_string(&rec).expect("json"), version)
                .await
                .expect("record written")
        }
    };

    // Fresh: used as it is (no call could have answered).
    let v = write(now() - 60, 0).await;
    let facts = c.gather(&p).await.expect("gather");
    let b = book(&facts);
    assert_eq!(b.source, PriceSource::PriceList);
    assert_eq!(b.on_demand("g6.xlarge"), Some(0.8816));
    assert!(b
        .label()
        .starts_with("prices: eu-west-1 on-demand from the AWS Price List, read "));

    // Two days old, and the API fails: the old prices, with their date.
    write(1_764_000_000, v).await; // 2025-11-24
    let facts = c.gather(&p).await.expect("gather");
    let b = book(&facts);
    assert_eq!(b.source, PriceSource::PriceList);
    assert_eq!(b.as_of, "2025-11-24");

    // A type the record does not hold: read again, which fails; the old record is
    // still what there is, and it has no price for the new type.
    let mut more = p.clone();
    more.get_mut("l4").expect("l4").instance_types = vec!["g5.xlarge".into()];
    let b = c.gather(&more).await.expect("gather").prices.expect("book");
    assert_eq!(b.on_demand("g5.xlarge"), None);
}

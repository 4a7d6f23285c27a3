//! The Price List answer's parsing, on hand-written GetProducts answers in the
//! documented shape (moto serves no Price List API, so no recorded one is at hand):
//! `get_products.eu-west-1.json` holds one g6.xlarge product with an On-Demand and a
//! (cheaper) Reserved term; `get_products.cn-north-1.json` one quoted in CNY.

use super::*;

const EU: &str = include_str!("get_products.eu-west-1.json");
const CN: &str = include_str!("get_products.cn-north-1.json");

#[test]
fn the_on_demand_term_of_the_asked_type_and_region_is_read() {
    let p = on_demand_price(EU, "eu-west-1", "g6.xlarge").expect("parses");
    assert_eq!(p, Some(0.8816), "the On-Demand term, not the Reserved one");
    assert_eq!(
        on_demand_price(EU, "eu-west-1", "g5.xlarge").expect("parses"),
        None
    );
    assert_eq!(
        on_demand_price(EU, "us-east-1", "g6.xlarge").expect("parses"),
        None
    );
}

#[test]
fn a_price_in_another_currency_is_refused() {
    match on_demand_price(CN, "cn-north-1", "g5.xlarge") {
        Err(PriceListError::Currency { currency, .. }) => assert_eq!(currency, "CNY"),
        other => panic!("expected a currency error, got {other:?}"),
    }
}

#[test]
fn answers_that_are_not_price_lists_are_decode_errors() {
    for bad in ["", "{}", r#"{"PriceList": ["{not json"]}"#] {
        assert!(
            matches!(
                on_demand_price(bad, "eu-west-1", "g6.xlarge"),
                Err(PriceListError::Decode { .. })
            ),
            "{bad:?}"
        );
    }
    let not_a_number = EU.replace("0.8816000000", "n/a");
    assert!(matches!(
        on_demand_price(&not_a_number, "eu-west-1", "g6.xlarge"),
        Err(PriceListError::Decode { .. })
    ));
}

#[test]
fn the_request_filters_one_linux_shared_product() {
    let body = get_products_body("eu-west-1", "g6.xlarge");
    assert_eq!(body["ServiceCode"], "AmazonEC2");
    let filters: BTreeMap<String, String> = body["Filters"]
        .as_array()
        .expect("filters")
        .iter()
        .map(|f| {
            assert_eq!(f["Type"], "TERM_MATCH");
            (
                f["Field"].as_str().unwrap_or_default().to_string(),
                f["Value"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(filters["instanceType"], "g6.xlarge");
    assert_eq!(filters["regionCode"], "eu-west-1");
    assert_eq!(filters["operatingSystem"], "Linux");
    assert_eq!(filters["tenancy"], "Shared");
    assert_eq!(filters["capacitystatus"], "Used");
}

#[test]
fn endpoints_per_partition() {
    assert_eq!(
        endpoint_of(Partition::Aws),
        Some(("https://api.pricing.us-east-1.amazonaws.com", "us-east-1"))
    );
    assert_eq!(
        endpoint_of(Partition::AwsCn).map(|e| e.1),
        Some("cn-northwest-1")
    );
    assert_eq!(endpoint_of(Partition::AwsUsGov), None);
}

#[test]
fn the_newest_spot_price_of_each_zone() {
    let sp = |t: &str, z: &str, p: &str, at: &str| api::SpotPrice {
        instance_type: Some(t.into()),
        availability_zone: Some(z.into()),
        product_description: Some("Linux/UNIX".into()),
        spot_price: Some(p.into()),
        timestamp: Some(at.into()),
    };
    let got = current_spot_prices(&[
        sp(
            "g6.xlarge",
            "eu-west-1a",
            "0.30",
            "2026-12-01T10:00:00.000Z",
        ),
        sp(
            "g6.xlarge",
            "eu-west-1a",
            "0.32",
            "2026-12-01T11:00:00.000Z",
        ),
        sp(
            "g6.xlarge",
            "eu-west-1b",
            "0.35",
            "2026-12-01T09:00:00.000Z",
        ),
        sp("g6.xlarge", "eu-west-1c", "n/a", "2026-12-01T09:00:00.000Z"),
    ]);
    assert_eq!(got["g6.xlarge"]["eu-west-1a"], 0.32);
    assert_eq!(got["g6.xlarge"]["eu-west-1b"], 0.35);
    assert!(!got["g6.xlarge"].contains_key("eu-west-1c"));
}

#[test]
fn a_cached_record_covers_the_types_it_holds_for_a_day() {
    let c = CachedPrices {
        region: "eu-west-1".into(),
        read_at: 1_000,
        on_demand: [("g6.xlarge".to_string(), 0.8816)].into(),
        missing: ["g6.99xlarge".to_string()].into(),
    };
    let types: BTreeSet<String> = ["g6.xlarge".to_string(), "g6.99xlarge".to_string()].into();
    assert!(c.covers(&types, 1_000 + CACHE_SECONDS - 1));
    assert!(
        !c.covers(&types, 1_000 + CACHE_SECONDS),
        "a day old: read again"
    );
    let more: BTreeSet<String> = ["g5.xlarge".to_string()].into();
    assert!(
        !c.covers(&more, 1_001),
        "a type not asked before: read again"
    );
}

#[test]
fn json_errors_carry_their_code() {
    let e = api::transport::json_error(
        400,
        r#"{"__type":"com.amazonaws.pricing#AccessDeniedException","Message":"not allowed"}"#,
        Some("req-1"),
    );
    assert_eq!(e.code(), Some("AccessDeniedException"));
    assert_eq!(e.message(), Some("not allowed"));
    assert!(matches!(
        api::transport::json_error(502, "<html>", None),
        ApiError::Http { status: 502, .. }
    ));
}

#[test]
fn price_list_requests_are_signed_for_the_pricing_service() {
    let creds = api::Credentials::new("AKIDEXAMPLE", "secret", None, None, "test");
    let endpoint: http::Uri = "https://api.pricing.us-east-1.amazonaws.com"
        .parse()
        .expect("uri");
    let r = api::sign::signed_request_as(
        PROTOCOL,
        "GetProducts",
        &endpoint,
        "us-east-1",
        &creds,
        "{}".into(),
        std::time::SystemTime::now(),
    )
    .expect("signed");
    let h = |k: &str| {
        r.headers()
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(h("x-amz-target"), "AWSPriceListService.GetProducts");
    assert_eq!(h("content-type"), "application/x-amz-json-1.1");
    assert!(
        h("authorization").contains("/us-east-1/pricing/aws4_request"),
        "{}",
        h("authorization")
    );
}

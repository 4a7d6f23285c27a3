//! The plan's cost figures and cost line from the prices the cloud gathered
//! (`CloudFacts::prices`): a regional book, EC2's current Spot prices, and the
//! built-in table for a fleet in another region.
//! Regenerate the goldens with `EXPECTORATE=overwrite cargo test -p gpushare-core --test plan_prices`.

use gpushare_core::catalog::{PriceBook, PriceSource};
use gpushare_core::model::*;
use gpushare_core::plan::Options;
use gpushare_core::render;
use gpushare_testkit::plan::*;

/// The quickstart (pools `l4` of g6.12xlarge and `a10g` of g5.xlarge) with `l4` on
/// Spot capped at `max_price`.
fn quickstart_spot(max_price: Option<&str>) -> Desired {
    let mut d = quickstart(6);
    let l4 = d
        .capacity_providers
        .get_mut("l4")
        .expect("quickstart has l4");
    l4.market = Market::Spot;
    l4.max_price = max_price.map(str::to_string);
    d
}

/// A book as the EC2 backend gathers it in eu-west-1: made-up regional figures
/// (neither is the table's), and a Spot price for g6.12xlarge in two zones.
fn eu_book() -> PriceBook {
    let mut b = PriceBook {
        region: "eu-west-1".into(),
        source: PriceSource::PriceList,
        as_of: "2026-12-01".into(),
        fleet_region: Some("eu-west-1".into()),
        ..PriceBook::table()
    };
    b.on_demand.insert("g6.12xlarge".into(), 5.0);
    b.on_demand.insert("g5.xlarge".into(), 1.25);
    b.spot.insert(
        "g6.12xlarge".into(),
        [
            ("eu-west-1a".to_string(), 1.5),
            ("eu-west-1b".to_string(), 1.75),
        ]
        .into_iter()
        .collect(),
    );
    b
}

fn with_prices(book: PriceBook) -> Live {
    let mut live = empty_live();
    live.facts.prices = Some(book);
    live
}

#[test]
fn a_regional_book_prices_on_demand_and_spot_hosts() {
    let live = with_prices(eu_book());
    let p = plan_ok(&quickstart_spot(Some("2.5")), &live, &Options::default());
    let (mut l4, mut a10g) = (0, 0);
    for l in &p.launches {
        match l.host.capacity_provider.as_str() {
            "l4" => l4 += 1,
            _ => a10g += 1,
        }
    }
    assert!(l4 > 0 && a10g > 0, "{:?}", p.launches);
    // No zone fixed without subnet facts: the highest current Spot price, under max_price.
    let want = 1.75 * f64::from(l4) + 1.25 * f64::from(a10g);
    assert!((p.cost.after_per_hour - want).abs() < 1e-9, "{:?}", p.cost);
    assert_eq!(p.cost.spot_hosts_after, 0, "Spot priced, not bounded");
    assert_eq!(p.cost.spot_priced_hosts, l4);
    let line = render::cost_line(&p);
    assert!(
        line.starts_with(
            "Cost per hour (prices: eu-west-1 on-demand from the AWS Price List, read 2026-12-01; Spot at EC2's current price): now $0.00, after $"
        ),
        "{line}"
    );
    assert!(!line.contains("at most"), "{line}");
    expectorate::assert_contents("tests/golden/prices_regional.txt", &(line + "\n"));
}

#[test]
fn a_spot_price_above_max_price_counts_at_max_price() {
    let live = with_prices(eu_book());
    let p = plan_ok(&quickstart_spot(Some("1.0")), &live, &Options::default());
    let l4 = p
        .launches
        .iter()
        .filter(|l| l.host.capacity_provider == "l4")
        .count() as f64;
    let a10g = p.launches.len() as f64 - l4;
    let want = 1.0 * l4 + 1.25 * a10g;
    assert!((p.cost.after_per_hour - want).abs() < 1e-9, "{:?}", p.cost);
}

#[test]
fn a_fleet_outside_the_tables_region_says_its_prices_are_not_regional() {
    let book = PriceBook::table_for(
        "us-gov-west-1",
        Some("the AWS Price List API refused the call (AccessDeniedException)".into()),
    );
    let live = with_prices(book);
    let p = plan_ok(&quickstart_spot(None), &live, &Options::default());
    let table = plan_ok(&quickstart_spot(None), &empty_live(), &Options::default());
    assert_eq!(p.cost.after_per_hour, table.cost.after_per_hour);
    assert!(p.cost.spot_hosts_after > 0);
    let text = render::cost_text(&p);
    assert!(
        text.contains("(prices: us-east-1 table, no regional prices for us-gov-west-1, as of "),
        "{text}"
    );
    assert!(text.contains("Spot prices are not known"), "{text}");
    assert!(
        text.contains("\nPrices: no regional prices for us-gov-west-1 (us-east-1 table used): the AWS Price List API refused"),
        "{text}"
    );
    // The local fleet gathers no book: the line as before.
    assert!(
        render::cost_line(&table).starts_with("Cost per hour (us-east-1 on-demand, prices as of ")
    );
    let json = render::plan_json(&p);
    assert_eq!(json["prices"]["source"], "table");
    assert_eq!(json["cost"]["prices"]["fleet_region"], "us-gov-west-1");
}

#[test]
fn a_regional_book_without_a_type_leaves_its_hosts_unpriced() {
    let mut book = eu_book();
    book.on_demand.remove("g5.xlarge");
    let p = plan_ok(&quickstart(2), &with_prices(book), &Options::default());
    let a10g = p
        .launches
        .iter()
        .filter(|l| l.host.capacity_provider == "a10g")
        .count() as u32;
    assert!(a10g > 0);
    assert_eq!(p.cost.unpriced_hosts, a10g);
    assert!(render::cost_line(&p).contains(&format!("{a10g} host(s) of unknown price left out")));
}

//! Where the planner's prices come from: a [`PriceBook`] per plan.
//!
//! The built-in table ([`PriceBook::table`]) holds one region's On-Demand prices
//! ([`PRICE_REGION`](super::PRICE_REGION), as of [`PRICES_AS_OF`](super::PRICES_AS_OF)).
//! A cloud that can read its region's prices (EC2: the AWS Price List API for
//! On-Demand, DescribeSpotPriceHistory for Spot) gathers a regional book beside its
//! other facts; the plan's cost figures and its cost line use the book and name its
//! source and region. A fleet whose cloud gathers no book (the local fleet, an old
//! saved plan) is priced from the table, as before.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where a book's On-Demand prices come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PriceSource {
    /// The built-in catalogue's table (us-east-1, On-Demand, Linux).
    Table,
    /// The AWS Price List API (GetProducts, service code AmazonEC2), for the region.
    PriceList,
}

/// The prices one plan is costed with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PriceBook {
    /// The region the On-Demand prices are for.
    pub region: String,
    pub source: PriceSource,
    /// The date (`YYYY-MM-DD`) the prices were recorded or read.
    pub as_of: String,
    /// The fleet's region, when the cloud has one (EC2); `None`: the local fleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet_region: Option<String>,
    /// On-Demand USD per hour by instance type. The table's book keeps this empty
    /// and reads the catalogue.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub on_demand: BTreeMap<String, f64>,
    /// EC2's current Spot price, USD per hour, by instance type then zone.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub spot: BTreeMap<String, BTreeMap<String, f64>>,
    /// Why the fleet's region has no regional On-Demand prices here (the Price List
    /// API refused or is out of reach), when the cloud tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Default for PriceBook {
    fn default() -> Self {
        PriceBook::table()
    }
}

impl PriceBook {
    /// The built-in table: the catalogue's prices, for [`super::PRICE_REGION`].
    pub fn table() -> PriceBook {
        PriceBook {
            region: super::PRICE_REGION.to_string(),
            source: PriceSource::Table,
            as_of: super::PRICES_AS_OF.to_string(),
            fleet_region: None,
            on_demand: BTreeMap::new(),
            spot: BTreeMap::new(),
            note: None,
        }
    }

    /// The table, for a fleet in `fleet_region` (its cost line then says the prices
    /// are not regional), with why no regional prices were read.
    pub fn table_for(fleet_region: &str, note: Option<String>) -> PriceBook {
        PriceBook {
            fleet_region: Some(fleet_region.to_string()),
            note,
            ..PriceBook::table()
        }
    }

    /// The On-Demand price of `instance_type`: the book's own, else for the table
    /// the catalogue's. A regional book without the type has none (never another
    /// region's figure passed off as this one's).
    pub fn on_demand(&self, instance_type: &str) -> Option<f64> {
        match self.source {
            PriceSource::PriceList => self.on_demand.get(instance_type).copied(),
            PriceSource::Table => self
                .on_demand
                .get(instance_type)
                .copied()
                .or_else(|| super::lookup(instance_type).and_then(|t| t.price_per_hour)),
        }
    }

    /// EC2's current Spot price of `instance_type` in `zone`; without a zone (or a
    /// price for it), the highest over the type's zones (a bound the host's own zone
    /// does not pass). `None`: no Spot price known for the type.
    pub fn spot(&self, instance_type: &str, zone: Option<&str>) -> Option<f64> {
        let zones = self.spot.get(instance_type)?;
        zone.and_then(|z| zones.get(z).copied())
            .or_else(|| zones.values().copied().reduce(f64::max))
    }

    /// Whether the On-Demand prices are the fleet's region's own.
    pub fn is_regional(&self) -> bool {
        match &self.fleet_region {
            Some(fleet) => fleet == &self.region,
            None => true,
        }
    }

    /// How the cost line names the prices: `us-east-1 on-demand, prices as of D`
    /// (the table, no fleet region: the local fleet), `prices: us-east-1 table, no
    /// regional prices[ for R], as of D`, or `prices: R on-demand from the AWS
    /// Price List, read D`.
    pub fn label(&self) -> String {
        match (self.source, &self.fleet_region) {
            (PriceSource::Table, None) => {
                format!("{} on-demand, prices as of {}", self.region, self.as_of)
            }
            (PriceSource::Table, Some(fleet)) => {
                let r#for = if fleet == &self.region {
                    String::new()
                } else {
                    format!(" for {fleet}")
                };
                format!(
                    "prices: {} table, no regional prices{for}, as of {}",
                    self.region, self.as_of
                )
            }
            (PriceSource::PriceList, _) => format!(
                "prices: {} on-demand from the AWS Price List, read {}",
                self.region, self.as_of
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_reads_the_catalogue_and_a_regional_book_only_itself() {
        let t = PriceBook::table();
        assert_eq!(t.on_demand("g6.xlarge"), Some(0.8048));
        let mut r = PriceBook {
            region: "eu-west-1".into(),
            source: PriceSource::PriceList,
            as_of: "2026-12-01".into(),
            fleet_region: Some("eu-west-1".into()),
            ..PriceBook::table()
        };
        r.on_demand.insert("g6.xlarge".into(), 0.8816);
        assert_eq!(r.on_demand("g6.xlarge"), Some(0.8816));
        assert_eq!(r.on_demand("g5.xlarge"), None);
        assert!(r.is_regional());
        assert!(!PriceBook::table_for("eu-west-1", None).is_regional());
    }

    #[test]
    fn spot_prices_by_zone_else_the_highest() {
        let mut b = PriceBook::table();
        b.spot.insert(
            "g6.xlarge".into(),
            [
                ("eu-west-1a".to_string(), 0.31),
                ("eu-west-1b".to_string(), 0.35),
            ]
            .into_iter()
            .collect(),
        );
        assert_eq!(b.spot("g6.xlarge", Some("eu-west-1a")), Some(0.31));
        assert_eq!(b.spot("g6.xlarge", Some("eu-west-1c")), Some(0.35));
        assert_eq!(b.spot("g6.xlarge", None), Some(0.35));
        assert_eq!(b.spot("g5.xlarge", None), None);
    }

    #[test]
    fn labels_name_the_source_and_region() {
        assert_eq!(
            PriceBook::table().label(),
            format!(
                "us-east-1 on-demand, prices as of {}",
                super::super::PRICES_AS_OF
            )
        );
        assert!(PriceBook::table_for("us-gov-west-1", None)
            .label()
            .starts_with("prices: us-east-1 table, no regional prices for us-gov-west-1, as of "));
        assert!(PriceBook::table_for("us-east-1", None)
            .label()
            .starts_with("prices: us-east-1 table, no regional prices, as of "));
        let r = PriceBook {
            region: "eu-west-1".into(),
            source: PriceSource::PriceList,
            as_of: "2026-12-01".into(),
            ..PriceBook::table()
        };
        assert_eq!(
            r.label(),
            "prices: eu-west-1 on-demand from the AWS Price List, read 2026-12-01"
        );
    }
}

//! The fleet's region's [`PriceBook`], gathered beside the pools' facts: On-Demand
//! prices from the Price List API (cached in the store for a day), else the built-in
//! table with why; Spot pools' current Spot prices from DescribeSpotPriceHistory.

use super::Ec2Cloud;
use crate::api;
use crate::options::Ec2Options;
use crate::pricing::{self, CachedPrices, PriceListClient};
use gpushare_core::catalog::{PriceBook, PriceSource};
use gpushare_core::model::{CapacityProvider, Market};
use gpushare_engine::store::{Store, StoreError};
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::sync::Arc;

/// Where the backend reads prices: the Price List client (or why there is none) and
/// the store that caches what it read.
pub(crate) struct Pricing {
    pub(crate) price_list: Result<PriceListClient, String>,
    pub(crate) cache: Option<Arc<dyn Store>>,
}

impl Default for Pricing {
    fn default() -> Self {
        Pricing {
            price_list: Err("no Price List client was set up".into()),
            cache: None,
        }
    }
}

impl Pricing {
    /// The Price List client for a fleet in `region`: at the configured endpoint
    /// (`pricing_endpoint`, else `AWS_ENDPOINT_URL_PRICING`), else the partition's
    /// own, except where the EC2 endpoint is overridden (an emulator, a private
    /// endpoint: the real Price List is not dialled behind its back) or the
    /// partition has none (GovCloud).
    pub(crate) fn connect(
        region: &str,
        opts: &Ec2Options,
        ec2_overridden: bool,
        credentials: api::SharedCredentialsProvider,
        retry: crate::retry::RetryPolicy,
    ) -> Pricing {
        let partition = crate::partition::Partition::of_region(region);
        let own = pricing::endpoint_of(partition);
        let configured = opts
            .pricing_endpoint
            .clone()
            .or_else(|| std::env::var("AWS_ENDPOINT_URL_PRICING").ok())
            .filter(|e| !e.is_empty());
        let signing_region = own.map_or("us-east-1", |(_, r)| r);
        let endpoint = match (configured, own) {
            (Some(e), _) => Ok(e),
            (None, _) if ec2_overridden => Err(
                "the EC2 endpoint is overridden and no Price List endpoint is set (AWS_ENDPOINT_URL_PRICING)"
                    .to_string(),
            ),
            (None, Some((e, _))) => Ok(e.to_string()),
            (None, None) => Err(format!(
                "the AWS Price List API has no endpoint in the {partition} partition"
            )),
        };
        let price_list = endpoint.and_then(|e| {
            PriceListClient::new(&e, signing_region, credentials, retry, opts.attempt_timeout)
                .map_err(|err| err.to_string())
        });
        Pricing {
            price_list,
            cache: None,
        }
    }
}

impl Ec2Cloud {
    /// Cache the prices read from the Price List API in `store` (one record per
    /// region, read again when older than a day).
    pub fn with_price_cache(mut self, store: Arc<dyn Store>) -> Self {
        self.pricing.cache = Some(store);
        self
    }

    /// The prices of the fleet's region for `pools`: never an error (a price that
    /// cannot be read falls back to the table, and the book says why).
    pub(super) async fn price_book(&self, pools: &BTreeMap<String, CapacityProvider>) -> PriceBook {
        let region = self.client.region().to_string();
        let types: BTreeSet<String> = pools
            .values()
            .flat_map(|p| std::iter::once(&p.instance_type).chain(&p.instance_types))
            .cloned()
            .collect();
        let mut book = match self.on_demand_prices(&region, &types).await {
            Ok(c) => PriceBook {
                region: region.clone(),
                source: PriceSource::PriceList,
                as_of: gpushare_engine::fsutil::rfc3339(c.read_at)
                    .chars()
                    .take(10)
                    .collect(),
                fleet_region: Some(region.clone()),
                on_demand: c.on_demand,
                spot: BTreeMap::new(),
                note: None,
            },
            Err(note) => {
                tracing::info!(%region, %note, "no regional prices: using the built-in table");
                PriceBook::table_for(&region, Some(note))
            }
        };
        let spot_types: Vec<String> = pools
            .values()
            .filter(|p| p.market == Market::Spot)
            .flat_map(|p| std::iter::once(&p.instance_type).chain(&p.instance_types))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if !spot_types.is_empty() {
            let now = gpushare_engine::fsutil::rfc3339(gpushare_core::util::unix_now());
            let out = {
                let _p = self.permit().await;
                self.client
                    .describe_spot_price_history(&spot_types, &now)
                    .await
            };
            match out {
                Ok(history) => book.spot = pricing::current_spot_prices(&history),
                Err(e) => {
                    tracing::warn!(error = %e, "DescribeSpotPriceHistory failed: Spot hosts are counted at their max_price")
                }
            }
        }
        book
    }

    /// The On-Demand prices of `types` in `region`: the store's record when it is
    /// less than a day old and holds them all, else read from the Price List API
    /// and recorded (a record older than a day is still used when the API fails).
    /// `Err`: why there are none, for the cost line's note.
    async fn on_demand_prices(
        &self,
        region: &str,
        types: &BTreeSet<String>,
    ) -> Result<CachedPrices, String> {
        let now = gpushare_core::util::unix_now();
        let name = pricing::record_name(region);
        let cached = match &self.pricing.cache {
            Some(store) => read_cache(&**store, &name).await,
            None => None,
        };
        if let Some((c, _)) = cached.as_ref().filter(|(c, _)| c.covers(types, now)) {
            return Ok(c.clone());
        }
        let client = self.pricing.price_list.as_ref().map_err(Clone::clone)?;
        let mut read = CachedPrices {
            region: region.to_string(),
            read_at: now,
            on_demand: BTreeMap::new(),
            missing: BTreeSet::new(),
        };
        for t in types {
            let price = {
                let _p = self.permit().await;
                client.on_demand(region, t).await
            };
            match price {
                Ok(Some(p)) => {
                    read.on_demand.insert(t.clone(), p);
                }
                Ok(None) => {
                    read.missing.insert(t.clone());
                }
                Err(e) => {
                    let why = error_chain(&e);
                    return match cached {
                        Some((c, _)) => {
                            tracing::warn!(%why, read_at = c.read_at, "Price List call failed: using the prices read before");
                            Ok(c)
                        }
                        None => Err(format!(
                            "the AWS Price List API at {} failed: {why}",
                            client.endpoint()
                        )),
                    };
                }
            }
        }
        if let Some(store) = &self.pricing.cache {
            let version = cached.as_ref().map_or(0, |(_, v)| *v);
            let value = serde_json::to_string(&read).unwrap_or_default();
            match store.put_record(&name, &value, version).await {
                Ok(_) | Err(StoreError::RecordConflict { .. }) => {}
                Err(e) => {
                    tracing::warn!(error = %e, record = %name, "cannot cache the prices read")
                }
            }
        }
        Ok(read)
    }
}

/// The cached prices in record `name` and the record's version (`None`: no record,
/// or one that cannot be read, which is then read again from the API).
async fn read_cache(store: &dyn Store, name: &str) -> Option<(CachedPrices, u64)> {
    match store.get_record(name).await {
        Ok(Some(r)) => match serde_json::from_str(&r.value) {
            Ok(c) => Some((c, r.version)),
            Err(e) => {
                tracing::warn!(error = %e, record = %name, "cached prices unreadable: reading them again");
                None
            }
        },
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(error = %e, record = %name, "cannot read the cached prices");
            None
        }
    }
}

use gpushare_core::util::error_chain;

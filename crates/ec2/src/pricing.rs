//! Prices for the fleet's region: On-Demand prices from the AWS Price List API
//! (GetProducts, service code `AmazonEC2`), read through a small client of our own
//! (AWS JSON 1.1 over the same SigV4 signing and HTTPS connector as [`crate::api`]),
//! and the answer's parsing. The Price List API answers in us-east-1 and ap-south-1
//! for the commercial partition and in cn-northwest-1 for China; GovCloud has none.
//! The EC2 backend caches what it read in the store ([`CachedPrices`], one record per
//! region, read again when older than a day) and gathers the plan's
//! [`PriceBook`](gpushare_core::catalog::PriceBook) from it (`cloud/prices.rs`).

use crate::api::{self, ApiError, Protocol};
use crate::partition::Partition;
use crate::retry::{self, RetryPolicy};
use backon::Retryable;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How long prices read from the Price List API are used before they are read again.
pub const CACHE_SECONDS: u64 = 86_400;

/// The Price List API's own protocol: AWS JSON 1.1, target `AWSPriceListService`.
pub const PROTOCOL: Protocol = Protocol::Json11 {
    service: "pricing",
    target_prefix: "AWSPriceListService",
};

/// Where the Price List API answers for a partition, and the region its requests are
/// signed for; `None` in GovCloud (no Price List endpoint there).
pub fn endpoint_of(partition: Partition) -> Option<(&'static str, &'static str)> {
    match partition {
        Partition::Aws => Some(("https://api.pricing.us-east-1.amazonaws.com", "us-east-1")),
        Partition::AwsCn => Some((
            "https://api.pricing.cn-northwest-1.amazonaws.com.cn",
            "cn-northwest-1",
        )),
        Partition::AwsUsGov => None,
    }
}

/// The store record the prices of `region` are cached in.
pub fn record_name(region: &str) -> String {
    format!("prices.{region}")
}

/// The On-Demand prices of one region as read from the Price List API, as cached in
/// the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedPrices {
    pub region: String,
    /// Seconds since the Unix epoch when read.
    pub read_at: u64,
    /// USD per hour, Linux, shared tenancy, by instance type.
    pub on_demand: BTreeMap<String, f64>,
    /// Types the Price List has no On-Demand price for in the region (asked, none found).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub missing: BTreeSet<String>,
}

impl CachedPrices {
    /// Whether the record answers for `types` at `now`: read less than a day ago,
    /// and every type asked (priced or known missing).
    pub fn covers(&self, types: &BTreeSet<String>, now: u64) -> bool {
        now < self.read_at.saturating_add(CACHE_SECONDS)
            && types
                .iter()
                .all(|t| self.on_demand.contains_key(t) || self.missing.contains(t))
    }
}

/// Why prices could not be read or understood.
#[derive(Debug, thiserror::Error)]
pub enum PriceListError {
    #[error("GetProducts for {instance_type} failed")]
    Call {
        instance_type: String,
        #[source]
        source: ApiError,
    },
    #[error("cannot read the Price List answer: {detail}")]
    Decode { detail: String },
    #[error("the Price List quotes {instance_type} in {currency}, not USD")]
    Currency {
        instance_type: String,
        currency: String,
    },
}

/// A client of the Price List API.
#[derive(Debug)]
pub struct PriceListClient {
    transport: api::transport::Transport,
    retry: RetryPolicy,
}

impl PriceListClient {
    /// A client of `endpoint`, signing for `signing_region`.
    pub fn new(
        endpoint: &str,
        signing_region: &str,
        credentials: api::SharedCredentialsProvider,
        retry: RetryPolicy,
        attempt_timeout: Duration,
    ) -> Result<PriceListClient, api::BadEndpoint> {
        let uri = api::parse_endpoint(endpoint)?;
        let transport = api::transport::Transport::new(
            uri,
            signing_region.to_string(),
            api::sign::CredentialsCache::new(credentials),
            api::CONNECT_TIMEOUT,
            attempt_timeout,
        )
        .with_protocol(PROTOCOL);
        Ok(PriceListClient { transport, retry })
    }

    pub fn endpoint(&self) -> &http::Uri {
        &self.transport.endpoint
    }

    /// The On-Demand price (USD per hour) of `instance_type` in `region`: one
    /// GetProducts, retried per the policy; `None` when the Price List has none.
    pub async fn on_demand(
        &self,
        region: &str,
        instance_type: &str,
    ) -> Result<Option<f64>, PriceListError> {
        let body = get_products_body(region, instance_type).to_string();
        let transport = &self.transport;
        let answer = (|| transport.send("GetProducts", &body))
            .retry(self.retry.backoff())
            .when(retry::is_retryable)
            .notify(|err, wait| {
                tracing::debug!(error = %err, ?wait, "Price List call failed; trying again");
            })
            .await
            .map_err(|source| PriceListError::Call {
                instance_type: instance_type.to_string(),
                source,
            })?;
        on_demand_price(&answer.body, region, instance_type)
    }
}

/// The GetProducts request for one instance type's Linux, shared-tenancy,
/// no-pre-installed-software On-Demand product in `region`.
pub fn get_products_body(region: &str, instance_type: &str) -> Value {
    let term =
        |field: &str, value: &str| json!({"Type": "TERM_MATCH", "Field": field, "Value": value});
    json!({
        "ServiceCode": "AmazonEC2",
        "FormatVersion": "aws_v1",
        "MaxResults": 10,
        "Filters": [
            term("instanceType", instance_type),
            term("regionCode", region),
            term("operatingSystem", "Linux"),
            term("tenancy", "Shared"),
            term("preInstalledSw", "NA"),
            term("capacitystatus", "Used"),
            term("licenseModel", "No License required"),
        ],
    })
}

/// The hourly On-Demand price of `instance_type` in `region` in a GetProducts answer
/// (`{"PriceList": ["<product JSON>", ...]}`, each product a JSON document in a
/// string): the products of that type and region, their `OnDemand` terms' price
/// dimensions in hours (`unit: "Hrs"`); the lowest non-zero USD price. `None` when no
/// product prices it.
pub fn on_demand_price(
    answer: &str,
    region: &str,
    instance_type: &str,
) -> Result<Option<f64>, PriceListError> {
    let bad = |detail: String| PriceListError::Decode { detail };
    let doc: Value = serde_json::from_str(answer).map_err(|e| bad(e.to_string()))?;
    let list = doc
        .get("PriceList")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no PriceList array".into()))?;
    let mut best: Option<f64> = None;
    for item in list {
        // Products come as JSON documents in strings (aws_v1); take objects as well.
        let product: Value = match item {
            Value::String(s) => serde_json::from_str(s).map_err(|e| bad(e.to_string()))?,
            other => other.clone(),
        };
        let attrs = &product["product"]["attributes"];
        let is = |k: &str, v: &str| attrs.get(k).and_then(Value::as_str) == Some(v);
        if !is("instanceType", instance_type) || !is("regionCode", region) {
            continue;
        }
        let Some(terms) = product["terms"]["OnDemand"].as_object() else {
            continue;
        };
        for term in terms.values() {
            let Some(dims) = term["priceDimensions"].as_object() else {
                continue;
            };
            for dim in dims.values().filter(|d| d["unit"].as_str() == Some("Hrs")) {
                let Some(prices) = dim["pricePerUnit"].as_object() else {
                    continue;
                };
                let Some(usd) = prices.get("USD") else {
                    if let Some(currency) = prices.keys().next() {
                        return Err(PriceListError::Currency {
                            instance_type: instance_type.to_string(),
                            currency: currency.clone(),
                        });
                    }
                    continue;
                };
                let p: f64 = usd
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| bad(format!("price {usd} is not a number")))?;
                if p > 0.0 && best.is_none_or(|b| p < b) {
                    best = Some(p);
                }
            }
        }
    }
    Ok(best)
}

/// The current Spot price per instance type and zone of DescribeSpotPriceHistory's
/// answer: the newest entry of each (type, zone); prices that are not numbers are
/// skipped.
pub fn current_spot_prices(history: &[api::SpotPrice]) -> BTreeMap<String, BTreeMap<String, f64>> {
    let mut newest: BTreeMap<(String, String), (String, f64)> = BTreeMap::new();
    for h in history {
        let (Some(t), Some(z), Some(p)) = (
            h.instance_type.as_ref(),
            h.availability_zone.as_ref(),
            h.spot_price.as_deref().and_then(|p| p.parse::<f64>().ok()),
        ) else {
            continue;
        };
        let at = h.timestamp.clone().unwrap_or_default();
        let e = newest
            .entry((t.clone(), z.clone()))
            .or_insert_with(|| (at.clone(), p));
        if at > e.0 {
            *e = (at, p);
        }
    }
    let mut out: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for ((t, z), (_, p)) in newest {
        out.entry(t).or_default().insert(z, p);
    }
    out
}

#[cfg(test)]
mod tests;

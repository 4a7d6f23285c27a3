//! [`Ec2Cloud`]: the `Cloud` trait over our EC2 Query API client ([`crate::api`]).

use crate::api::{self, DescribeInstances, Filter, Instance, InstanceStateName, Tag};
use crate::error::Ec2Error;
use crate::options::Ec2Options;
use crate::tags;
use crate::user_data::{render_user_data, UserDataInput};
use async_trait::async_trait;
use gpushare_core::catalog::InstanceType;
use gpushare_core::facts::{CloudFacts, InstanceFacts, SubnetFact};
use gpushare_core::model::{CapacityProvider, CloudHost, HostNotice, Settings};
use gpushare_core::util::{backoff_delays, lock};
use gpushare_engine::cloud::{check_ownership, Cloud, CloudError, LaunchRequest, Ownership};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

mod convert;
mod events;
mod facts;
mod launch;
mod prices;
pub(crate) use convert::configured_endpoint_of;
use convert::{api_err, cloud_host, configured_endpoint};
pub use convert::{client_token, host_state};
pub use facts::{merge_instance_type, DEFAULT_IMAGE_NAME};
use facts::{PoolFacts, TypeFacts};

/// An EC2 error with its code, as EC2 returned it.
#[derive(Debug, thiserror::Error)]
#[error("{code}: {message}")]
pub struct AwsError {
    pub code: String,
    pub message: String,
}

/// A host this process launched: a describe of it that finds nothing within the
/// consistency window waits for it to show (a terminate's confirmation) instead of
/// taking it for gone. Listing does not use it: observe's window covers that.
#[derive(Debug, Clone)]
struct Launched {
    at: Instant,
}

#[derive(Default)]
struct Caches {
    types: HashMap<String, TypeFacts>,
    /// Keyed by the pool's JSON form and its launch types, so a changed pool is checked again.
    pools: HashMap<String, PoolFacts>,
    /// Root device name by image id (gathered into the pools' facts).
    roots: HashMap<String, String>,
    launched: HashMap<String, Launched>,
}

/// The `ec2` cloud backend.
pub struct Ec2Cloud {
    client: api::Client,
    permits: Arc<Semaphore>,
    opts: Ec2Options,
    caches: Mutex<Caches>,
    pricing: prices::Pricing,
}

impl std::fmt::Debug for Ec2Cloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ec2Cloud")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

/// Why a launch without a join grant is refused: hosts on EC2 join the controller.
const NO_CONTROLLER: &str = "no controller_address in the gpushare block: hosts on EC2 join the controller's agent API with a token from their user data (docs/agent.md)";

const LIVE_STATES: &[&str] = &["pending", "running", "stopping", "stopped"];

/// The standard AWS configuration as gpushare's clients use it: the region (the
/// options' or the chain's), the credentials provider, and the retry policy (the
/// user's AWS_MAX_ATTEMPTS / AWS_RETRY_MODE, or the profile's, over gpushare's
/// defaults).
pub(crate) struct AwsSetup {
    pub sdk: aws_types::SdkConfig,
    pub region: aws_config::Region,
    pub credentials: api::SharedCredentialsProvider,
    pub retry: crate::retry::RetryPolicy,
}

impl AwsSetup {
    pub(crate) async fn load(opts: &Ec2Options) -> Result<AwsSetup, Ec2Error> {
        let user = crate::retry::UserRetry::from_environment().await?;
        let retry = crate::retry::resolve(&user, opts);
        tracing::debug!(max_attempts = retry.max_attempts, mode = ?retry.mode, from_user = ?user, "AWS retry configuration");
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
        if let Some(r) = &opts.region {
            loader = loader.region(aws_config::Region::new(r.clone()));
        }
        let sdk = loader.load().await;
        let region = sdk.region().cloned().ok_or(Ec2Error::NoRegion)?;
        let credentials = sdk.credentials_provider().ok_or(Ec2Error::NoCredentials)?;
        Ok(AwsSetup {
            sdk,
            region,
            credentials,
            retry,
        })
    }
}

impl Ec2Cloud {
    /// Load the standard AWS configuration (credentials, region, endpoint from the
    /// environment and profile) and build the client.
    pub async fn connect(opts: Ec2Options) -> Result<Self, Ec2Error> {
        if let Some(e) = &opts.endpoint {
            api::parse_endpoint(e)?;
        }
        // The user's AWS_MAX_ATTEMPTS / AWS_RETRY_MODE (or the profile's max_attempts /
        // retry_mode) win; gpushare's defaults fill in what they leave unset.
        let AwsSetup {
            sdk,
            region,
            credentials,
            retry,
        } = AwsSetup::load(&opts).await?;
        let configured = configured_endpoint(&sdk);
        let overridden = opts.endpoint.is_some() || configured.is_some();
        let endpoint = match &opts.endpoint {
            Some(e) => e.clone(),
            None => configured.unwrap_or_else(|| {
                api::default_endpoint(
                    region.as_ref(),
                    sdk.use_fips().unwrap_or(false),
                    sdk.use_dual_stack().unwrap_or(false),
                )
            }),
        };
        tracing::debug!(%endpoint, region = %region, "EC2 endpoint");
        let pricing = prices::Pricing::connect(
            region.as_ref(),
            &opts,
            overridden,
            credentials.clone(),
            retry.clone(),
        );
        let client = api::Client::new(
            &endpoint,
            region.as_ref(),
            credentials,
            retry,
            opts.attempt_timeout,
        )?;
        let mut cloud = Self::from_client(client, opts);
        cloud.pricing = pricing;
        Ok(cloud)
    }

    /// Connect with the settings' region and endpoint.
    pub async fn from_settings(settings: &Settings) -> Result<Self, Ec2Error> {
        Self::connect(Ec2Options::from_settings(settings)).await
    }

    /// Wrap a client built elsewhere (its retry policy is the caller's).
    pub fn from_client(client: api::Client, opts: Ec2Options) -> Self {
        let permits = Arc::new(Semaphore::new(opts.max_concurrency.max(1)));
        Self {
            client,
            permits,
            opts,
            caches: Mutex::new(Caches::default()),
            pricing: prices::Pricing::default(),
        }
    }

    pub fn client(&self) -> &api::Client {
        &self.client
    }

    fn caches(&self) -> std::sync::MutexGuard<'_, Caches> {
        lock(&self.caches)
    }

    async fn permit(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        // The semaphore is never closed; `None` would only mean "unbounded".
        self.permits.acquire().await.ok()
    }

    /// The live (not terminated) instance carrying this launch token, if any.
    async fn find_by_token(
        &self,
        cluster: &str,
        token: &str,
    ) -> Result<Option<Instance>, CloudError> {
        let req = DescribeInstances {
            filters: vec![
                Filter::new(format!("tag:{}", tags::CLUSTER), &[cluster]),
                Filter::new(format!("tag:{}", tags::LAUNCH_TOKEN), &[token]),
                Filter::new("instance-state-name", LIVE_STATES),
            ],
            ..DescribeInstances::default()
        };
        let out = {
            let _p = self.permit().await;
            self.client
                .describe_instances(&req)
                .await
                .map_err(|e| api_err("DescribeInstances", e))?
        };
        Ok(out.into_instances().next())
    }

    fn remember(&self, host: &CloudHost) {
        self.caches()
            .launched
            .insert(host.instance_id.clone(), Launched { at: Instant::now() });
    }

    fn recently_launched(&self, instance_id: &str) -> bool {
        self.caches()
            .launched
            .get(instance_id)
            .is_some_and(|l| l.at.elapsed() < self.opts.consistency_window)
    }

    /// Describe one instance, waiting out NotFound while it is freshly launched.
    async fn describe_one(&self, instance_id: &str) -> Result<Option<Instance>, CloudError> {
        let deadline = Instant::now() + self.opts.confirm_timeout;
        // 200 ms, doubling up to 5 s, until the deadline.
        let mut waits = backoff_delays(Duration::from_millis(200), Duration::from_secs(5));
        let req = DescribeInstances {
            instance_ids: vec![instance_id.to_string()],
            ..DescribeInstances::default()
        };
        loop {
            let out = {
                let _p = self.permit().await;
                self.client.describe_instances(&req).await
            };
            match out {
                Ok(out) => return Ok(out.into_instances().next()),
                Err(e) if e.code().is_some_and(|c| c == "InvalidInstanceID.NotFound") => {
                    if !self.recently_launched(instance_id) || Instant::now() >= deadline {
                        return Ok(None);
                    }
                    tracing::debug!(%instance_id, "instance not visible yet after launch; waiting");
                    tokio::time::sleep(waits.next().unwrap_or(Duration::from_secs(5))).await;
                }
                Err(e) => return Err(api_err("DescribeInstances", e)),
            }
        }
    }
}

#[async_trait]
impl Cloud for Ec2Cloud {
    fn kind(&self) -> &'static str {
        "ec2"
    }

    async fn describe_instance_type(&self, name: &str) -> Result<Option<InstanceType>, CloudError> {
        match self.type_facts(name).await? {
            TypeFacts::Nvidia(t, _) => Ok(Some(t)),
            TypeFacts::NotNvidia(_) | TypeFacts::Unknown => Ok(None),
        }
    }

    async fn list_hosts(&self, cluster: &str) -> Result<Vec<CloudHost>, CloudError> {
        let mut req = DescribeInstances {
            filters: vec![Filter::new(format!("tag:{}", tags::CLUSTER), &[cluster])],
            max_results: self.opts.page_size,
            ..DescribeInstances::default()
        };
        let mut hosts = Vec::new();
        loop {
            let page = {
                let _p = self.permit().await;
                self.client
                    .describe_instances(&req)
                    .await
                    .map_err(|e| api_err("DescribeInstances", e))?
            };
            hosts.extend(page.instances().filter_map(cloud_host));
            match page.next() {
                Some(token) => req.next_token = Some(token.to_string()),
                None => break,
            }
        }
        // A fresh launch the filter does not show yet is not added here: observe keeps
        // a recorded host pending within the settings' consistency window (the one
        // mechanism for EC2's eventual consistency; engine observe::merge_within).
        let window = self.opts.consistency_window;
        self.caches()
            .launched
            .retain(|_, l| l.at.elapsed() < window);
        Ok(hosts)
    }

    /// Per pool: its image (the pool's, or the newest default resolved now and kept
    /// for this process), checked to exist, with its root device; its subnets and
    /// their zones; EC2's figures for its instance type.
    async fn gather(
        &self,
        pools: &BTreeMap<String, CapacityProvider>,
    ) -> Result<CloudFacts, CloudError> {
        let mut out = BTreeMap::new();
        for (name, pool) in pools {
            let types: Vec<String> = std::iter::once(&pool.instance_type)
                .chain(&pool.instance_types)
                .cloned()
                .collect();
            let f = self.pool_facts_of(name, pool, &types).await?;
            let instance = match self.type_facts(&pool.instance_type).await? {
                TypeFacts::Nvidia(t, _) => Some(InstanceFacts {
                    instance_type: pool.instance_type.clone(),
                    gpu_count: t.gpu_count,
                    gpu_memory_mib: t.gpu_memory_mib,
                    vcpus: t.vcpus,
                    memory_mib: t.memory_mib,
                }),
                TypeFacts::NotNvidia(_) | TypeFacts::Unknown => None,
            };
            out.insert(
                name.clone(),
                gpushare_core::facts::PoolFacts {
                    instance,
                    root_device: Some(f.root_device),
                    image_id: f.image,
                    subnets: f
                        .subnets
                        .into_iter()
                        .map(|(id, zone)| SubnetFact { id, zone })
                        .collect(),
                },
            );
        }
        Ok(CloudFacts {
            pools: out,
            prices: Some(self.price_book(pools).await),
        })
    }

    /// DescribeInstanceStatus of `instance_ids`, at most [`events::IDS_PER_CALL`] a call.
    async fn scheduled_events(
        &self,
        instance_ids: &[String],
    ) -> Result<BTreeMap<String, HostNotice>, CloudError> {
        let mut statuses = Vec::new();
        for ids in instance_ids.chunks(events::IDS_PER_CALL) {
            let _p = self.permit().await;
            let page = self
                .client
                .describe_instance_status(ids)
                .await
                .map_err(|e| api_err("DescribeInstanceStatus", e))?;
            statuses.extend(page);
        }
        Ok(events::notices(statuses))
    }

    /// Validate every request (see [`Ec2Cloud::validate`]) before launching any of them.
    async fn preflight(&self, requests: &[LaunchRequest<'_>]) -> Result<(), CloudError> {
        for r in requests {
            self.validate(r).await?;
        }
        Ok(())
    }

    /// A wave side by side: at most `max_concurrency` launches at once (every EC2 call
    /// waits for a permit as well), started in order, none started once one has
    /// failed; the results of all those started, in order (a wave of 2,000 hosts is
    /// not 2,000 RunInstances calls one after another).
    async fn launch_many(&self, reqs: &[LaunchRequest<'_>]) -> Vec<Result<CloudHost, CloudError>> {
        use futures_util::stream::{FuturesUnordered, StreamExt};
        let limit = self.opts.max_concurrency.max(1);
        let mut results: Vec<Option<Result<CloudHost, CloudError>>> = Vec::new();
        let mut running = FuturesUnordered::new();
        let mut failed = false;
        loop {
            while !failed && running.len() < limit && results.len() < reqs.len() {
                let i = results.len();
                results.push(None);
                let req = &reqs[i];
                running.push(async move { (i, self.launch(req).await) });
            }
            let Some((i, got)) = running.next().await else {
                break;
            };
            failed |= got.is_err();
            results[i] = Some(got);
        }
        // Every one started has finished: the results of a prefix of `reqs`.
        results.into_iter().flatten().collect()
    }

    /// Launch exactly what the plan fixed (see [`Ec2Cloud::launch_fixed`]); a host
    /// planned without an image or root device is refused (plan again).
    async fn launch(&self, req: &LaunchRequest<'_>) -> Result<CloudHost, CloudError> {
        let host = req.host;
        if let Some(existing) = self.find_by_token(req.cluster, &host.launch_token).await? {
            if let Some(h) = cloud_host(&existing) {
                // Never adopt another store's instance (tokens differ by store id, so
                // this only happens when tags were copied or forged).
                if let Some(owner) = h.store_id.as_deref().filter(|s| *s != req.store_id) {
                    return Err(CloudError::ForeignInstance {
                        instance_id: h.instance_id,
                        owner: owner.to_string(),
                        action: "adopt",
                    });
                }
                tracing::info!(host = %host.id, instance_id = %h.instance_id, "already launched (launch-token tag found): not launching again");
                return Ok(h);
            }
        }
        let invalid = |message: String| CloudError::InvalidRequest {
            host_id: host.id.clone(),
            message,
        };
        let join = req.join.ok_or_else(|| invalid(NO_CONTROLLER.to_string()))?;
        let input = UserDataInput {
            cluster: req.cluster,
            pool_name: &host.capacity_provider,
            pool: req.pool,
            host_id: &host.id,
            join,
        };
        let user_data = render_user_data(&input).map_err(|e| invalid(e.to_string()))?;
        let (Some(image), Some(root)) = (host.image_id.as_deref(), req.root_device) else {
            return Err(invalid(format!(
                "the plan names no {} for this host (the cloud gave no launch facts for capacity_provider {:?} when it was planned): plan again",
                if host.image_id.is_none() { "image" } else { "root device" },
                host.capacity_provider
            )));
        };
        self.launch_fixed(req, (image, root), &user_data).await
    }

    async fn claim(
        &self,
        cluster: &str,
        store_id: &str,
        instance_id: &str,
    ) -> Result<(), CloudError> {
        let Some(inst) = self.describe_one(instance_id).await? else {
            return Ok(());
        };
        let tags = (inst.tag(tags::CLUSTER), inst.tag(tags::STORE_ID));
        if check_ownership(instance_id, tags, (cluster, store_id), "adopt")? == Ownership::Ours {
            return Ok(());
        }
        // The instance and its EBS volumes, as a launch would have tagged them.
        let mut resources = vec![instance_id.to_string()];
        resources.extend(inst.volume_ids().map(str::to_string));
        let _p = self.permit().await;
        self.client
            .create_tags(&resources, &[Tag::new(tags::STORE_ID, store_id)])
            .await
            .map_err(|e| api_err("CreateTags", e))?;
        tracing::info!(%instance_id, %store_id, "tagged an instance launched before store identity with this store's id");
        Ok(())
    }

    async fn terminate(
        &self,
        cluster: &str,
        store_id: &str,
        instance_id: &str,
    ) -> Result<(), CloudError> {
        let Some(inst) = self.describe_one(instance_id).await? else {
            tracing::info!(%instance_id, "already gone");
            return Ok(());
        };
        let tags = (inst.tag(tags::CLUSTER), inst.tag(tags::STORE_ID));
        check_ownership(instance_id, tags, (cluster, store_id), "terminate")?;
        if inst.state_name() == Some(InstanceStateName::Terminated) {
            return Ok(());
        }
        {
            let _p = self.permit().await;
            match self
                .client
                .terminate_instances(&[instance_id.to_string()])
                .await
            {
                Ok(_) => {}
                Err(e) if e.code() == Some("InvalidInstanceID.NotFound") => return Ok(()),
                Err(e) => return Err(api_err("TerminateInstances", e)),
            }
        }
        // Confirm by describe: shutting-down or terminated (or gone).
        let deadline = Instant::now() + self.opts.confirm_timeout;
        // 200 ms, doubling up to 5 s, until the deadline.
        let mut waits = backoff_delays(Duration::from_millis(200), Duration::from_secs(5));
        loop {
            match self.describe_one(instance_id).await? {
                None => return Ok(()),
                Some(i) => match i.state_name() {
                    Some(InstanceStateName::ShuttingDown | InstanceStateName::Terminated) => {
                        tracing::info!(%instance_id, "terminated");
                        self.caches().launched.remove(instance_id);
                        return Ok(());
                    }
                    other => {
                        if Instant::now() >= deadline {
                            return Err(CloudError::Api {
                                operation: "TerminateInstances".into(),
                                source: Box::new(AwsError {
                                    code: "NotConfirmed".into(),
                                    message: format!(
                                        "{instance_id} still {:?} after {:?}",
                                        other.map(|s| s.as_str()),
                                        self.opts.confirm_timeout
                                    ),
                                }),
                            });
                        }
                        tokio::time::sleep(waits.next().unwrap_or(Duration::from_secs(5))).await;
                    }
                },
            }
        }
    }
}

#[cfg(test)]
mod tests;

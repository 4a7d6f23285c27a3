//! One RunInstances call (tags, IMDSv2, root volume, Spot options, user data) for
//! the launch the plan fixed, and what a launch error means. Nothing here chooses:
//! no capacity where the plan put a host fails the launch.

use super::convert::{api_err, client_token, cloud_host, market_options};
use super::{AwsError, Ec2Cloud};
use crate::api::{self, ApiError, Instance, Tag};
use crate::retry::{is_capacity_error, QUOTA_CODES};
use crate::tags;
use base64::Engine as _;
use gpushare_core::model::{CloudHost, Market};
use gpushare_engine::cloud::{CloudError, LaunchRequest};

/// A RunInstances error other than no capacity: a quota with what to ask for, else the API error.
pub(super) fn launch_error(e: ApiError, itype: &str, market: Market) -> CloudError {
    let code = e.code().unwrap_or("").to_string();
    if QUOTA_CODES.contains(&code.as_str()) {
        let quota = match market {
            Market::OnDemand => "\"Running On-Demand G and VT instances\" or \"P instances\"",
            Market::Spot => {
                "\"All G and VT Spot Instance Requests\" or \"All P Spot Instance Requests\""
            }
        };
        return CloudError::Quota {
            instance_type: itype.to_string(),
            message: format!(
                "{code}: {}; ask for a higher quota (Service Quotas, EC2 {quota}) or lower the pool's max_size",
                e.message().unwrap_or("")
            ),
        };
    }
    api_err("RunInstances", e)
}

impl Ec2Cloud {
    pub(super) async fn run_one(
        &self,
        req: &LaunchRequest<'_>,
        (image, root_device): (&str, &str),
        instance_type: &str,
        fallback: Option<&str>,
        subnet: Option<&str>,
        user_data: &str,
    ) -> Result<Instance, ApiError> {
        let pool = req.pool;
        let host = req.host;
        let tag_list: Vec<Tag> = tags::for_host(
            req.cluster,
            req.store_id,
            &host.capacity_provider,
            &host.id,
            &host.launch_token,
            &tags::layered(&self.opts.default_tags, &pool.tags),
        )
        .into_iter()
        .map(|(k, v)| Tag::new(k, v))
        .collect();
        let spec = |resource_type: &str| api::query::TagSpecification {
            resource_type: resource_type.to_string(),
            tags: tag_list.clone(),
        };
        let call = api::RunInstances {
            image_id: image.to_string(),
            instance_type: instance_type.to_string(),
            client_token: Some(client_token(
                req.cluster,
                req.store_id,
                &host.launch_token,
                subnet,
                fallback,
            )),
            subnet_id: subnet.map(str::to_string),
            security_group_ids: pool.security_groups.clone(),
            key_name: pool.key_name.clone(),
            iam_instance_profile: pool.instance_profile.as_ref().map(|p| {
                if p.starts_with("arn:") {
                    api::query::IamInstanceProfile::Arn(p.clone())
                } else {
                    api::query::IamInstanceProfile::Name(p.clone())
                }
            }),
            metadata_options: Some(api::query::MetadataOptions {
                http_tokens_required: pool.metadata_options.http_tokens_required,
                http_put_response_hop_limit: u32::from(
                    pool.metadata_options.http_put_response_hop_limit.max(1),
                ),
            }),
            block_device_mappings: vec![api::query::BlockDeviceMapping {
                device_name: root_device.to_string(),
                ebs: api::query::EbsBlockDevice {
                    volume_size_gib: pool.root_volume.size_gib,
                    volume_type: pool.root_volume.volume_type.clone(),
                    encrypted: pool.root_volume.encrypted,
                    delete_on_termination: true,
                },
            }],
            tag_specifications: vec![spec("instance"), spec("volume")],
            spot: market_options(pool),
            user_data_base64: Some(base64::engine::general_purpose::STANDARD.encode(user_data)),
        };
        let out = {
            let _p = self.permit().await;
            self.client.run_instances(&call).await?
        };
        Ok(out.into_iter().next().unwrap_or_default())
    }

    /// Launch exactly what the plan fixed: the host's instance type, `image`, subnet
    /// and zone. No capacity there is [`CloudError::InsufficientCapacity`] naming the
    /// subnet and zone (apply records it; the next plan launches elsewhere).
    pub(super) async fn launch_fixed(
        &self,
        req: &LaunchRequest<'_>,
        (image, root): (&str, &str),
        user_data: &str,
    ) -> Result<CloudHost, CloudError> {
        let host = req.host;
        let itype = host.instance_type.as_str();
        let fallback =
            (host.gpu_instance.is_none() && itype != req.pool.instance_type).then_some(itype);
        let subnet = host.subnet.as_deref();
        match self
            .run_one(req, (image, root), itype, fallback, subnet, user_data)
            .await
        {
            Ok(inst) => self.launched(req, &inst, itype, subnet),
            Err(e) => {
                let code = e.code().unwrap_or("").to_string();
                if is_capacity_error(&code, req.pool.market) {
                    tracing::warn!(host = %host.id, instance_type = %itype, subnet = subnet.unwrap_or("default"), zone = host.zone.as_deref().unwrap_or("-"), %code, "no capacity where the plan launches this host");
                    return Err(CloudError::InsufficientCapacity {
                        pool: host.capacity_provider.clone(),
                        instance_type: itype.to_string(),
                        place: Some(host.launch_place()),
                    });
                }
                Err(launch_error(e, itype, req.pool.market))
            }
        }
    }

    /// The launched instance as a cloud host, remembered against EC2's eventual consistency.
    pub(super) fn launched(
        &self,
        req: &LaunchRequest<'_>,
        inst: &Instance,
        itype: &str,
        subnet: Option<&str>,
    ) -> Result<CloudHost, CloudError> {
        let host = req.host;
        let Some(mut h) = cloud_host(inst) else {
            return Err(CloudError::Api {
                operation: "RunInstances".into(),
                source: Box::new(AwsError {
                    code: "EmptyResponse".into(),
                    message: "RunInstances returned no instance".into(),
                }),
            });
        };
        // Tags are set in the same call; fill them in if the response omits them.
        h.host_id = host.id.clone();
        h.capacity_provider = host.capacity_provider.clone();
        h.launch_token = host.launch_token.clone();
        h.store_id = Some(req.store_id.to_string()).filter(|s| !s.is_empty());
        tracing::info!(host = %host.id, instance_id = %h.instance_id, instance_type = %itype, market = req.pool.market.as_str(), subnet = subnet.unwrap_or("default"), "launched");
        self.remember(&h);
        Ok(h)
    }
}

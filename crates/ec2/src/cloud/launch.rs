//! One RunInstances call (tags, IMDSv2, root volume, Spot options, user data), the
//! launch the plan fixed, the subnet order of a launch planned without facts, and
//! what a launch error means.

use super::*;

/// A RunInstances error other than no capacity: a quota with what to ask for, else the API error.
pub(super) fn launch_error(
    e: SdkError<
        aws_sdk_ec2::operation::run_instances::RunInstancesError,
        aws_sdk_ec2::config::http::HttpResponse,
    >,
    itype: &str,
    market: Market,
) -> CloudError {
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
    /// Subnets to try, in order: least loaded first (ties broken by the host id, so a
    /// burst of launches spreads over the list), each zone before any zone repeats.
    pub(super) fn subnet_order(
        &self,
        facts: &PoolFacts,
        host_id: &str,
        instance_type: &str,
    ) -> Vec<(String, String)> {
        let n = facts.subnets.len();
        if n == 0 {
            return Vec::new();
        }
        let h = Sha256::digest(host_id.as_bytes());
        let start = (u64::from_le_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]])
            % n as u64) as usize;
        let (load, refused) = {
            let c = self.caches();
            let refused: HashSet<String> = c
                .refused
                .iter()
                .filter(|((_, t), at)| {
                    t == instance_type && at.elapsed() < self.opts.capacity_cooldown
                })
                .map(|((s, _), _)| s.clone())
                .collect();
            (c.subnet_load.clone(), refused)
        };
        let mut order: Vec<(usize, (String, String))> = facts
            .subnets
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, s)| ((i + n - start) % n, s))
            .collect();
        order.sort_by_key(|(rot, (s, _))| {
            (refused.contains(s), load.get(s).copied().unwrap_or(0), *rot)
        });
        order.into_iter().map(|(_, s)| s).collect()
    }

    pub(super) async fn run_one(
        &self,
        req: &LaunchRequest<'_>,
        (image, root_device): (&str, &str),
        instance_type: &str,
        fallback: Option<&str>,
        subnet: Option<&str>,
        user_data: &str,
    ) -> Result<
        Instance,
        SdkError<
            aws_sdk_ec2::operation::run_instances::RunInstancesError,
            aws_sdk_ec2::config::http::HttpResponse,
        >,
    > {
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
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect();
        let spec = |rt: ResourceType| {
            TagSpecification::builder()
                .resource_type(rt)
                .set_tags(Some(tag_list.clone()))
                .build()
        };
        let metadata = InstanceMetadataOptionsRequest::builder()
            .http_endpoint(InstanceMetadataEndpointState::Enabled)
            .http_tokens(if pool.metadata_options.http_tokens_required {
                HttpTokensState::Required
            } else {
                HttpTokensState::Optional
            })
            .http_put_response_hop_limit(i32::from(
                pool.metadata_options.http_put_response_hop_limit.max(1),
            ))
            .build();
        let root = BlockDeviceMapping::builder()
            .device_name(root_device)
            .ebs(
                EbsBlockDevice::builder()
                    .volume_size(i32::try_from(pool.root_volume.size_gib).unwrap_or(i32::MAX))
                    .volume_type(VolumeType::from(pool.root_volume.volume_type.as_str()))
                    .encrypted(pool.root_volume.encrypted)
                    .delete_on_termination(true)
                    .build(),
            )
            .build();
        let mut call = self
            .client
            .run_instances()
            .image_id(image)
            .instance_type(aws_sdk_ec2::types::InstanceType::from(instance_type))
            .min_count(1)
            .max_count(1)
            .client_token(client_token(
                req.cluster,
                req.store_id,
                &host.launch_token,
                subnet,
                fallback,
            ))
            .set_instance_market_options(market_options(pool))
            .set_subnet_id(subnet.map(str::to_string))
            .set_security_group_ids(if pool.security_groups.is_empty() {
                None
            } else {
                Some(pool.security_groups.clone())
            })
            .set_key_name(pool.key_name.clone())
            .metadata_options(metadata)
            .block_device_mappings(root)
            .tag_specifications(spec(ResourceType::Instance))
            .tag_specifications(spec(ResourceType::Volume))
            .user_data(base64::engine::general_purpose::STANDARD.encode(user_data));
        if let Some(p) = &pool.instance_profile {
            let spec = if p.starts_with("arn:") {
                IamInstanceProfileSpecification::builder().arn(p)
            } else {
                IamInstanceProfileSpecification::builder().name(p)
            };
            call = call.iam_instance_profile(spec.build());
        }
        let out = {
            let _p = self.permit().await;
            call.send().await?
        };
        Ok(out
            .instances()
            .first()
            .cloned()
            .unwrap_or_else(|| Instance::builder().build()))
    }

    /// Launch exactly what the plan fixed: the host's instance type, `image`, subnet
    /// and zone. No capacity there is [`CloudError::InsufficientCapacity`] naming the
    /// subnet and zone (apply records it; the next plan launches elsewhere).
    pub(super) async fn launch_fixed(
        &self,
        req: &LaunchRequest<'_>,
        facts: &PoolFacts,
        image: &str,
        user_data: &str,
    ) -> Result<CloudHost, CloudError> {
        let host = req.host;
        let root = if image == facts.image {
            facts.root_device.clone()
        } else {
            // The plan was made with another image than this process resolved now.
            self.root_device(&host.capacity_provider, image)
                .await
                .map_err(|e| match e {
                    CloudError::InvalidPool { message, .. } => CloudError::InvalidRequest {
                        host_id: host.id.clone(),
                        message,
                    },
                    other => other,
                })?
        };
        let itype = host.instance_type.as_str();
        let fallback =
            (host.gpu_instance.is_none() && itype != req.pool.instance_type).then_some(itype);
        let subnet = host.subnet.as_deref();
        match self
            .run_one(req, (image, &root), itype, fallback, subnet, user_data)
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
        self.remember(req.cluster, &h, subnet.map(str::to_string));
        Ok(h)
    }
}

//! What EC2 says about the pools' launches: instance types (DescribeInstanceTypes,
//! merged with the catalogue), the image (the pool's, or the newest default) with its
//! root device, and the subnets with their zones. Cached per process.

use super::convert::api_err;
use super::Ec2Cloud;
use crate::api::{self, Filter, InstanceTypeInfo};
use crate::user_data::{render_user_data, UserDataInput};
use gpushare_core::catalog::{self, InstanceType};
use gpushare_core::model::CapacityProvider;
use gpushare_core::util::lock;
use gpushare_engine::cloud::{CloudError, LaunchRequest};
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, OnceLock};

/// What the EC2 API says about an instance type, for validation.
#[derive(Debug, Clone)]
pub(super) enum TypeFacts {
    /// The merged facts and the CPU architecture (`x86_64` or `arm64`).
    Nvidia(InstanceType, String),
    NotNvidia(String),
    Unknown,
}

/// Per pool, checked once: image root device, subnets and their zones.
#[derive(Debug, Clone)]
pub(super) struct PoolFacts {
    /// The pool's AMI, or the default NVIDIA GPU image found for it.
    pub(super) image: String,
    pub(super) root_device: String,
    /// (subnet id, availability zone), in the pool's order.
    pub(super) subnets: Vec<(String, String)>,
}

/// Leak a string once per distinct value: instance-type facts learnt from the API live
/// as long as the process, like the built-in catalogue's.
fn intern(s: &str) -> &'static str {
    static SEEN: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut seen = lock(SEEN.get_or_init(Default::default));
    if let Some(s) = seen.get(s) {
        return s;
    }
    let leaked: &'static str = Box::leak(s.to_string().into_boxed_str());
    seen.insert(leaked);
    leaked
}

/// Merge DescribeInstanceTypes' answer with the built-in catalogue: GPU count and MiB
/// per GPU, vCPUs and memory from the API; price (and the model's spelling) from the
/// catalogue. `Err(reason)` when the type has no NVIDIA GPU.
pub fn merge_instance_type(info: &InstanceTypeInfo) -> Result<InstanceType, String> {
    let name = info.instance_type.as_deref().unwrap_or_default();
    let gpus: &[api::model::GpuDeviceInfo] = info
        .gpu_info
        .as_ref()
        .map(|g| g.gpus.as_slice())
        .unwrap_or_default();
    if gpus.is_empty() {
        return Err(format!("{name} has no GPU"));
    }
    let nvidia: Vec<_> = gpus
        .iter()
        .filter(|g| {
            g.manufacturer
                .as_deref()
                .is_some_and(|m| m.eq_ignore_ascii_case("nvidia"))
        })
        .collect();
    let Some(first) = nvidia.first() else {
        let makers: Vec<&str> = gpus
            .iter()
            .filter_map(|g| g.manufacturer.as_deref())
            .collect();
        return Err(format!(
            "{name} has {} GPUs, not NVIDIA (MPS needs NVIDIA GPUs)",
            makers.join("/")
        ));
    };
    let builtin = catalog::lookup(name);
    let api_model = first
        .name
        .as_deref()
        .unwrap_or("unknown")
        .to_ascii_lowercase();
    let gpu_model = match builtin {
        Some(b) if b.gpu_model.eq_ignore_ascii_case(&api_model) => b.gpu_model,
        _ => intern(&api_model),
    };
    let gpu_count: u32 = nvidia
        .iter()
        .map(|g| g.count.unwrap_or(0).max(0) as u32)
        .sum();
    let gpu_memory_mib = first
        .memory_info
        .as_ref()
        .and_then(|m| m.size_in_mib)
        .map(|m| m.max(0) as u64);
    let vcpus = info
        .v_cpu_info
        .as_ref()
        .and_then(|v| v.default_v_cpus)
        .map(|v| v.max(0) as u32);
    let memory_mib = info
        .memory_info
        .as_ref()
        .and_then(|m| m.size_in_mib)
        .map(|m| m.max(0) as u64);
    Ok(InstanceType {
        name: builtin.map(|b| b.name).unwrap_or_else(|| intern(name)),
        gpu_model,
        gpu_count: if gpu_count > 0 {
            gpu_count
        } else {
            builtin.map(|b| b.gpu_count).unwrap_or(1)
        },
        gpu_memory_mib: gpu_memory_mib
            .or(builtin.map(|b| b.gpu_memory_mib))
            .unwrap_or(0),
        vcpus: vcpus.or(builtin.map(|b| b.vcpus)).unwrap_or(0),
        memory_mib: memory_mib.or(builtin.map(|b| b.memory_mib)).unwrap_or(0),
        price_per_hour: builtin.and_then(|b| b.price_per_hour),
        fractional: builtin.map(|b| b.fractional).unwrap_or(false),
    })
}

/// The CPU architecture an instance type runs (`arm64` only when it cannot run x86_64).
fn architecture(info: &InstanceTypeInfo) -> String {
    let archs: &[String] = info
        .processor_info
        .as_ref()
        .map(|p| p.supported_architectures.as_slice())
        .unwrap_or_default();
    let has = |a: &str| archs.iter().any(|x| x == a);
    if has("arm64") && !has("x86_64") {
        "arm64".into()
    } else {
        "x86_64".into()
    }
}

/// Name pattern of the default image: AWS's Deep Learning Base AMI with the NVIDIA
/// driver (and nvidia-cuda-mps-control) on Ubuntu 22.04.
pub const DEFAULT_IMAGE_NAME: &str =
    "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *";

impl Ec2Cloud {
    pub(super) async fn type_facts(&self, name: &str) -> Result<TypeFacts, CloudError> {
        if let Some(f) = self.caches().types.get(name) {
            return Ok(f.clone());
        }
        let out = {
            let _p = self.permit().await;
            self.client
                .describe_instance_types(&[name.to_string()])
                .await
        };
        let facts = match out {
            Ok(out) => match out.first() {
                Some(info) => match merge_instance_type(info) {
                    Ok(t) => TypeFacts::Nvidia(t, architecture(info)),
                    Err(reason) => TypeFacts::NotNvidia(reason),
                },
                None => TypeFacts::Unknown,
            },
            Err(e)
                if e.code().is_some_and(|c| {
                    c.starts_with("InvalidInstanceType") || c == "InvalidParameterValue"
                }) =>
            {
                TypeFacts::Unknown
            }
            Err(e) => return Err(api_err("DescribeInstanceTypes", e)),
        };
        self.caches().types.insert(name.to_string(), facts.clone());
        Ok(facts)
    }

    /// Check a pool before anything of it is launched: an NVIDIA instance type that
    /// EC2 knows, an image that exists, subnets that exist, a bootstrap that renders
    /// under 16 KB. Cached per pool definition.
    pub async fn validate(&self, req: &LaunchRequest<'_>) -> Result<(), CloudError> {
        self.pool_facts(req).await.map(|_| ())
    }

    pub(super) async fn pool_facts(
        &self,
        req: &LaunchRequest<'_>,
    ) -> Result<PoolFacts, CloudError> {
        let pool_name = &req.host.capacity_provider;
        // Bad user data is found without a call.
        let join = req.join.ok_or_else(|| CloudError::InvalidRequest {
            host_id: req.host.id.clone(),
            message: super::NO_CONTROLLER.to_string(),
        })?;
        let input = UserDataInput {
            cluster: req.cluster,
            pool_name,
            pool: req.pool,
            host_id: &req.host.id,
            join,
        };
        render_user_data(&input).map_err(|e| CloudError::InvalidRequest {
            host_id: req.host.id.clone(),
            message: format!("capacity_provider {pool_name:?}: user data: {e}"),
        })?;
        // The planned instance type (a fallback of the pool's, or a pinned host's own).
        let types = [req.host.instance_type.clone()];
        self.pool_facts_of(pool_name, req.pool, &types)
            .await
            .map_err(|e| match e {
                CloudError::InvalidPool { message, .. } => CloudError::InvalidRequest {
                    host_id: req.host.id.clone(),
                    message,
                },
                other => other,
            })
    }

    /// The facts of pool `pool_name` launching `types` (the first, then fallbacks):
    /// NVIDIA types EC2 knows, of one architecture; the image (the pool's, or the
    /// newest default for that architecture) and its root device; the subnets and
    /// their zones. Cached per pool definition and types.
    pub(super) async fn pool_facts_of(
        &self,
        pool_name: &str,
        pool: &CapacityProvider,
        types: &[String],
    ) -> Result<PoolFacts, CloudError> {
        let invalid = |message: String| CloudError::InvalidPool {
            pool: pool_name.to_string(),
            message,
        };
        let key = format!(
            "{}|{}",
            serde_json::to_string(pool).unwrap_or_default(),
            types.join(",")
        );
        if let Some(f) = self.caches().pools.get(&key) {
            return Ok(f.clone());
        }
        let Some(itype) = types.first() else {
            return Err(invalid(format!(
                "capacity_provider {pool_name:?}: no instance type"
            )));
        };
        let arch = match self.type_facts(itype).await? {
            TypeFacts::Nvidia(_, arch) => arch,
            TypeFacts::NotNvidia(reason) => {
                return Err(invalid(format!(
                "capacity_provider {pool_name:?}: instance_type {itype:?} cannot be used: {reason}"
            )))
            }
            TypeFacts::Unknown => {
                let hint = catalog::require(itype)
                    .err()
                    .map(|e| e.did_you_mean())
                    .unwrap_or_default();
                return Err(CloudError::UnknownInstanceType {
                    instance_type: itype.clone(),
                    hint: format!(": EC2 does not know it{hint}"),
                });
            }
        };
        // Fallback instance types: NVIDIA types EC2 knows, of the same architecture
        // (they boot the same image).
        for t in types.iter().skip(1) {
            match self.type_facts(t).await? {
                TypeFacts::Nvidia(_, a) if a == arch => {}
                TypeFacts::Nvidia(_, a) => {
                    return Err(invalid(format!(
                        "capacity_provider {pool_name:?}: instance_types: {t:?} runs {a}, but instance_type {itype:?} runs {arch}: they cannot boot the same image"
                    )))
                }
                TypeFacts::NotNvidia(reason) => {
                    return Err(invalid(format!(
                        "capacity_provider {pool_name:?}: instance_types: {t:?} cannot be used: {reason}"
                    )))
                }
                TypeFacts::Unknown => {
                    return Err(CloudError::UnknownInstanceType {
                        instance_type: t.clone(),
                        hint: format!(" (capacity_provider {pool_name:?}, instance_types): EC2 does not know it"),
                    })
                }
            }
        }
        let image = match pool.image.as_deref() {
            Some(i) => i.to_string(),
            None => self.default_image(pool_name, &arch).await?,
        };
        let root_device = self.root_device(pool_name, &image).await?;
        let mut subnets = Vec::new();
        if !pool.subnets.is_empty() {
            let out = {
                let _p = self.permit().await;
                self.client.describe_subnets(&pool.subnets).await
            };
            let found = match out {
                Ok(out) => out
                    .into_iter()
                    .filter_map(|s| Some((s.subnet_id?, s.availability_zone.unwrap_or_default())))
                    .collect::<HashMap<_, _>>(),
                Err(e) if e.code().is_some_and(|c| c.starts_with("InvalidSubnetID")) => {
                    return Err(invalid(format!(
                        "capacity_provider {pool_name:?}: subnets: {}",
                        e.message().unwrap_or("a subnet does not exist")
                    )));
                }
                Err(e) => return Err(api_err("DescribeSubnets", e)),
            };
            for s in &pool.subnets {
                match found.get(s) {
                    Some(zone) => subnets.push((s.clone(), zone.clone())),
                    None => {
                        return Err(invalid(format!(
                            "capacity_provider {pool_name:?}: subnet {s:?} does not exist"
                        )))
                    }
                }
            }
        } else {
            tracing::warn!(pool = %pool_name, "capacity provider has no subnets: launching into the default VPC");
        }
        let facts = PoolFacts {
            image,
            root_device,
            subnets,
        };
        self.caches().pools.insert(key, facts.clone());
        Ok(facts)
    }

    /// The root device name of `image` (cached), or an error naming the pool when the
    /// image does not exist in this region.
    pub(super) async fn root_device(
        &self,
        pool_name: &str,
        image: &str,
    ) -> Result<String, CloudError> {
        if let Some(r) = self.caches().roots.get(image) {
            return Ok(r.clone());
        }
        let missing = |detail: String| {
            CloudError::InvalidPool {
            pool: pool_name.to_string(),
            message: format!(
                "capacity_provider {pool_name:?}: image {image:?} does not exist in this region{detail}"
            ),
        }
        };
        let images = {
            let _p = self.permit().await;
            self.client
                .describe_images(&api::DescribeImages {
                    image_ids: vec![image.to_string()],
                    ..api::DescribeImages::default()
                })
                .await
        };
        let root = match images {
            Ok(out) => match out.into_iter().next() {
                Some(img) => img.root_device_name.unwrap_or_else(|| "/dev/xvda".into()),
                None => return Err(missing(String::new())),
            },
            Err(e) if e.code().is_some_and(|c| c.starts_with("InvalidAMIID")) => {
                return Err(missing(format!(" ({})", e.code().unwrap_or(""))));
            }
            Err(e) => return Err(api_err("DescribeImages", e)),
        };
        self.caches().roots.insert(image.to_string(), root.clone());
        Ok(root)
    }

    /// The newest available AWS Deep Learning Base GPU image for `arch`, for a pool
    /// that names no image.
    async fn default_image(&self, pool_name: &str, arch: &str) -> Result<String, CloudError> {
        let region = self.client.region();
        let partition = crate::partition::Partition::of_region(region);
        let out = {
            let _p = self.permit().await;
            self.client
                .describe_images(&api::DescribeImages {
                    owners: vec![partition.image_owner().into()],
                    filters: vec![
                        Filter::new("name", &[DEFAULT_IMAGE_NAME]),
                        Filter::new("architecture", &[arch]),
                        Filter::new("state", &["available"]),
                    ],
                    ..api::DescribeImages::default()
                })
                .await
                .map_err(|e| api_err("DescribeImages", e))?
        };
        let newest = out
            .iter()
            .filter(|i| i.image_id.is_some())
            .max_by(|a, b| a.creation_date.cmp(&b.creation_date));
        match newest.and_then(|i| i.image_id.as_deref()) {
            Some(id) => {
                tracing::info!(pool = %pool_name, image = %id, "no image set: using the newest AWS Deep Learning Base GPU AMI");
                Ok(id.to_string())
            }
            None => Err(CloudError::InvalidPool {
                pool: pool_name.to_string(),
                message: format!(
                    "capacity_provider {pool_name:?} sets no image and no default NVIDIA GPU image ({DEFAULT_IMAGE_NAME:?}, {arch}, owned by {owner}) is published in {region} (partition {partition}): set the pool's `image` attribute to an AMI id with the NVIDIA driver (capacity_provider {pool_name:?} {{ image = \"ami-...\" }})",
                    owner = partition.image_owner(),
                ),
            }),
        }
    }
}

//! What gpushare reads of EC2's answers: only the fields it uses, named as EC2's XML
//! names them (unknown elements are skipped). EC2 wraps every list in `<xSet><item>…`.

use serde::{Deserialize, Deserializer};

/// A list EC2 sends as `<name><item>…</item>…</name>` (or `<name/>` when empty).
fn items<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    #[derive(Deserialize)]
    struct Items<T> {
        #[serde(rename = "item", default = "Vec::new")]
        item: Vec<T>,
    }
    Ok(Items::deserialize(d)?.item)
}

/// A tag, as sent with a launch or CreateTags, and as EC2 reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Tag {
    pub key: String,
    #[serde(default)]
    pub value: String,
}

impl Tag {
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Tag {
        Tag {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// An instance's state (`instanceState/name`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceStateName {
    Pending,
    Running,
    ShuttingDown,
    Terminated,
    Stopping,
    Stopped,
    /// A state this client does not know.
    #[serde(other)]
    Unknown,
}

impl InstanceStateName {
    /// EC2's spelling (`shutting-down`); `unknown` for a state this client does not know.
    pub fn as_str(&self) -> &'static str {
        match self {
            InstanceStateName::Pending => "pending",
            InstanceStateName::Running => "running",
            InstanceStateName::ShuttingDown => "shutting-down",
            InstanceStateName::Terminated => "terminated",
            InstanceStateName::Stopping => "stopping",
            InstanceStateName::Stopped => "stopped",
            InstanceStateName::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct InstanceState {
    pub name: InstanceStateName,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    pub availability_zone: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EbsInstanceBlockDevice {
    pub volume_id: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceBlockDeviceMapping {
    pub device_name: Option<String>,
    pub ebs: Option<EbsInstanceBlockDevice>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceMetadataOptions {
    /// `required` (IMDSv2) or `optional`.
    pub http_tokens: Option<String>,
    pub http_put_response_hop_limit: Option<u32>,
}

/// One instance, as RunInstances and DescribeInstances report it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Instance {
    pub instance_id: Option<String>,
    pub image_id: Option<String>,
    pub instance_type: Option<String>,
    pub subnet_id: Option<String>,
    #[serde(rename = "instanceState")]
    pub state: Option<InstanceState>,
    pub placement: Option<Placement>,
    #[serde(rename = "tagSet", default, deserialize_with = "items")]
    pub tags: Vec<Tag>,
    #[serde(rename = "blockDeviceMapping", default, deserialize_with = "items")]
    pub block_device_mappings: Vec<InstanceBlockDeviceMapping>,
    pub metadata_options: Option<InstanceMetadataOptions>,
}

impl Instance {
    /// The value of tag `key`.
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tags
            .iter()
            .find(|t| t.key == key)
            .map(|t| t.value.as_str())
    }

    pub fn state_name(&self) -> Option<InstanceStateName> {
        self.state.as_ref().map(|s| s.name)
    }

    pub fn availability_zone(&self) -> Option<&str> {
        self.placement
            .as_ref()
            .and_then(|p| p.availability_zone.as_deref())
    }

    /// The ids of the instance's EBS volumes.
    pub fn volume_ids(&self) -> impl Iterator<Item = &str> {
        self.block_device_mappings
            .iter()
            .filter_map(|m| m.ebs.as_ref()?.volume_id.as_deref())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Reservation {
    #[serde(rename = "instancesSet", default, deserialize_with = "items")]
    pub instances: Vec<Instance>,
}

/// One page of DescribeInstances.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct DescribeInstancesPage {
    #[serde(rename = "reservationSet", default, deserialize_with = "items")]
    pub reservations: Vec<Reservation>,
    /// The token of the next page; `None` (or empty) on the last one.
    #[serde(rename = "nextToken")]
    pub next_token: Option<String>,
}

impl DescribeInstancesPage {
    pub fn instances(&self) -> impl Iterator<Item = &Instance> {
        self.reservations.iter().flat_map(|r| &r.instances)
    }

    pub fn into_instances(self) -> impl Iterator<Item = Instance> {
        self.reservations.into_iter().flat_map(|r| r.instances)
    }

    /// The next page's token, if there is a next page.
    pub fn next(&self) -> Option<&str> {
        self.next_token.as_deref().filter(|t| !t.is_empty())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct RunInstancesAnswer {
    #[serde(rename = "instancesSet", default, deserialize_with = "items")]
    pub instances: Vec<Instance>,
}

/// An answer whose content gpushare does not read (TerminateInstances, CreateTags).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Ignored {}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct VCpuInfo {
    #[serde(rename = "defaultVCpus")]
    pub default_v_cpus: Option<i32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct MemoryInfo {
    #[serde(rename = "sizeInMiB")]
    pub size_in_mib: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct GpuDeviceInfo {
    pub name: Option<String>,
    pub manufacturer: Option<String>,
    pub count: Option<i32>,
    #[serde(rename = "memoryInfo")]
    pub memory_info: Option<MemoryInfo>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct GpuInfo {
    #[serde(default, deserialize_with = "items")]
    pub gpus: Vec<GpuDeviceInfo>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct ProcessorInfo {
    #[serde(rename = "supportedArchitectures", default, deserialize_with = "items")]
    pub supported_architectures: Vec<String>,
}

/// One instance type, as DescribeInstanceTypes reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct InstanceTypeInfo {
    #[serde(rename = "instanceType")]
    pub instance_type: Option<String>,
    #[serde(rename = "vCpuInfo")]
    pub v_cpu_info: Option<VCpuInfo>,
    #[serde(rename = "memoryInfo")]
    pub memory_info: Option<MemoryInfo>,
    #[serde(rename = "gpuInfo")]
    pub gpu_info: Option<GpuInfo>,
    #[serde(rename = "processorInfo")]
    pub processor_info: Option<ProcessorInfo>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct DescribeInstanceTypesAnswer {
    #[serde(rename = "instanceTypeSet", default, deserialize_with = "items")]
    pub instance_types: Vec<InstanceTypeInfo>,
}

/// One image, as DescribeImages reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    pub image_id: Option<String>,
    pub root_device_name: Option<String>,
    /// ISO 8601 (`2024-05-01T12:00:00.000Z`): newest sorts last.
    pub creation_date: Option<String>,
    /// `windows` for Windows images; absent for Linux.
    pub platform: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct DescribeImagesAnswer {
    #[serde(rename = "imagesSet", default, deserialize_with = "items")]
    pub images: Vec<Image>,
}

/// One subnet, as DescribeSubnets reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subnet {
    pub subnet_id: Option<String>,
    pub availability_zone: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct DescribeSubnetsAnswer {
    #[serde(rename = "subnetSet", default, deserialize_with = "items")]
    pub subnets: Vec<Subnet>,
}

/// One Spot price (DescribeSpotPriceHistory): USD per hour of an instance type in a zone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpotPrice {
    pub instance_type: Option<String>,
    pub availability_zone: Option<String>,
    pub product_description: Option<String>,
    /// A decimal, as EC2 sends it (`"0.312500"`).
    pub spot_price: Option<String>,
    /// ISO 8601, when the price took effect.
    pub timestamp: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DescribeSpotPriceHistoryAnswer {
    #[serde(default, deserialize_with = "items")]
    pub spot_price_history_set: Vec<SpotPrice>,
    #[serde(default)]
    pub next_token: Option<String>,
}

/// One instance's status (DescribeInstanceStatus): what gpushare reads of it, its
/// scheduled events.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStatus {
    pub instance_id: Option<String>,
    #[serde(default, deserialize_with = "items")]
    pub events_set: Vec<InstanceStatusEvent>,
}

/// A scheduled event of an instance (`instance-retirement`, `system-reboot`, …).
/// A completed or canceled one keeps being listed a while, its description starting
/// `[Completed]` or `[Canceled]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStatusEvent {
    #[serde(default)]
    pub code: String,
    #[serde(default)]
    pub description: String,
    /// The earliest start (ISO 8601).
    pub not_before: Option<String>,
    pub instance_event_id: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DescribeInstanceStatusAnswer {
    #[serde(default, deserialize_with = "items")]
    pub instance_status_set: Vec<InstanceStatus>,
    #[serde(default)]
    pub next_token: Option<String>,
}

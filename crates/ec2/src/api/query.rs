//! Request encoding for the EC2 Query API: a form (`application/x-www-form-urlencoded`)
//! POSTed to the endpoint, `Action=…&Version=2016-11-15` and the action's parameters.
//! Lists are numbered from 1 (`InstanceId.1`, `InstanceId.2`), structures are dotted
//! (`MetadataOptions.HttpTokens`), filters are `Filter.N.Name` / `Filter.N.Value.M`.

use super::model::Tag;

/// The EC2 API version every request names.
pub const API_VERSION: &str = "2016-11-15";

/// The form parameters of one EC2 call, in the order they were set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    pairs: Vec<(String, String)>,
}

impl Params {
    /// `Action=action&Version=2016-11-15`.
    pub fn new(action: &str) -> Params {
        Params::of_version(action, API_VERSION)
    }

    /// `Action=action&Version=version`: a call of another Query API (ELBv2).
    pub fn of_version(action: &str, version: &str) -> Params {
        Params {
            pairs: vec![
                ("Action".into(), action.into()),
                ("Version".into(), version.into()),
            ],
        }
    }

    /// The action these parameters call.
    pub fn action(&self) -> &str {
        self.get("Action").unwrap_or_default()
    }

    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) -> &mut Params {
        self.pairs.push((key.into(), value.into()));
        self
    }

    /// `key=value` when `value` is set.
    pub fn set_opt(&mut self, key: impl Into<String>, value: Option<&str>) -> &mut Params {
        if let Some(v) = value {
            self.set(key, v);
        }
        self
    }

    /// `prefix.1=a&prefix.2=b…`
    pub fn list<S: AsRef<str>>(&mut self, prefix: &str, values: &[S]) -> &mut Params {
        for (i, v) in values.iter().enumerate() {
            self.set(format!("{prefix}.{}", i + 1), v.as_ref());
        }
        self
    }

    /// `Filter.N.Name=…&Filter.N.Value.M=…`
    pub fn filters(&mut self, filters: &[Filter]) -> &mut Params {
        for (i, f) in filters.iter().enumerate() {
            let p = format!("Filter.{}", i + 1);
            self.set(format!("{p}.Name"), &f.name);
            self.list(&format!("{p}.Value"), &f.values);
        }
        self
    }

    /// `prefix.N.Key=…&prefix.N.Value=…`
    pub fn tags(&mut self, prefix: &str, tags: &[Tag]) -> &mut Params {
        for (i, t) in tags.iter().enumerate() {
            self.set(format!("{prefix}.{}.Key", i + 1), &t.key);
            self.set(format!("{prefix}.{}.Value", i + 1), &t.value);
        }
        self
    }

    /// The value of parameter `key` (the first one set).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// The request body: the parameters form-encoded.
    pub fn encode(&self) -> String {
        form_urlencoded::Serializer::new(String::new())
            .extend_pairs(self.pairs.iter())
            .finish()
    }
}

/// A describe filter: `name` matches any of `values`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    pub name: String,
    pub values: Vec<String>,
}

impl Filter {
    pub fn new<S: AsRef<str>>(name: impl Into<String>, values: &[S]) -> Filter {
        Filter {
            name: name.into(),
            values: values.iter().map(|v| v.as_ref().to_string()).collect(),
        }
    }
}

fn flag(b: bool) -> &'static str {
    if b {
        "true"
    } else {
        "false"
    }
}

/// The instance profile of a launch, by ARN or by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IamInstanceProfile {
    Arn(String),
    Name(String),
}

/// The instance metadata service of a launch (its endpoint is always enabled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataOptions {
    /// IMDSv2: session tokens required.
    pub http_tokens_required: bool,
    pub http_put_response_hop_limit: u32,
}

/// An EBS volume at launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EbsBlockDevice {
    pub volume_size_gib: u32,
    /// `gp3`, `gp2`, `io2`…
    pub volume_type: String,
    pub encrypted: bool,
    pub delete_on_termination: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockDeviceMapping {
    pub device_name: String,
    pub ebs: EbsBlockDevice,
}

/// Tags for the resources a launch creates of one type (`instance`, `volume`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagSpecification {
    pub resource_type: String,
    pub tags: Vec<Tag>,
}

/// A Spot launch (`InstanceMarketOptions.MarketType=spot`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpotMarketOptions {
    /// `one-time` or `persistent`.
    pub spot_instance_type: String,
    /// `terminate`, `stop` or `hibernate`.
    pub instance_interruption_behavior: String,
    /// USD per hour; `None` = EC2's default, the On-Demand price.
    pub max_price: Option<String>,
}

/// One RunInstances call launching exactly one instance.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunInstances {
    pub image_id: String,
    pub instance_type: String,
    /// Idempotency token: EC2 returns the first launch for a repeated token.
    pub client_token: Option<String>,
    pub subnet_id: Option<String>,
    pub security_group_ids: Vec<String>,
    pub key_name: Option<String>,
    pub iam_instance_profile: Option<IamInstanceProfile>,
    pub metadata_options: Option<MetadataOptions>,
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    pub tag_specifications: Vec<TagSpecification>,
    pub spot: Option<SpotMarketOptions>,
    /// The user data, base64-encoded.
    pub user_data_base64: Option<String>,
}

impl RunInstances {
    pub fn params(&self) -> Params {
        let mut p = Params::new("RunInstances");
        p.set("ImageId", &self.image_id)
            .set("InstanceType", &self.instance_type)
            .set("MinCount", "1")
            .set("MaxCount", "1")
            .set_opt("ClientToken", self.client_token.as_deref())
            .set_opt("SubnetId", self.subnet_id.as_deref())
            .list("SecurityGroupId", &self.security_group_ids)
            .set_opt("KeyName", self.key_name.as_deref());
        match &self.iam_instance_profile {
            Some(IamInstanceProfile::Arn(arn)) => {
                p.set("IamInstanceProfile.Arn", arn);
            }
            Some(IamInstanceProfile::Name(name)) => {
                p.set("IamInstanceProfile.Name", name);
            }
            None => {}
        }
        if let Some(m) = &self.metadata_options {
            p.set("MetadataOptions.HttpEndpoint", "enabled")
                .set(
                    "MetadataOptions.HttpTokens",
                    if m.http_tokens_required {
                        "required"
                    } else {
                        "optional"
                    },
                )
                .set(
                    "MetadataOptions.HttpPutResponseHopLimit",
                    m.http_put_response_hop_limit.to_string(),
                );
        }
        for (i, b) in self.block_device_mappings.iter().enumerate() {
            let k = format!("BlockDeviceMapping.{}", i + 1);
            p.set(format!("{k}.DeviceName"), &b.device_name)
                .set(
                    format!("{k}.Ebs.VolumeSize"),
                    b.ebs.volume_size_gib.to_string(),
                )
                .set(format!("{k}.Ebs.VolumeType"), &b.ebs.volume_type)
                .set(format!("{k}.Ebs.Encrypted"), flag(b.ebs.encrypted))
                .set(
                    format!("{k}.Ebs.DeleteOnTermination"),
                    flag(b.ebs.delete_on_termination),
                );
        }
        for (i, s) in self.tag_specifications.iter().enumerate() {
            let k = format!("TagSpecification.{}", i + 1);
            p.set(format!("{k}.ResourceType"), &s.resource_type)
                .tags(&format!("{k}.Tag"), &s.tags);
        }
        if let Some(s) = &self.spot {
            p.set("InstanceMarketOptions.MarketType", "spot")
                .set(
                    "InstanceMarketOptions.SpotOptions.SpotInstanceType",
                    &s.spot_instance_type,
                )
                .set(
                    "InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior",
                    &s.instance_interruption_behavior,
                )
                .set_opt(
                    "InstanceMarketOptions.SpotOptions.MaxPrice",
                    s.max_price.as_deref(),
                );
        }
        p.set_opt("UserData", self.user_data_base64.as_deref());
        p
    }
}

/// One DescribeInstances page: by instance ids and/or filters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeInstances {
    pub instance_ids: Vec<String>,
    pub filters: Vec<Filter>,
    /// Page size (5-1000); `None` = EC2's default. Not allowed with `instance_ids`.
    pub max_results: Option<i32>,
    pub next_token: Option<String>,
}

impl DescribeInstances {
    pub fn params(&self) -> Params {
        let mut p = Params::new("DescribeInstances");
        p.list("InstanceId", &self.instance_ids)
            .filters(&self.filters)
            .set_opt(
                "MaxResults",
                self.max_results.map(|n| n.to_string()).as_deref(),
            )
            .set_opt("NextToken", self.next_token.as_deref());
        p
    }
}

/// One DescribeImages call: by image ids, owners and filters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeImages {
    pub image_ids: Vec<String>,
    pub owners: Vec<String>,
    pub filters: Vec<Filter>,
}

impl DescribeImages {
    pub fn params(&self) -> Params {
        let mut p = Params::new("DescribeImages");
        p.list("ImageId", &self.image_ids)
            .list("Owner", &self.owners)
            .filters(&self.filters);
        p
    }
}

//! AWS partitions: every ARN gpushare prints or sends names the partition of the
//! fleet's region (`arn:aws:...`, `arn:aws-us-gov:...`, `arn:aws-cn:...`), and the
//! service principals of the China partition end in `.amazonaws.com.cn`.

/// The AWS partition a region belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partition {
    /// The commercial regions (`us-east-1`, `eu-west-1`, ...).
    Aws,
    /// AWS GovCloud (US): `us-gov-west-1`, `us-gov-east-1`.
    AwsUsGov,
    /// The China regions: `cn-north-1`, `cn-northwest-1`.
    AwsCn,
}

impl Partition {
    /// The partition of `region`, by its name (every GovCloud region starts with
    /// `us-gov-`, every China region with `cn-`); the commercial one otherwise.
    pub fn of_region(region: &str) -> Partition {
        if region.starts_with("us-gov-") {
            Partition::AwsUsGov
        } else if region.starts_with("cn-") {
            Partition::AwsCn
        } else {
            Partition::Aws
        }
    }

    /// The partition's name as ARNs spell it.
    pub fn name(self) -> &'static str {
        match self {
            Partition::Aws => "aws",
            Partition::AwsUsGov => "aws-us-gov",
            Partition::AwsCn => "aws-cn",
        }
    }

    /// `arn:<partition>:<service>:<region>:<account>:<resource>`.
    pub fn arn(self, service: &str, region: &str, account: &str, resource: &str) -> String {
        format!(
            "arn:{}:{service}:{region}:{account}:{resource}",
            self.name()
        )
    }

    /// The owner the default image (AWS's Deep Learning Base AMI) is looked up
    /// under: the alias `amazon`, which names AWS's own images in every partition
    /// (their account ids differ per partition). Whether the image is published in a
    /// region is the lookup's to find; where it is not, the pool must set `image`.
    pub fn image_owner(self) -> &'static str {
        "amazon"
    }

    /// The EC2 service principal (`iam:PassedToService`).
    pub fn ec2_principal(self) -> &'static str {
        match self {
            Partition::AwsCn => "ec2.amazonaws.com.cn",
            Partition::Aws | Partition::AwsUsGov => "ec2.amazonaws.com",
        }
    }
}

impl std::fmt::Display for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_map_to_their_partitions() {
        for (region, want) in [
            ("us-east-1", "aws"),
            ("eu-west-1", "aws"),
            ("ap-southeast-2", "aws"),
            ("us-gov-west-1", "aws-us-gov"),
            ("us-gov-east-1", "aws-us-gov"),
            ("cn-north-1", "aws-cn"),
            ("cn-northwest-1", "aws-cn"),
        ] {
            assert_eq!(Partition::of_region(region).name(), want, "{region}");
        }
        assert_eq!(
            Partition::AwsCn.arn("ec2", "*", "*", "instance/*"),
            "arn:aws-cn:ec2:*:*:instance/*"
        );
        assert_eq!(Partition::AwsCn.ec2_principal(), "ec2.amazonaws.com.cn");
    }
}

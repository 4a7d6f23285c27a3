//! The IAM policies the `ec2` cloud needs (`gpushare iam-policy`, docs/ec2-iam.md):
//! the operator's (whoever runs `plan`, `apply`, `reconcile` or Terraform) and the
//! hosts' instance profile's.
//!
//! Least privilege: reads are unconditional (EC2's Describe calls and the Price List
//! API's GetProducts take no resource ARNs; prices are optional: without them the cost
//! line uses the built-in table); launches must tag the instance and its volumes with the cluster; tags are
//! written only at launch or, on instances of the cluster, only the store-id tag
//! (adoption); only instances of the cluster may be terminated. Services'
//! `load_balancer`s read target groups and register and deregister targets of
//! target groups (the groups are the user's: no tag condition is assumed on them).

use crate::partition::Partition;
use crate::tags;
use serde_json::{json, Value};

/// Every EC2 action the backend calls.
pub const OPERATOR_ACTIONS: &[&str] = &[
    "ec2:DescribeInstances",
    "ec2:DescribeInstanceStatus",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeImages",
    "ec2:DescribeSubnets",
    "ec2:RunInstances",
    "ec2:CreateTags",
    "ec2:TerminateInstances",
    "ec2:DescribeSpotPriceHistory",
    "pricing:GetProducts",
    "elasticloadbalancing:DescribeTargetGroups",
    "elasticloadbalancing:DescribeTargetGroupAttributes",
    "elasticloadbalancing:DescribeTargetHealth",
    "elasticloadbalancing:RegisterTargets",
    "elasticloadbalancing:DeregisterTargets",
];

/// The operator's policy for the fleet of `cluster`, its ARNs in `partition`.
pub fn operator_policy(cluster: &str, partition: Partition) -> Value {
    let request_tag = format!("aws:RequestTag/{}", tags::CLUSTER);
    let resource_tag = format!("aws:ResourceTag/{}", tags::CLUSTER);
    let ec2 = |resource: &str| partition.arn("ec2", "*", "*", resource);
    // What a launch creates (and tags): the instance and its volumes.
    let launched = json!([ec2("instance/*"), ec2("volume/*")]);
    json!({
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "GpushareRead",
                "Effect": "Allow",
                "Action": [
                    "ec2:DescribeInstances",
                    "ec2:DescribeInstanceStatus",
                    "ec2:DescribeInstanceTypes",
                    "ec2:DescribeImages",
                    "ec2:DescribeSubnets"
                ],
                "Resource": "*"
            },
            {
                "Sid": "GpusharePrices",
                "Effect": "Allow",
                "Action": ["ec2:DescribeSpotPriceHistory", "pricing:GetProducts"],
                "Resource": "*"
            },
            {
                "Sid": "GpushareLaunchTaggedInstances",
                "Effect": "Allow",
                "Action": "ec2:RunInstances",
                "Resource": launched.clone(),
                "Condition": { "StringEquals": { request_tag.clone(): cluster } }
            },
            {
                "Sid": "GpushareLaunchFrom",
                "Effect": "Allow",
                "Action": "ec2:RunInstances",
                "Resource": [
                    partition.arn("ec2", "*", "", "image/*"),
                    ec2("subnet/*"),
                    ec2("network-interface/*"),
                    ec2("security-group/*"),
                    ec2("key-pair/*")
                ]
            },
            {
                "Sid": "GpushareTagAtLaunch",
                "Effect": "Allow",
                "Action": "ec2:CreateTags",
                "Resource": launched.clone(),
                "Condition": {
                    "StringEquals": { "ec2:CreateAction": "RunInstances", request_tag: cluster }
                }
            },
            {
                "Sid": "GpushareAdoptOwnInstances",
                "Effect": "Allow",
                "Action": "ec2:CreateTags",
                "Resource": launched.clone(),
                "Condition": {
                    "StringEquals": { resource_tag.clone(): cluster },
                    "ForAllValues:StringEquals": { "aws:TagKeys": [tags::STORE_ID] }
                }
            },
            {
                "Sid": "GpushareTerminateOwnInstances",
                "Effect": "Allow",
                "Action": "ec2:TerminateInstances",
                "Resource": ec2("instance/*"),
                "Condition": { "StringEquals": { resource_tag: cluster } }
            },
            {
                "Sid": "GpushareReadTargetGroups",
                "Effect": "Allow",
                "Action": [
                    "elasticloadbalancing:DescribeTargetGroups",
                    "elasticloadbalancing:DescribeTargetGroupAttributes",
                    "elasticloadbalancing:DescribeTargetHealth"
                ],
                "Resource": "*"
            },
            {
                "Sid": "GpushareRegisterTargets",
                "Effect": "Allow",
                "Action": [
                    "elasticloadbalancing:RegisterTargets",
                    "elasticloadbalancing:DeregisterTargets"
                ],
                "Resource": partition.arn("elasticloadbalancing", "*", "*", "targetgroup/*/*")
            },
            {
                "Sid": "GpusharePassHostRole",
                "Effect": "Allow",
                "Action": "iam:PassRole",
                "Resource": partition.arn("iam", "", "*", "role/gpushare-host-*"),
                "Condition": { "StringEquals": { "iam:PassedToService": partition.ec2_principal() } }
            }
        ]
    })
}

/// The hosts' instance profile policy. The agent calls no AWS API (it talks to the
/// store only, and pulls images without AWS credentials), so the role needs no
/// permission; this policy is a guardrail: credentials taken from a host can never
/// launch, tag, or terminate instances or pass a role, whatever else is attached.
pub fn host_policy() -> Value {
    json!({
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "GpushareHostsNeverManageTheFleet",
                "Effect": "Deny",
                "Action": [
                    "ec2:RunInstances",
                    "ec2:TerminateInstances",
                    "ec2:StopInstances",
                    "ec2:CreateTags",
                    "ec2:DeleteTags",
                    "iam:PassRole"
                ],
                "Resource": "*"
            }
        ]
    })
}

/// A policy as `gpushare iam-policy` prints it: pretty JSON and a newline.
pub fn render(policy: &Value) -> String {
    let mut s = serde_json::to_string_pretty(policy).unwrap_or_default();
    s.push('\n');
    s
}

/// What is wrong with `doc` as an IAM policy document, structurally: JSON with
/// `Version` 2012-10-17 and a non-empty `Statement` list whose every entry has
/// `Effect` Allow or Deny, `Action` and `Resource` (a string or a non-empty list of
/// strings) and, when present, a `Condition` object. Empty when all is well.
pub fn structural_problems(doc: &Value) -> Vec<String> {
    let mut out = vec![];
    if doc.get("Version").and_then(Value::as_str) != Some("2012-10-17") {
        out.push("Version is not \"2012-10-17\"".to_string());
    }
    let Some(statements) = doc.get("Statement").and_then(Value::as_array) else {
        out.push("no Statement list".to_string());
        return out;
    };
    if statements.is_empty() {
        out.push("Statement is empty".to_string());
    }
    let strings = |v: Option<&Value>| match v {
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => {
            !a.is_empty() && a.iter().all(|x| x.as_str().is_some_and(|s| !s.is_empty()))
        }
        _ => false,
    };
    for (i, st) in statements.iter().enumerate() {
        if !matches!(
            st.get("Effect").and_then(Value::as_str),
            Some("Allow" | "Deny")
        ) {
            out.push(format!("Statement[{i}]: Effect is not Allow or Deny"));
        }
        for key in ["Action", "Resource"] {
            if !strings(st.get(key)) {
                out.push(format!(
                    "Statement[{i}]: {key} is not a string or a list of strings"
                ));
            }
        }
        if st.get("Condition").is_some_and(|c| !c.is_object()) {
            out.push(format!("Statement[{i}]: Condition is not an object"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_policies_are_well_formed_and_cover_every_call() {
        let op = operator_policy("inference", Partition::Aws);
        assert_eq!(structural_problems(&op), Vec::<String>::new());
        assert_eq!(structural_problems(&host_policy()), Vec::<String>::new());
        let text = render(&op);
        for a in OPERATOR_ACTIONS {
            assert!(text.contains(a), "{a} missing");
        }
        // Terminate and CreateTags are conditioned on the cluster tag.
        for st in op["Statement"].as_array().into_iter().flatten() {
            let action = st["Action"].to_string();
            if action.contains("TerminateInstances") || action.contains("CreateTags") {
                assert!(
                    st["Condition"].to_string().contains("gpushare:cluster"),
                    "{st}"
                );
                assert!(st["Condition"].to_string().contains("inference"), "{st}");
            }
        }
        assert!(!structural_problems(
            &serde_json::json!({"Version": "2012-10-17", "Statement": [{"Effect": "Maybe"}]})
        )
        .is_empty());
    }

    /// Every ARN of the policy for one region of each partition is of that partition.
    #[test]
    fn arns_are_of_the_regions_partition() {
        for (region, name) in [
            ("us-east-1", "aws"),
            ("us-gov-west-1", "aws-us-gov"),
            ("cn-north-1", "aws-cn"),
        ] {
            let text = render(&operator_policy("inference", Partition::of_region(region)));
            let arns: Vec<&str> = text.split('"').filter(|s| s.starts_with("arn:")).collect();
            assert!(arns.len() >= 8, "{text}");
            for arn in arns {
                assert_eq!(arn.split(':').nth(1), Some(name), "{region}: {arn}");
            }
        }
        let cn = render(&operator_policy("inference", Partition::AwsCn));
        assert!(cn.contains("\"ec2.amazonaws.com.cn\""), "{cn}");
    }
}

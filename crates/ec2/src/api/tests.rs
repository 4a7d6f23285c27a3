//! Unit tests of the EC2 client's pieces: request encoding, answer and error
//! decoding, signing, endpoints.

use super::model::*;
use super::query::*;
use super::*;
use aws_credential_types::Credentials;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

fn form(p: &Params) -> BTreeMap<String, String> {
    form_urlencoded::parse(p.encode().as_bytes())
        .into_owned()
        .collect()
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one request with every setting, field by field"
)]
fn run_instances_with_every_setting_encodes_to_ec2_query_fields() {
    let tags = vec![
        Tag::new("gpushare:cluster", "prod"),
        Tag::new("Name", "a b&c=d"),
    ];
    let req = RunInstances {
        image_id: "ami-0123456789abcdef0".into(),
        instance_type: "g6.xlarge".into(),
        client_token: Some("tok".into()),
        subnet_id: Some("subnet-1".into()),
        security_group_ids: vec!["sg-1".into(), "sg-2".into()],
        key_name: Some("ops".into()),
        iam_instance_profile: Some(IamInstanceProfile::Name("gpushare-host".into())),
        metadata_options: Some(MetadataOptions {
            http_tokens_required: true,
            http_put_response_hop_limit: 2,
        }),
        block_device_mappings: vec![BlockDeviceMapping {
            device_name: "/dev/sda1".into(),
            ebs: EbsBlockDevice {
                volume_size_gib: 200,
                volume_type: "gp3".into(),
                encrypted: true,
                delete_on_termination: true,
            },
        }],
        tag_specifications: vec![
            TagSpecification {
                resource_type: "instance".into(),
                tags: tags.clone(),
            },
            TagSpecification {
                resource_type: "volume".into(),
                tags,
            },
        ],
        spot: Some(SpotMarketOptions {
            spot_instance_type: "one-time".into(),
            instance_interruption_behavior: "terminate".into(),
            max_price: Some("1.25".into()),
        }),
        user_data_base64: Some("IyEvYmluL2Jhc2g=".into()),
    };
    let want: BTreeMap<String, String> = [
        ("Action", "RunInstances"),
        ("Version", "2016-11-15"),
        ("ImageId", "ami-0123456789abcdef0"),
        ("InstanceType", "g6.xlarge"),
        ("MinCount", "1"),
        ("MaxCount", "1"),
        ("ClientToken", "tok"),
        ("SubnetId", "subnet-1"),
        ("SecurityGroupId.1", "sg-1"),
        ("SecurityGroupId.2", "sg-2"),
        ("KeyName", "ops"),
        ("IamInstanceProfile.Name", "gpushare-host"),
        ("MetadataOptions.HttpEndpoint", "enabled"),
        ("MetadataOptions.HttpTokens", "required"),
        ("MetadataOptions.HttpPutResponseHopLimit", "2"),
        ("BlockDeviceMapping.1.DeviceName", "/dev/sda1"),
        ("BlockDeviceMapping.1.Ebs.VolumeSize", "200"),
        ("BlockDeviceMapping.1.Ebs.VolumeType", "gp3"),
        ("BlockDeviceMapping.1.Ebs.Encrypted", "true"),
        ("BlockDeviceMapping.1.Ebs.DeleteOnTermination", "true"),
        ("TagSpecification.1.ResourceType", "instance"),
        ("TagSpecification.1.Tag.1.Key", "gpushare:cluster"),
        ("TagSpecification.1.Tag.1.Value", "prod"),
        ("TagSpecification.1.Tag.2.Key", "Name"),
        ("TagSpecification.1.Tag.2.Value", "a b&c=d"),
        ("TagSpecification.2.ResourceType", "volume"),
        ("TagSpecification.2.Tag.1.Key", "gpushare:cluster"),
        ("TagSpecification.2.Tag.1.Value", "prod"),
        ("TagSpecification.2.Tag.2.Key", "Name"),
        ("TagSpecification.2.Tag.2.Value", "a b&c=d"),
        ("InstanceMarketOptions.MarketType", "spot"),
        (
            "InstanceMarketOptions.SpotOptions.SpotInstanceType",
            "one-time",
        ),
        (
            "InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior",
            "terminate",
        ),
        ("InstanceMarketOptions.SpotOptions.MaxPrice", "1.25"),
        ("UserData", "IyEvYmluL2Jhc2g="),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let p = req.params();
    assert_eq!(form(&p), want);
    assert_eq!(p.pairs().len(), want.len(), "no parameter twice");
    // Reserved characters are percent-encoded in the body.
    assert!(p.encode().contains("a+b%26c%3Dd"), "{}", p.encode());
    assert!(p.encode().contains("UserData=IyEvYmluL2Jhc2g%3D"));

    // By ARN; On-Demand; optional IMDS tokens; nothing unset is sent.
    let bare = RunInstances {
        image_id: "ami-1".into(),
        instance_type: "g6.xlarge".into(),
        iam_instance_profile: Some(IamInstanceProfile::Arn(
            "arn:aws:iam::123456789012:instance-profile/x".into(),
        )),
        metadata_options: Some(MetadataOptions {
            http_tokens_required: false,
            http_put_response_hop_limit: 1,
        }),
        ..RunInstances::default()
    };
    let got = form(&bare.params());
    assert_eq!(
        got.get("IamInstanceProfile.Arn").map(String::as_str),
        Some("arn:aws:iam::123456789012:instance-profile/x")
    );
    assert_eq!(
        got.get("MetadataOptions.HttpTokens").map(String::as_str),
        Some("optional")
    );
    for absent in [
        "ClientToken",
        "SubnetId",
        "KeyName",
        "UserData",
        "IamInstanceProfile.Name",
        "SecurityGroupId.1",
        "InstanceMarketOptions.MarketType",
        "BlockDeviceMapping.1.DeviceName",
    ] {
        assert!(!got.contains_key(absent), "{absent} in {got:?}");
    }
}

#[test]
fn describe_filters_ids_and_paging_encode_numbered_from_one() {
    let req = DescribeInstances {
        instance_ids: vec![],
        filters: vec![
            Filter::new("tag:gpushare:cluster", &["prod"]),
            Filter::new("instance-state-name", &["pending", "running"]),
        ],
        max_results: Some(5),
        next_token: Some("page-2".into()),
    };
    let got = form(&req.params());
    for (k, v) in [
        ("Action", "DescribeInstances"),
        ("Filter.1.Name", "tag:gpushare:cluster"),
        ("Filter.1.Value.1", "prod"),
        ("Filter.2.Name", "instance-state-name"),
        ("Filter.2.Value.1", "pending"),
        ("Filter.2.Value.2", "running"),
        ("MaxResults", "5"),
        ("NextToken", "page-2"),
    ] {
        assert_eq!(got.get(k).map(String::as_str), Some(v), "{k} in {got:?}");
    }
    assert!(!got.keys().any(|k| k.starts_with("InstanceId")));
    let by_id = DescribeInstances {
        instance_ids: vec!["i-1".into(), "i-2".into()],
        ..DescribeInstances::default()
    };
    let got = form(&by_id.params());
    assert_eq!(got.get("InstanceId.2").map(String::as_str), Some("i-2"));
    assert!(!got.contains_key("MaxResults"));

    let images = DescribeImages {
        image_ids: vec![],
        owners: vec!["amazon".into()],
        filters: vec![Filter::new("architecture", &["arm64"])],
    };
    let got = form(&images.params());
    assert_eq!(got.get("Owner.1").map(String::as_str), Some("amazon"));
    assert_eq!(
        got.get("Filter.1.Value.1").map(String::as_str),
        Some("arm64")
    );
}

/// A DescribeInstances page as EC2 sends it (indented, namespaced, fields gpushare
/// does not read included).
const TWO_RESERVATIONS: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
    <requestId>8f7724cf-496f-496e-8fe3-example</requestId>
    <reservationSet>
        <item>
            <reservationId>r-1</reservationId>
            <ownerId>123456789012</ownerId>
            <groupSet/>
            <instancesSet>
                <item>
                    <instanceId>i-0000000000000000a</instanceId>
                    <imageId>ami-1</imageId>
                    <instanceState><code>16</code><name>running</name></instanceState>
                    <instanceType>g6.xlarge</instanceType>
                    <placement><availabilityZone>us-east-1a</availabilityZone><tenancy>default</tenancy></placement>
                    <subnetId>subnet-1</subnetId>
                    <networkInterfaceSet><item><subnetId>subnet-1</subnetId></item></networkInterfaceSet>
                    <blockDeviceMapping>
                        <item>
                            <deviceName>/dev/sda1</deviceName>
                            <ebs><volumeId>vol-1</volumeId><status>attached</status></ebs>
                        </item>
                    </blockDeviceMapping>
                    <tagSet>
                        <item><key>gpushare:cluster</key><value>prod</value></item>
                        <item><key>gpushare:host-id</key><value>h-1</value></item>
                        <item><key>empty</key><value/></item>
                    </tagSet>
                    <metadataOptions><state>applied</state><httpTokens>required</httpTokens><httpPutResponseHopLimit>2</httpPutResponseHopLimit></metadataOptions>
                </item>
                <item>
                    <instanceId>i-0000000000000000b</instanceId>
                    <instanceState><code>32</code><name>shutting-down</name></instanceState>
                    <instanceType>g6.2xlarge</instanceType>
                    <tagSet/>
                </item>
            </instancesSet>
        </item>
        <item>
            <reservationId>r-2</reservationId>
            <instancesSet>
                <item>
                    <instanceId>i-0000000000000000c</instanceId>
                    <instanceState><code>99</code><name>rebooting-somewhere-new</name></instanceState>
                </item>
            </instancesSet>
        </item>
    </reservationSet>
    <nextToken>eyJ2IjoyfQ==</nextToken>
</DescribeInstancesResponse>
"#;

#[test]
fn a_describe_instances_page_with_two_reservations_and_a_next_token_decodes() {
    let page: DescribeInstancesPage =
        xml::decode("DescribeInstances", TWO_RESERVATIONS).expect("decodes");
    assert_eq!(page.reservations.len(), 2);
    assert_eq!(page.next(), Some("eyJ2IjoyfQ=="));
    let all: Vec<&Instance> = page.instances().collect();
    assert_eq!(all.len(), 3);
    let a = all[0];
    assert_eq!(a.instance_id.as_deref(), Some("i-0000000000000000a"));
    assert_eq!(a.image_id.as_deref(), Some("ami-1"));
    assert_eq!(a.instance_type.as_deref(), Some("g6.xlarge"));
    assert_eq!(a.subnet_id.as_deref(), Some("subnet-1"));
    assert_eq!(a.state_name(), Some(InstanceStateName::Running));
    assert_eq!(a.availability_zone(), Some("us-east-1a"));
    assert_eq!(a.tag("gpushare:host-id"), Some("h-1"));
    assert_eq!(a.tag("empty"), Some(""));
    assert_eq!(a.tag("missing"), None);
    assert_eq!(a.volume_ids().collect::<Vec<_>>(), vec!["vol-1"]);
    let md = a.metadata_options.as_ref().expect("metadata options");
    assert_eq!(
        (md.http_tokens.as_deref(), md.http_put_response_hop_limit),
        (Some("required"), Some(2))
    );
    assert_eq!(all[1].state_name(), Some(InstanceStateName::ShuttingDown));
    assert!(all[1].tags.is_empty());
    assert_eq!(all[2].state_name(), Some(InstanceStateName::Unknown));
    assert_eq!(all[2].availability_zone(), None);

    // The last page: no token (or an empty one).
    let last: DescribeInstancesPage = xml::decode(
        "DescribeInstances",
        "<DescribeInstancesResponse><reservationSet/><nextToken/></DescribeInstancesResponse>",
    )
    .expect("decodes");
    assert_eq!((last.reservations.len(), last.next()), (0, None));
}

#[test]
fn an_error_answer_gives_code_message_status_and_request_id() {
    let body = r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>InsufficientInstanceCapacity</Code><Message>We currently do not have sufficient g6.xlarge capacity &amp; more.</Message></Error></Errors><RequestID>ea966190-f9aa-478e-9ede-example</RequestID></Response>"#;
    let e = xml::error(500, body, Some("header-id"));
    match &e {
        ApiError::Service(s) => {
            assert_eq!(s.code, "InsufficientInstanceCapacity");
            assert_eq!(
                s.message,
                "We currently do not have sufficient g6.xlarge capacity & more."
            );
            assert_eq!(s.status, 500);
            assert_eq!(
                s.request_id.as_deref(),
                Some("ea966190-f9aa-478e-9ede-example")
            );
        }
        other => panic!("expected a service error, got {other:?}"),
    }
    assert_eq!(e.code(), Some("InsufficientInstanceCapacity"));
    assert!(e.to_string().starts_with("InsufficientInstanceCapacity: "));

    // The other AWS Query shape; the request id from the header.
    let e = xml::error(
        403,
        "<ErrorResponse><Error><Code>SignatureDoesNotMatch</Code><Message>no</Message></Error></ErrorResponse>",
        Some("header-id"),
    );
    match e {
        ApiError::Service(s) => assert_eq!(
            (s.code.as_str(), s.request_id.as_deref()),
            ("SignatureDoesNotMatch", Some("header-id"))
        ),
        other => panic!("expected a service error, got {other:?}"),
    }

    // Not an EC2 error at all (a proxy's page): the status and the start of the body.
    let e = xml::error(502, "<html><body>Bad Gateway</body></html>", None);
    assert!(
        matches!(&e, ApiError::Http { status: 502, excerpt } if excerpt.contains("Bad Gateway")),
        "{e:?}"
    );
    assert_eq!(e.code(), None);
}

#[test]
fn a_garbled_success_answer_is_a_decode_error_naming_the_action() {
    let e = xml::decode::<DescribeInstancesPage>(
        "DescribeInstances",
        "<DescribeInstancesResponse><reservationSet><item>",
    )
    .expect_err("garbled");
    assert!(
        matches!(&e, ApiError::Decode { action, .. } if action == "DescribeInstances"),
        "{e:?}"
    );
}

#[test]
fn requests_are_signed_with_sigv4_over_the_payload_hash() {
    let creds = Credentials::new(
        "AKIDEXAMPLE",
        "secret",
        Some("session".into()),
        None,
        "test",
    );
    let endpoint: http::Uri = "http://127.0.0.1:5000/".parse().expect("uri");
    let time = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600); // 2026-01-01
    let body = "Action=DescribeInstances&Version=2016-11-15".to_string();
    let req = sign::signed_request(
        "DescribeInstances",
        &endpoint,
        "us-east-1",
        &creds,
        body.clone(),
        time,
    )
    .expect("signed");
    let header = |k: &str| {
        req.headers()
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(req.method(), http::Method::POST);
    assert_eq!(header("host"), "127.0.0.1:5000");
    assert_eq!(header("content-type"), sign::CONTENT_TYPE);
    assert_eq!(header("x-amz-date"), "20260101T000000Z");
    assert_eq!(header("x-amz-security-token"), "session");
    let payload_hash = hex::encode(Sha256::digest(body.as_bytes()));
    assert_eq!(header("x-amz-content-sha256"), payload_hash);
    let auth = header("authorization");
    assert!(
        auth.starts_with(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/ec2/aws4_request, SignedHeaders="
        ),
        "{auth}"
    );
    let signed_headers = auth
        .split("SignedHeaders=")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .unwrap_or_default();
    for h in ["content-type", "host", "x-amz-content-sha256", "x-amz-date"] {
        assert!(
            signed_headers.split(';').any(|x| x == h),
            "{h} not signed: {auth}"
        );
    }
    let signature = |auth: &str| {
        auth.rsplit("Signature=")
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let sig = signature(&auth);
    assert_eq!(sig.len(), 64, "{auth}");
    assert!(sig.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(req.body(), &body);

    // Deterministic for the same request and time; another body, region or time
    // signs differently (the payload hash is part of what is signed).
    let again = |body: &str, region: &str, time: SystemTime| {
        let r = sign::signed_request(
            "DescribeInstances",
            &endpoint,
            region,
            &creds,
            body.into(),
            time,
        )
        .expect("signed");
        signature(r.headers()["authorization"].to_str().expect("ascii"))
    };
    assert_eq!(again(&body, "us-east-1", time), sig);
    assert_ne!(
        again(
            "Action=DescribeInstances&Version=2016-11-16",
            "us-east-1",
            time
        ),
        sig
    );
    assert_ne!(again(&body, "eu-west-1", time), sig);
    assert_ne!(
        again(&body, "us-east-1", time + Duration::from_secs(1)),
        sig
    );
}

#[test]
fn endpoints_default_per_region_and_bad_ones_are_refused() {
    assert_eq!(
        default_endpoint("us-east-1", false, false),
        "https://ec2.us-east-1.amazonaws.com"
    );
    assert_eq!(
        default_endpoint("us-gov-west-1", true, false),
        "https://ec2-fips.us-gov-west-1.amazonaws.com"
    );
    assert_eq!(
        default_endpoint("eu-west-1", false, true),
        "https://ec2.eu-west-1.api.aws"
    );
    assert_eq!(
        default_endpoint("cn-north-1", false, false),
        "https://ec2.cn-north-1.amazonaws.com.cn"
    );
    let creds = SharedCredentialsProvider::new(Credentials::new("a", "b", None, None, "test"));
    let policy = RetryPolicy {
        max_attempts: 1,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(1),
        mode: crate::retry::RetryMode::Standard,
    };
    for bad in ["127.0.0.1:5000", "ftp://x", "http://", "http://h/?a=b"] {
        assert!(
            Client::new(
                bad,
                "us-east-1",
                creds.clone(),
                policy.clone(),
                Duration::from_secs(1)
            )
            .is_err(),
            "{bad}"
        );
    }
    let c = Client::new(
        "http://127.0.0.1:5000",
        "us-east-1",
        creds,
        policy,
        Duration::from_secs(1),
    )
    .expect("valid");
    assert_eq!(c.endpoint().to_string(), "http://127.0.0.1:5000/");
}

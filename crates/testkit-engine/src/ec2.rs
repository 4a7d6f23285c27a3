//! Test harness for the EC2 backend: a real `moto_server` on 127.0.0.1 (a free port per
//! test) and a fault-injecting HTTP proxy on loopback in front of it.
//!
//! Only 127.0.0.1 is ever connected to: the addresses moto hands out for instances are
//! fake and are never used.

use bytes::Bytes;
use gpushare_ec2::api::{
    self, DescribeImages, DescribeInstances, Filter, Instance, InstanceStateName, Params,
    RunInstances, Tag,
};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

pub const REGION: &str = "us-east-1";

/// What the tests create in moto before using it: a VPC with two subnets in two zones,
/// a security group, and a Linux AMI from moto's catalogue.
pub struct Fixture {
    pub ami: String,
    /// (subnet id, availability zone)
    pub subnets: Vec<(String, String)>,
    pub sg: String,
}

/// The parts of moto's answers the fixture reads (actions gpushare itself never calls).
#[derive(Deserialize)]
struct VpcAnswer {
    vpc: Vpc,
}
#[derive(Deserialize)]
struct Vpc {
    #[serde(rename = "vpcId")]
    vpc_id: String,
}
#[derive(Deserialize)]
struct SubnetAnswer {
    subnet: api::Subnet,
}
#[derive(Deserialize)]
struct GroupAnswer {
    #[serde(rename = "groupId")]
    group_id: String,
}

impl Fixture {
    pub async fn create(direct: &api::Client) -> Fixture {
        let mut p = Params::new("CreateVpc");
        // The VPC's and subnets' ranges are data moto keeps for its simulated network
        // (the benchmarking range of RFC 2544, neither private nor anyone's): nothing
        // here or in gpushare ever connects to an address in them.
        p.set("CidrBlock", "198.18.0.0/16");
        let vpc: VpcAnswer = direct.call(&p).await.expect("create vpc");
        let vpc_id = vpc.vpc.vpc_id;
        let mut subnets = Vec::new();
        for (cidr, zone) in [
            ("198.18.1.0/24", "us-east-1a"),
            ("198.18.2.0/24", "us-east-1b"),
        ] {
            let mut p = Params::new("CreateSubnet");
            p.set("VpcId", &vpc_id)
                .set("CidrBlock", cidr)
                .set("AvailabilityZone", zone);
            let s: SubnetAnswer = direct.call(&p).await.expect("create subnet");
            subnets.push((s.subnet.subnet_id.expect("subnet id"), zone.to_string()));
        }
        let mut p = Params::new("CreateSecurityGroup");
        p.set("GroupName", "gpushare-hosts")
            .set("GroupDescription", "gpushare hosts")
            .set("VpcId", &vpc_id);
        let sg: GroupAnswer = direct.call(&p).await.expect("create sg");
        let images = direct
            .describe_images(&DescribeImages {
                owners: vec!["amazon".into()],
                filters: vec![
                    Filter::new("architecture", &["x86_64"]),
                    Filter::new("root-device-type", &["ebs"]),
                ],
                ..DescribeImages::default()
            })
            .await
            .expect("describe images");
        let ami = images
            .into_iter()
            .find(|i| i.platform.is_none())
            .and_then(|i| i.image_id)
            .expect("a linux AMI in moto");
        Fixture {
            ami,
            subnets,
            sg: sg.group_id,
        }
    }
}

/// Instances tagged with `cluster`, asked of moto directly: those in one of `states`,
/// or in any state (terminated ones too) when `states` is `None`.
pub async fn tagged_instances(
    direct: &api::Client,
    cluster: &str,
    states: Option<&[InstanceStateName]>,
) -> Vec<Instance> {
    let mut filters = vec![Filter::new("tag:gpushare:cluster", &[cluster])];
    if let Some(states) = states {
        let names: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
        filters.push(Filter::new("instance-state-name", &names));
    }
    describe(
        direct,
        DescribeInstances {
            filters,
            ..DescribeInstances::default()
        },
    )
    .await
}

/// The instances one DescribeInstances call of moto answers.
pub async fn describe(direct: &api::Client, req: DescribeInstances) -> Vec<Instance> {
    direct
        .describe_instances(&req)
        .await
        .expect("describe instances")
        .into_instances()
        .collect()
}

/// Instances tagged with `cluster` that are pending or running, asked of moto directly.
pub async fn live_instances(direct: &api::Client, cluster: &str) -> Vec<Instance> {
    let live = [InstanceStateName::Pending, InstanceStateName::Running];
    tagged_instances(direct, cluster, Some(&live)).await
}

#[derive(Deserialize)]
struct UserDataAnswer {
    #[serde(rename = "userData")]
    user_data: UserDataValue,
}
#[derive(Deserialize)]
struct UserDataValue {
    value: String,
}

/// An instance's user data, decoded, as DescribeInstanceAttribute returns it.
pub async fn user_data(direct: &api::Client, instance_id: &str) -> String {
    use base64::Engine as _;
    let mut p = Params::new("DescribeInstanceAttribute");
    p.set("InstanceId", instance_id)
        .set("Attribute", "userData");
    let attr: UserDataAnswer = direct.call(&p).await.expect("describe user data");
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(attr.user_data.value)
            .expect("base64"),
    )
    .expect("utf-8")
}

/// Launch one instance straight in moto with `tags` on it; its id.
pub async fn run_tagged(
    direct: &api::Client,
    ami: &str,
    instance_type: &str,
    tags: &[Tag],
) -> String {
    let tag_specifications = if tags.is_empty() {
        Vec::new()
    } else {
        vec![api::query::TagSpecification {
            resource_type: "instance".into(),
            tags: tags.to_vec(),
        }]
    };
    let out = direct
        .run_instances(&RunInstances {
            image_id: ami.into(),
            instance_type: instance_type.into(),
            tag_specifications,
            ..RunInstances::default()
        })
        .await
        .expect("run an instance in moto");
    out.into_iter()
        .next()
        .and_then(|i| i.instance_id)
        .expect("instance id")
}

/// Launch an instance with no tags at all (someone else's), straight in moto; its id.
pub async fn run_untagged(direct: &api::Client, ami: &str) -> String {
    run_tagged(direct, ami, "t3.micro", &[]).await
}

#[derive(Deserialize)]
struct VolumesAnswer {
    #[serde(rename = "volumeSet")]
    volume_set: VolumeItems,
}
#[derive(Deserialize)]
struct VolumeItems {
    #[serde(rename = "item", default)]
    item: Vec<Volume>,
}
/// A volume's id and tags, as DescribeVolumes reports them.
#[derive(Debug, Deserialize)]
pub struct Volume {
    #[serde(rename = "volumeId")]
    pub volume_id: String,
    #[serde(rename = "tagSet", default)]
    tag_set: TagItems,
}
#[derive(Debug, Default, Deserialize)]
struct TagItems {
    #[serde(rename = "item", default)]
    item: Vec<Tag>,
}

impl Volume {
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tag_set
            .item
            .iter()
            .find(|t| t.key == key)
            .map(|t| t.value.as_str())
    }
}

/// Volumes asked of moto directly: by id, or (ids empty) by `filters`.
pub async fn volumes(direct: &api::Client, ids: &[String], filters: &[Filter]) -> Vec<Volume> {
    let mut p = Params::new("DescribeVolumes");
    p.list("VolumeId", ids).filters(filters);
    let out: VolumesAnswer = direct.call(&p).await.expect("describe volumes");
    out.volume_set.item
}

/// The value of tag `key` on an instance.
pub fn tag_of<'a>(i: &'a Instance, key: &str) -> Option<&'a str> {
    i.tag(key)
}

/// A capacity provider from a JSON object, with `extra`'s top-level keys replacing `base`'s.
pub fn pool_from_json(
    mut base: serde_json::Value,
    extra: serde_json::Value,
) -> gpushare_core::model::CapacityProvider {
    if let (Some(b), Some(extra)) = (base.as_object_mut(), extra.as_object()) {
        for (k, x) in extra {
            b.insert(k.clone(), x.clone());
        }
    }
    serde_json::from_value(base).expect("a valid capacity provider")
}

/// Test credentials for the SDK's standard chain; no profile files, no IMDS.
pub fn test_env() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for (k, v) in [
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "testing"),
            ("AWS_SESSION_TOKEN", "testing"),
            ("AWS_REGION", REGION),
            ("AWS_EC2_METADATA_DISABLED", "true"),
            ("AWS_CONFIG_FILE", "/nonexistent/gpushare-test-aws-config"),
            (
                "AWS_SHARED_CREDENTIALS_FILE",
                "/nonexistent/gpushare-test-aws-credentials",
            ),
        ] {
            std::env::set_var(k, v);
        }
    });
}

pub use gpushare_testkit::moto::{moto_binary, Moto};

/// A client straight to moto (not through the proxy), for setup and inspection: fixed
/// test credentials, a single attempt.
pub fn direct_client(endpoint: &str) -> api::Client {
    let credentials = api::SharedCredentialsProvider::new(api::Credentials::new(
        "testing",
        "testing",
        None,
        None,
        "gpushare-tests",
    ));
    let policy = gpushare_ec2::retry::RetryPolicy {
        max_attempts: 1,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(10),
        mode: gpushare_ec2::retry::RetryMode::Standard,
    };
    api::Client::new(
        endpoint,
        REGION,
        credentials,
        policy,
        Duration::from_secs(30),
    )
    .expect("a valid moto endpoint")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// RequestLimitExceeded, HTTP 503.
    Throttle,
    /// InsufficientInstanceCapacity, HTTP 500 (as EC2 sends it).
    Capacity,
    /// InstanceLimitExceeded, HTTP 400.
    Quota,
    /// AuthFailure, HTTP 401.
    Auth,
    /// InvalidInstanceID.NotFound, HTTP 400 (EC2's eventual consistency after a launch).
    NotFound,
    /// SpotMaxPriceTooLow, HTTP 400: a Spot launch whose max price is under the Spot price.
    SpotPriceTooLow,
}

impl Fault {
    fn response(self) -> (u16, &'static str, &'static str) {
        match self {
            Fault::Throttle => (503, "RequestLimitExceeded", "Request limit exceeded."),
            Fault::Capacity => (500, "InsufficientInstanceCapacity", "We currently do not have sufficient g6.xlarge capacity in the Availability Zone you requested."),
            Fault::Quota => (400, "InstanceLimitExceeded", "You have requested more instances (33) than your current instance limit of 32 allows for the specified instance type."),
            Fault::NotFound => (400, "InvalidInstanceID.NotFound", "The instance ID does not exist"),
            Fault::SpotPriceTooLow => (400, "SpotMaxPriceTooLow", "Your Spot request price of 0.1 is lower than the minimum required Spot request fulfillment price of 0.2978."),
            Fault::Auth => (401, "AuthFailure", "AWS was not able to validate the provided access credentials"),
        }
    }
}

/// Fault `fault` on calls of `action` whose form body contains `body_contains`,
/// after letting `skip` of them through, `times` times (u32::MAX: always).
#[derive(Debug, Clone)]
pub struct Rule {
    pub action: String,
    pub body_contains: Option<String>,
    pub skip: u32,
    pub times: u32,
    pub fault: Fault,
    matched: u32,
}

impl Rule {
    pub fn new(action: &str, fault: Fault, times: u32) -> Rule {
        Rule {
            action: action.into(),
            body_contains: None,
            skip: 0,
            times,
            fault,
            matched: 0,
        }
    }
    pub fn when_body_contains(mut self, s: &str) -> Rule {
        self.body_contains = Some(s.into());
        self
    }
}

/// One request the proxy saw.
#[derive(Debug, Clone)]
pub struct Call {
    pub action: String,
    /// Form parameters, URL-decoded.
    pub params: BTreeMap<String, String>,
    pub body: String,
    pub fault: Option<Fault>,
    /// The request's Authorization header (SigV4: `... Credential=AKID/...`).
    pub authorization: Option<String>,
}

struct ProxyState {
    upstream: SocketAddr,
    rules: Mutex<Vec<Rule>>,
    calls: Mutex<Vec<Call>>,
    /// Instance ids left out of every DescribeInstances answer (EC2's eventual
    /// consistency right after a launch, as another process sees it).
    hidden: Mutex<Vec<String>>,
    /// A wait before forwarding calls of an action (to make calls overlap).
    delays: Mutex<BTreeMap<String, Duration>>,
    /// Per action: calls in flight now, and the most ever at once.
    in_flight: Mutex<BTreeMap<String, (usize, usize)>>,
}

/// A call counted in flight until dropped.
struct InFlight<'a>(&'a ProxyState, String);

impl<'a> InFlight<'a> {
    fn enter(st: &'a ProxyState, action: &str) -> Self {
        let mut m = st.in_flight.lock().expect("in flight");
        let e = m.entry(action.to_string()).or_default();
        e.0 += 1;
        e.1 = e.1.max(e.0);
        InFlight(st, action.to_string())
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(e) = self.0.in_flight.lock().expect("in flight").get_mut(&self.1) {
            e.0 -= 1;
        }
    }
}

/// A loopback HTTP/1.1 proxy in front of moto that injects EC2 errors and records calls.
pub struct FaultProxy {
    pub addr: SocketAddr,
    state: Arc<ProxyState>,
    task: tokio::task::JoinHandle<()>,
}

fn url_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'+', _) => out.push(b' '),
            (b'%', Some(b)) => {
                out.push(b);
                i += 2;
            }
            (b, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn parse_form(body: &str) -> BTreeMap<String, String> {
    body.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (url_decode(k), url_decode(v))
        })
        .collect()
}

impl FaultProxy {
    pub async fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let state = Arc::new(ProxyState {
            upstream,
            rules: Mutex::new(Vec::new()),
            calls: Mutex::new(Vec::new()),
            hidden: Mutex::new(Vec::new()),
            delays: Mutex::new(BTreeMap::new()),
            in_flight: Mutex::new(BTreeMap::new()),
        });
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let st = st.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| handle(st.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        FaultProxy { addr, state, task }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn add_rule(&self, rule: Rule) {
        self.state.rules.lock().expect("rules").push(rule);
    }

    /// Leave `instance_id` out of DescribeInstances answers from now on.
    pub fn hide_instance(&self, instance_id: &str) {
        self.state
            .hidden
            .lock()
            .expect("hidden")
            .push(instance_id.to_string());
    }

    /// Hold every later call of `action` for `delay` before answering it.
    pub fn set_delay(&self, action: &str, delay: Duration) {
        let mut delays = self.state.delays.lock().expect("delays");
        delays.insert(action.to_string(), delay);
    }

    /// The most calls of `action` the proxy has had in flight at once.
    pub fn most_in_flight(&self, action: &str) -> usize {
        let m = self.state.in_flight.lock().expect("in flight");
        m.get(action).map_or(0, |e| e.1)
    }

    pub fn unhide_all(&self) {
        self.state.hidden.lock().expect("hidden").clear();
    }

    pub fn clear_rules(&self) {
        self.state.rules.lock().expect("rules").clear();
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.calls.lock().expect("calls").clone()
    }

    pub fn reset_calls(&self) {
        self.state.calls.lock().expect("calls").clear();
    }

    /// Calls per action (faulted ones included).
    pub fn counts(&self) -> BTreeMap<String, u32> {
        let mut m = BTreeMap::new();
        for c in self.calls() {
            *m.entry(c.action).or_insert(0) += 1;
        }
        m
    }

    pub fn count(&self, action: &str) -> usize {
        self.calls().iter().filter(|c| c.action == action).count()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn handle(
    st: Arc<ProxyState>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes();
    let text = String::from_utf8_lossy(&body).into_owned();
    let params = parse_form(&text);
    let action = params.get("Action").cloned().unwrap_or_default();
    let _in_flight = InFlight::enter(&st, &action);
    let delay = st.delays.lock().expect("delays").get(&action).copied();
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    let fault = {
        let mut rules = st.rules.lock().expect("rules");
        let mut hit = None;
        for r in rules.iter_mut() {
            if r.action == action
                && r.body_contains
                    .as_ref()
                    .is_none_or(|s| text.contains(s.as_str()))
            {
                r.matched += 1;
                if r.matched > r.skip && r.matched - r.skip <= r.times {
                    hit = Some(r.fault);
                    break;
                }
            }
        }
        hit
    };
    st.calls.lock().expect("calls").push(Call {
        action: action.clone(),
        params,
        body: text,
        fault,
        authorization: parts
            .headers
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
    });
    if let Some(f) = fault {
        let (status, code, message) = f.response();
        let xml = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors><RequestID>gpushare-fault-proxy</RequestID></Response>"
        );
        return Ok(Response::builder()
            .status(status)
            .header("content-type", "text/xml;charset=UTF-8")
            .body(Full::new(Bytes::from(xml)))
            .expect("response"));
    }
    // Forward to moto on loopback.
    let stream = match tokio::net::TcpStream::connect(st.upstream).await {
        Ok(s) => s,
        Err(e) => {
            return Ok(Response::builder()
                .status(502)
                .body(Full::new(Bytes::from(format!("proxy: {e}"))))
                .expect("response"))
        }
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let mut up = Request::builder().method(parts.method).uri(parts.uri);
    for (k, v) in parts.headers.iter() {
        up = up.header(k, v);
    }
    let resp = sender
        .send_request(up.body(Full::new(body)).expect("request"))
        .await?;
    let (rparts, rbody) = resp.into_parts();
    let mut rbody = rbody.collect().await?.to_bytes();
    let hidden = st.hidden.lock().expect("hidden").clone();
    if action == "DescribeInstances" && !hidden.is_empty() {
        let text = String::from_utf8_lossy(&rbody).into_owned();
        rbody = Bytes::from(without_reservations_of(&text, &hidden));
    }
    let mut out = Response::builder().status(rparts.status);
    for (k, v) in rparts.headers.iter() {
        if k != hyper::header::TRANSFER_ENCODING
            && k != hyper::header::CONNECTION
            && k != hyper::header::CONTENT_LENGTH
        {
            out = out.header(k, v);
        }
    }
    Ok(out.body(Full::new(rbody)).expect("response"))
}

/// A DescribeInstances answer without the reservations (top-level `<item>`s of
/// `<reservationSet>`) holding one of `instance_ids`.
pub fn without_reservations_of(xml: &str, instance_ids: &[String]) -> String {
    let (Some(open), Some(close)) = (xml.find("<reservationSet>"), xml.rfind("</reservationSet>"))
    else {
        return xml.to_string();
    };
    let start = open + "<reservationSet>".len();
    let inner = &xml[start..close];
    let mut kept = String::new();
    let (mut depth, mut item_start, mut i) = (0usize, 0usize, 0usize);
    while i < inner.len() {
        let rest = &inner[i..];
        if rest.starts_with("<item>") {
            if depth == 0 {
                item_start = i;
            }
            depth += 1;
            i += "<item>".len();
        } else if rest.starts_with("</item>") {
            depth = depth.saturating_sub(1);
            i += "</item>".len();
            if depth == 0 {
                let item = &inner[item_start..i];
                let hide = instance_ids
                    .iter()
                    .any(|id| item.contains(&format!("<instanceId>{id}</instanceId>")));
                if !hide {
                    kept.push_str(item);
                }
            }
        } else {
            i += rest.chars().next().map_or(1, char::len_utf8);
        }
    }
    format!("{}{kept}{}", &xml[..start], &xml[close..])
}

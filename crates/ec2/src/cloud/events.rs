//! Scheduled instance events (DescribeInstanceStatus) as host notices: what the
//! controller reads for a host whose agent is silent (an agent reads its own from
//! the instance metadata).

use crate::api::InstanceStatus;
use gpushare_core::model::HostNotice;
use std::collections::BTreeMap;

/// The most instance ids one DescribeInstanceStatus names.
pub(super) const IDS_PER_CALL: usize = 100;

/// Each instance's earliest event that is neither completed nor canceled.
pub(super) fn notices(statuses: Vec<InstanceStatus>) -> BTreeMap<String, HostNotice> {
    let mut out: BTreeMap<String, HostNotice> = BTreeMap::new();
    for s in statuses {
        let Some(id) = s.instance_id else {
            continue;
        };
        for e in s.events_set {
            let past =
                e.description.starts_with("[Completed]") || e.description.starts_with("[Canceled]");
            let Some(at) = e.not_before.filter(|_| !past) else {
                continue;
            };
            // ISO 8601 times of one format compare as text.
            if out.get(&id).is_some_and(|n| n.at <= at) {
                continue;
            }
            let notice = HostNotice::scheduled(at, e.code, &e.description, "ec2");
            out.insert(id.clone(), notice);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer as EC2 documents it (DescribeInstanceStatus, "Describe an instance
    /// with a scheduled event"), with a completed event added: moto lists statuses
    /// but no events, so the decoding is tested on this recorded shape.
    const ANSWER: &str = r#"<DescribeInstanceStatusResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
    <requestId>3be1508e-c444-4fef-89cc-0b1223c4f02fEXAMPLE</requestId>
    <instanceStatusSet>
        <item>
            <instanceId>i-1234567890abcdef0</instanceId>
            <availabilityZone>us-east-1d</availabilityZone>
            <eventsSet>
                <item>
                    <instanceEventId>instance-event-0d59937288b749b32</instanceEventId>
                    <code>instance-retirement</code>
                    <description>The instance is running on degraded hardware</description>
                    <notBefore>2026-12-09T09:00:00.000Z</notBefore>
                </item>
                <item>
                    <instanceEventId>instance-event-1</instanceEventId>
                    <code>system-reboot</code>
                    <description>[Completed] scheduled reboot</description>
                    <notBefore>2026-12-01T09:00:00.000Z</notBefore>
                </item>
            </eventsSet>
            <instanceState><code>16</code><name>running</name></instanceState>
        </item>
        <item>
            <instanceId>i-0598c7d356eba48d7</instanceId>
            <availabilityZone>us-east-1d</availabilityZone>
            <instanceState><code>16</code><name>running</name></instanceState>
        </item>
    </instanceStatusSet>
</DescribeInstanceStatusResponse>"#;

    #[test]
    fn an_open_scheduled_event_is_its_instances_notice() {
        let answer: crate::api::model::DescribeInstanceStatusAnswer =
            crate::api::xml::decode("DescribeInstanceStatus", ANSWER).expect("decoded");
        let n = notices(answer.instance_status_set);
        assert_eq!(n.len(), 1, "{n:?}");
        let got = &n["i-1234567890abcdef0"];
        assert_eq!(got.at, "2026-12-09T09:00:00.000Z");
        assert_eq!(
            got.to_string(),
            "scheduled instance event at 2026-12-09T09:00:00.000Z (instance-retirement: The instance is running on degraded hardware; from ec2)"
        );
    }
}

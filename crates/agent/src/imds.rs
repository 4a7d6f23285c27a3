//! EC2's notices that it ends or disturbs this host, read from the instance metadata
//! service (IMDSv2) every pass: a Spot interruption (`spot/instance-action`, two
//! minutes ahead) and scheduled events (`events/maintenance/scheduled`: retirement,
//! reboots, maintenance). The agent reports a notice in its host's health; the
//! planner drains the host at once and starts its tasks elsewhere.
//!
//! A small HTTP/1.1 client over one TCP connection per request: IMDS speaks plain
//! HTTP on a link-local address, with a session token (`PUT /latest/api/token`).

use gpushare_core::model::{HostNotice, NoticeKind};
use serde::Deserialize;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// EC2's instance metadata service.
pub const DEFAULT_IMDS_URL: &str = "http://169.254.169.254";
/// The most of an answer read (IMDS answers are a few hundred bytes).
const MAX_ANSWER: u64 = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ImdsError {
    #[error("the instance metadata URL {url:?} is not http://HOST[:PORT]")]
    Url { url: String },
    #[error("{method} {url}{path}")]
    Io {
        method: &'static str,
        url: String,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{method} {url}{path} took more than {seconds} s")]
    Timeout {
        method: &'static str,
        url: String,
        path: String,
        seconds: u64,
    },
    #[error("{method} {url}{path} answered {status}: {excerpt}")]
    Status {
        method: &'static str,
        url: String,
        path: String,
        status: u16,
        excerpt: String,
    },
    #[error("{method} {url}{path} sent an answer that is not HTTP/1.x")]
    Malformed {
        method: &'static str,
        url: String,
        path: String,
    },
    #[error("cannot read {path}: {reason}")]
    Decode { path: String, reason: String },
}

/// The instance metadata service of this host.
#[derive(Debug, Clone)]
pub struct ImdsWatch {
    /// `http://HOST[:PORT]` (no trailing slash).
    pub url: String,
    /// The most one request may take.
    pub timeout: Duration,
}

/// One HTTP answer: its status and body.
struct Answer {
    status: u16,
    body: String,
}

/// `spot/instance-action`'s document.
#[derive(Deserialize)]
struct InstanceAction {
    action: String,
    time: String,
}

/// One entry of `events/maintenance/scheduled`.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ScheduledEvent {
    code: String,
    #[serde(default)]
    description: String,
    not_before: String,
    #[serde(default)]
    state: String,
}

impl ImdsWatch {
    pub fn new(url: &str) -> ImdsWatch {
        ImdsWatch {
            url: url.trim_end_matches('/').to_string(),
            timeout: Duration::from_secs(2),
        }
    }

    /// EC2's notice for this host, if any: a Spot interruption first, else the
    /// earliest active scheduled event.
    pub async fn notice(&self) -> Result<Option<HostNotice>, ImdsError> {
        let token = self
            .request(
                "PUT",
                "/latest/api/token",
                "X-aws-ec2-metadata-token-ttl-seconds: 300",
            )
            .await
            .and_then(|a| self.ok("PUT", "/latest/api/token", a))?;
        let auth = format!("X-aws-ec2-metadata-token: {}", token.trim());
        let path = "/latest/meta-data/spot/instance-action";
        let spot = self.request("GET", path, &auth).await?;
        if spot.status != 404 {
            return spot_notice(&self.ok("GET", path, spot)?).map(Some);
        }
        let path = "/latest/meta-data/events/maintenance/scheduled";
        let events = self.request("GET", path, &auth).await?;
        if events.status == 404 {
            return Ok(None);
        }
        scheduled_notice(&self.ok("GET", path, events)?)
    }

    /// The body of a 200 answer; any other status is an error.
    fn ok(&self, method: &'static str, path: &str, a: Answer) -> Result<String, ImdsError> {
        if a.status == 200 {
            return Ok(a.body);
        }
        Err(ImdsError::Status {
            method,
            url: self.url.clone(),
            path: path.to_string(),
            status: a.status,
            excerpt: a.body.chars().take(200).collect(),
        })
    }

    /// One request with `header`, within the timeout.
    async fn request(
        &self,
        method: &'static str,
        path: &str,
        header: &str,
    ) -> Result<Answer, ImdsError> {
        let seconds = self.timeout.as_secs().max(1);
        match tokio::time::timeout(self.timeout, self.exchange(method, path, header)).await {
            Ok(r) => r,
            Err(_) => Err(ImdsError::Timeout {
                method,
                url: self.url.clone(),
                path: path.to_string(),
                seconds,
            }),
        }
    }

    async fn exchange(
        &self,
        method: &'static str,
        path: &str,
        header: &str,
    ) -> Result<Answer, ImdsError> {
        let authority = self
            .url
            .strip_prefix("http://")
            .filter(|a| !a.is_empty() && !a.contains('/'))
            .ok_or_else(|| ImdsError::Url {
                url: self.url.clone(),
            })?;
        let io = |source| ImdsError::Io {
            method,
            url: self.url.clone(),
            path: path.to_string(),
            source,
        };
        let addr = if authority.contains(':') {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        let mut conn = TcpStream::connect(addr).await.map_err(io)?;
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {authority}\r\n{header}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        conn.write_all(req.as_bytes()).await.map_err(io)?;
        let mut raw = Vec::new();
        conn.take(MAX_ANSWER)
            .read_to_end(&mut raw)
            .await
            .map_err(io)?;
        parse_answer(&raw).ok_or_else(|| ImdsError::Malformed {
            method,
            url: self.url.clone(),
            path: path.to_string(),
        })
    }
}

/// An HTTP/1.x answer read to its end (`Connection: close`): the status and the
/// body (as long as its Content-Length says, when it says).
fn parse_answer(raw: &[u8]) -> Option<Answer> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut lines = head.lines();
    let status = lines
        .next()?
        .strip_prefix("HTTP/1.")?
        .split(' ')
        .nth(1)?
        .parse()
        .ok()?;
    let length = lines.find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())?
    });
    let body = match length {
        Some(n) => body.get(..n.min(body.len())).unwrap_or(body),
        None => body,
    };
    Some(Answer {
        status,
        body: body.to_string(),
    })
}

/// The notice of a `spot/instance-action` document
/// (`{"action": "terminate", "time": "2017-09-18T08:22:00Z"}`).
fn spot_notice(body: &str) -> Result<HostNotice, ImdsError> {
    let a: InstanceAction = serde_json::from_str(body).map_err(|e| ImdsError::Decode {
        path: "spot/instance-action".into(),
        reason: e.to_string(),
    })?;
    Ok(HostNotice {
        kind: NoticeKind::SpotInterruption,
        at: a.time,
        detail: Some(a.action),
        source: "imds".into(),
    })
}

/// The earliest active event of an `events/maintenance/scheduled` document (a list
/// of `{"Code", "Description", "NotBefore": "21 Jan 2019 09:00:43 GMT", "State"}`);
/// completed and canceled events are past.
fn scheduled_notice(body: &str) -> Result<Option<HostNotice>, ImdsError> {
    let decode = |reason: String| ImdsError::Decode {
        path: "events/maintenance/scheduled".into(),
        reason,
    };
    let events: Vec<ScheduledEvent> =
        serde_json::from_str(body).map_err(|e| decode(e.to_string()))?;
    let mut best: Option<(jiff::Timestamp, HostNotice)> = None;
    for e in events {
        if !(e.state.is_empty() || e.state.eq_ignore_ascii_case("active")) {
            continue;
        }
        let at = jiff::civil::DateTime::strptime("%d %b %Y %H:%M:%S GMT", &e.not_before)
            .and_then(|t| t.to_zoned(jiff::tz::TimeZone::UTC))
            .map_err(|err| decode(format!("NotBefore {:?}: {err}", e.not_before)))?
            .timestamp();
        if best.as_ref().is_some_and(|(t, _)| *t <= at) {
            continue;
        }
        let when = at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        let notice = HostNotice::scheduled(when, e.code, &e.description, "imds");
        best = Some((at, notice));
    }
    Ok(best.map(|(_, n)| n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spot_action_is_a_notice_at_its_time() {
        let n = spot_notice(r#"{"action": "terminate", "time": "2017-09-18T08:22:00Z"}"#)
            .expect("notice");
        assert_eq!(n.kind, NoticeKind::SpotInterruption);
        assert_eq!(n.at, "2017-09-18T08:22:00Z");
        assert_eq!(
            n.to_string(),
            "Spot interruption notice at 2017-09-18T08:22:00Z (terminate; from imds)"
        );
        assert!(spot_notice("{}").is_err());
    }

    #[test]
    fn the_earliest_active_scheduled_event_is_the_notice() {
        let body = r#"[
          {"NotBefore": "21 Jan 2019 09:00:43 GMT", "Code": "system-reboot", "Description": "scheduled reboot",
           "EventId": "instance-event-0d59937288b749b32", "NotAfter": "21 Jan 2019 09:17:23 GMT", "State": "completed"},
          {"NotBefore": "30 Jan 2019 10:00:00 GMT", "Code": "instance-retirement", "Description": "degraded hardware",
           "EventId": "instance-event-1", "State": "active"},
          {"NotBefore": "28 Jan 2019 09:30:00 GMT", "Code": "system-maintenance", "Description": "",
           "EventId": "instance-event-2", "State": "active"}
        ]"#;
        let n = scheduled_notice(body).expect("decoded").expect("a notice");
        assert_eq!(n.kind, NoticeKind::ScheduledEvent);
        assert_eq!(n.at, "2019-01-28T09:30:00Z");
        assert_eq!(n.detail.as_deref(), Some("system-maintenance"));
        assert_eq!(scheduled_notice("[]").expect("decoded"), None);
        let bad = r#"[{"NotBefore": "soon", "Code": "system-reboot", "State": "active"}]"#;
        let err = scheduled_notice(bad).expect_err("a bad date");
        assert!(err.to_string().contains("NotBefore \"soon\""), "{err}");
    }

    #[test]
    fn answers_are_read_to_their_length() {
        let a = parse_answer(b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nabcdef")
            .expect("parsed");
        assert_eq!((a.status, a.body.as_str()), (404, "abc"));
        assert!(parse_answer(b"SSH-2.0-OpenSSH\r\n\r\n").is_none());
    }
}

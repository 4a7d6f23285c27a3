//! Builders and readers on etcd's own messages (requests, compares, transactions,
//! answers): the shapes the store code writes its calls in.

use crate::client::proto::authpb::{permission::Type as PermissionType, Permission};
use crate::client::proto::etcdserverpb::{self as pb, compare::CompareResult as CompareOp};
use crate::client::proto::etcdserverpb::{
    Compare, DeleteRangeRequest, PutRequest, RangeRequest, RangeResponse, RequestOp, TxnRequest,
    TxnResponse,
};
use crate::client::proto::mvccpb::{event::EventType, Event};

impl Permission {
    /// `kind` on `key`, or with `prefix` on every key starting with it.
    pub fn new(kind: PermissionType, key: impl Into<Vec<u8>>, prefix: bool) -> Permission {
        let key = key.into();
        Permission {
            perm_type: kind as i32,
            range_end: if prefix { prefix_end(&key) } else { Vec::new() },
            key,
        }
    }
}

/// The first key after every key starting with `prefix` (the `range_end` of a prefix).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

impl RangeRequest {
    /// Read one key (the latest revision).
    pub fn new(key: impl Into<Vec<u8>>) -> RangeRequest {
        RangeRequest {
            key: key.into(),
            ..RangeRequest::default()
        }
    }

    /// Every key starting with the key instead.
    pub fn prefix(mut self) -> Self {
        self.range_end = prefix_end(&self.key);
        self
    }

    /// Every key from the key up to `end` (exclusive).
    pub fn until(mut self, end: Vec<u8>) -> Self {
        self.range_end = end;
        self
    }

    pub fn limit(mut self, n: i64) -> Self {
        self.limit = n;
        self
    }

    /// Read at `revision` (0: the latest).
    pub fn at(mut self, revision: i64) -> Self {
        self.revision = revision;
        self
    }

    pub fn count_only(mut self) -> Self {
        self.count_only = true;
        self
    }

    pub fn keys_only(mut self) -> Self {
        self.keys_only = true;
        self
    }
}

impl RangeResponse {
    /// The revision the read was served at.
    pub fn revision(&self) -> i64 {
        self.header.as_ref().map_or(0, |h| h.revision)
    }
}

impl PutRequest {
    pub fn new(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> PutRequest {
        PutRequest {
            key: key.into(),
            value: value.into(),
            ..PutRequest::default()
        }
    }

    /// Under lease `id`: the key goes when the lease does.
    pub fn lease(mut self, id: i64) -> Self {
        self.lease = id;
        self
    }

    /// Answer with the value it replaced.
    pub fn prev_kv(mut self) -> Self {
        self.prev_kv = true;
        self
    }
}

impl DeleteRangeRequest {
    pub fn new(key: impl Into<Vec<u8>>) -> DeleteRangeRequest {
        DeleteRangeRequest {
            key: key.into(),
            ..DeleteRangeRequest::default()
        }
    }

    /// Every key starting with the key instead.
    pub fn prefix(mut self) -> Self {
        self.range_end = prefix_end(&self.key);
        self
    }
}

impl From<RangeRequest> for RequestOp {
    fn from(r: RangeRequest) -> Self {
        RequestOp {
            request: Some(pb::request_op::Request::RequestRange(r)),
        }
    }
}

impl From<PutRequest> for RequestOp {
    fn from(r: PutRequest) -> Self {
        RequestOp {
            request: Some(pb::request_op::Request::RequestPut(r)),
        }
    }
}

impl From<DeleteRangeRequest> for RequestOp {
    fn from(r: DeleteRangeRequest) -> Self {
        RequestOp {
            request: Some(pb::request_op::Request::RequestDeleteRange(r)),
        }
    }
}

impl Compare {
    fn on(
        key: impl Into<Vec<u8>>,
        op: CompareOp,
        target: pb::compare::CompareTarget,
        value: pb::compare::TargetUnion,
    ) -> Compare {
        Compare {
            result: op as i32,
            target: target as i32,
            key: key.into(),
            target_union: Some(value),
            range_end: Vec::new(),
        }
    }

    /// The key's version (changes since created; 0: absent).
    pub fn version(key: impl Into<Vec<u8>>, op: CompareOp, v: i64) -> Compare {
        use pb::compare::{CompareTarget, TargetUnion};
        Compare::on(key, op, CompareTarget::Version, TargetUnion::Version(v))
    }

    /// The revision the key was created at (0: absent).
    pub fn create_revision(key: impl Into<Vec<u8>>, op: CompareOp, rev: i64) -> Compare {
        use pb::compare::{CompareTarget, TargetUnion};
        Compare::on(
            key,
            op,
            CompareTarget::Create,
            TargetUnion::CreateRevision(rev),
        )
    }

    /// The revision of the key's last change.
    pub fn mod_revision(key: impl Into<Vec<u8>>, op: CompareOp, rev: i64) -> Compare {
        use pb::compare::{CompareTarget, TargetUnion};
        Compare::on(key, op, CompareTarget::Mod, TargetUnion::ModRevision(rev))
    }

    /// The lease the key is under.
    pub fn lease(key: impl Into<Vec<u8>>, op: CompareOp, id: i64) -> Compare {
        use pb::compare::{CompareTarget, TargetUnion};
        Compare::on(key, op, CompareTarget::Lease, TargetUnion::Lease(id))
    }

    /// Compare every key from the key up to `end` (exclusive).
    pub fn with_range(mut self, end: Vec<u8>) -> Self {
        self.range_end = end;
        self
    }
}

impl TxnRequest {
    /// A transaction guarded by `compares` (none: always succeeds).
    pub fn when(compares: Vec<Compare>) -> TxnRequest {
        TxnRequest {
            compare: compares,
            ..TxnRequest::default()
        }
    }

    /// What to do when every compare holds.
    pub fn and_then(mut self, ops: Vec<RequestOp>) -> Self {
        self.success = ops;
        self
    }

    /// What to do otherwise.
    pub fn or_else(mut self, ops: Vec<RequestOp>) -> Self {
        self.failure = ops;
        self
    }
}

impl TxnResponse {
    /// The revision after the transaction.
    pub fn revision(&self) -> i64 {
        self.header.as_ref().map_or(0, |h| h.revision)
    }

    /// The answers of the transaction's reads, in order.
    pub fn ranges(&self) -> impl Iterator<Item = &RangeResponse> {
        self.responses.iter().filter_map(|r| match &r.response {
            Some(pb::response_op::Response::ResponseRange(g)) => Some(g),
            _ => None,
        })
    }
}

impl Event {
    pub fn is_delete(&self) -> bool {
        self.r#type == EventType::Delete as i32
    }
}

use super::*;
use prost::Message;

#[test]
fn prefix_ends() {
    assert_eq!(prefix_end(b"a/"), b"a0".to_vec());
    assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
    assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
}

/// The bytes etcd's protocol defines for a guarded put (field numbers and wire
/// types: TxnRequest.compare = 1, success = 2; Compare.result = 1, target = 2,
/// key = 3, version = 4; RequestOp.request_put = 2; PutRequest.key = 1,
/// value = 2, lease = 3).
#[test]
fn a_transaction_encodes_as_etcd_reads_it() {
    let txn = TxnRequest::when(vec![Compare::version("k", CompareOp::Equal, 0)])
        .and_then(vec![PutRequest::new("k", "v").lease(5).into()]);
    let compare = [0x1a, 1, b'k', 0x20, 0]; // key "k", version 0 (result/target 0: omitted)
    let put = [0x0a, 1, b'k', 0x12, 1, b'v', 0x18, 5];
    let mut want = vec![0x0a, compare.len() as u8];
    want.extend(compare);
    want.extend([0x12, put.len() as u8 + 2, 0x12, put.len() as u8]);
    want.extend(put);
    assert_eq!(txn.encode_to_vec(), want);
}

#[test]
fn a_watch_answer_decodes_from_etcds_bytes() {
    // WatchResponse{watch_id: 1 (field 2), compact_revision: 7 (field 5),
    // events (field 11): [Event{type: DELETE (1), kv: {key "k", mod_revision 9}}]}
    let kv = [0x0a, 1, b'k', 0x18, 9];
    let mut event = vec![0x08, 1, 0x12, kv.len() as u8];
    event.extend(kv);
    let mut bytes = vec![0x10, 1, 0x28, 7, 0x5a, event.len() as u8];
    bytes.extend(&event);
    let w = WatchResponse::decode(bytes.as_slice()).expect("decodes");
    assert_eq!((w.watch_id, w.compact_revision), (1, 7));
    assert!(w.events[0].is_delete());
    let kv = w.events[0].kv.as_ref().expect("kv");
    assert_eq!((kv.key.as_slice(), kv.mod_revision), (&b"k"[..], 9));
}

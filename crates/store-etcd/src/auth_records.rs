//! The controller's records (`<prefix>/record/<name>`: the agent API's cluster CA and
//! join tokens, see docs/agent.md), outside `state/` so that no agent role reads
//! them. A record's version is its key's mod revision; a write compares it.

use crate::client::{Compare, CompareOp, PutRequest, RangeRequest, TxnRequest};
use crate::EtcdStore;
use gpushare_engine::store::StoreError;

/// Where the records live under the prefix.
const RECORDS: &str = "record/";

impl EtcdStore {
    fn record_rel(name: &str) -> Result<String, StoreError> {
        if !gpushare_core::ids::valid_id(name) {
            return Err(StoreError::InvalidKey {
                what: "record name",
                key: name.to_string(),
            });
        }
        Ok(format!("{RECORDS}{name}"))
    }

    /// [`Store::get_record`](gpushare_engine::store::Store::get_record).
    pub(crate) async fn get_auth_record(
        &self,
        name: &str,
    ) -> Result<Option<gpushare_engine::store::Record>, StoreError> {
        let rel = Self::record_rel(name)?;
        Ok(self
            .get_one(&rel)
            .await?
            .map(|kv| gpushare_engine::store::Record {
                value: String::from_utf8_lossy(&kv.value).into_owned(),
                version: u64::try_from(kv.mod_revision).unwrap_or(0),
            }))
    }

    /// [`Store::put_record`](gpushare_engine::store::Store::put_record): one transaction comparing
    /// the key's mod revision (0 for a key that does not exist).
    pub(crate) async fn put_auth_record(
        &self,
        name: &str,
        value: &str,
        expected: u64,
    ) -> Result<u64, StoreError> {
        let rel = Self::record_rel(name)?;
        let key = self.key(&rel);
        let txn = TxnRequest::when(vec![Compare::mod_revision(
            key.clone(),
            CompareOp::Equal,
            i64::try_from(expected).unwrap_or(i64::MAX),
        )])
        .and_then(vec![PutRequest::new(
            key.clone(),
            value.as_bytes().to_vec(),
        )
        .into()])
        .or_else(vec![RangeRequest::new(key).into()]);
        let resp = self.txn(|| format!("writing {rel}"), txn).await?;
        if resp.succeeded {
            let (puts, deletes, bytes) =
                self.measure("", &[(rel.as_str(), Some(value.as_bytes()))]);
            self.tally(puts, deletes, bytes);
            return Ok(resp
                .header
                .as_ref()
                .map_or(0, |h| u64::try_from(h.revision).unwrap_or(0)));
        }
        let found = resp
            .ranges()
            .find_map(|g| g.kvs.first().map(|kv| kv.mod_revision))
            .unwrap_or(0);
        Err(StoreError::RecordConflict {
            name: name.to_string(),
            expected,
            found: u64::try_from(found).unwrap_or(0),
        })
    }
}

//! The controller's records (`records/<name>.json`, 0600 like every file of the
//! store): the agent API's cluster CA and join tokens, written compare-and-swap on
//! their version under the store's commit lock.

use super::{io_err, read_json, write_json, FileStore, CAS_LOCK};
use crate::fsutil::{self, FileLock};
use crate::store::{Record, StoreError};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

const RECORDS: &str = "records";

/// The content of `records/<name>.json`.
#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    version: u64,
    value: String,
}

impl FileStore {
    fn record_path(&self, name: &str) -> Result<PathBuf, StoreError> {
        self.keyed_path(RECORDS, "record name", name)
    }

    pub(super) fn get_record_sync(&self, name: &str) -> Result<Option<Record>, StoreError> {
        let path = self.record_path(name)?;
        Ok(read_json::<Stored>(&path)?.map(|s| Record {
            value: s.value,
            version: s.version,
        }))
    }

    pub(super) fn put_record_sync(
        &self,
        name: &str,
        value: String,
        expected: u64,
    ) -> Result<u64, StoreError> {
        let path = self.record_path(name)?;
        let dir = self.dir.join(RECORDS);
        fsutil::create_private_dir(&dir).map_err(|source| io_err(&dir, source))?;
        let cas_path = self.dir.join(CAS_LOCK);
        let _cas = FileLock::exclusive(&cas_path).map_err(|source| io_err(&cas_path, source))?;
        let found = read_json::<Stored>(&path)?.map_or(0, |s| s.version);
        if found != expected {
            return Err(StoreError::RecordConflict {
                name: name.to_string(),
                expected,
                found,
            });
        }
        let version = found + 1;
        write_json(&path, &Stored { version, value })?;
        Ok(version)
    }
}

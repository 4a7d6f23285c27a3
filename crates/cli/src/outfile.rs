//! Writing a generated file (`import-ecs --write`, `evaluate --write`): into its
//! directory, created if missing; a file that exists only with `--force`.

use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("{0}: exists (pass --force to replace it)")]
    Exists(PathBuf),
    #[error("writing {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Write `text` to `path` in `dir` (created if missing); an existing file only with `force`.
pub fn write_new(dir: &Path, path: &Path, text: &str, force: bool) -> Result<(), WriteError> {
    let werr = |source| WriteError::Write {
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(werr)?;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true);
    if force {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    let mut f = match opts.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(WriteError::Exists(path.to_path_buf()))
        }
        Err(e) => return Err(werr(e)),
    };
    f.write_all(text.as_bytes()).map_err(werr)
}

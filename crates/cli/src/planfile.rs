//! Saved plans (`gpushare plan --out FILE`, then `gpushare apply FILE`).
//!
//! A saved plan is one JSON document: `format_version`, the configuration directory,
//! a hash of the configuration files it was made from, the desired state (apply needs
//! the pools to launch hosts) and the plan itself. Applying it is refused when the
//! configuration files changed or the live state moved on since (stale plan).

use anyhow::{bail, Context};
use gpushare_core::plan::Plan;
use gpushare_core::{Desired, FORMAT_VERSION};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavedPlan {
    pub format_version: String,
    /// Absolute path of the configuration directory the plan was made from.
    pub config_dir: PathBuf,
    /// Hex SHA-256 over the configuration files (names and contents) and the -var values.
    pub config_hash: String,
    /// The -var overrides the plan was made with.
    #[serde(default)]
    pub vars: Vec<(String, String)>,
    pub desired: Desired,
    pub plan: Plan,
}

/// The configuration files of `dir` (`*.hcl` and `*.tf`), sorted, as the loader reads them.
pub fn config_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in
        std::fs::read_dir(dir).with_context(|| format!("reading directory {}", dir.display()))?
    {
        let path = entry
            .with_context(|| format!("reading directory {}", dir.display()))?
            .path();
        if path.is_file() && path.extension().is_some_and(|e| e == "hcl" || e == "tf") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Hash of the configuration: each file's name (relative to `dir`) and bytes, in
/// order, then the variable overrides given on the command line.
pub fn config_hash(
    dir: &Path,
    files: &[PathBuf],
    vars: &[(String, String)],
) -> anyhow::Result<String> {
    let mut h = Sha256::new();
    let mut files: Vec<&PathBuf> = files.iter().collect();
    files.sort();
    for f in files {
        let name = f.strip_prefix(dir).unwrap_or(f);
        let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
        h.update(name.to_string_lossy().as_bytes());
        h.update([0]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    for (k, v) in vars {
        h.update(b"var\0");
        h.update(k.as_bytes());
        h.update([0]);
        h.update(v.as_bytes());
        h.update([0]);
    }
    Ok(hex::encode(h.finalize()))
}

pub fn save(path: &Path, saved: &SavedPlan) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(saved).context("serialising the plan")?;
    let tmp = path.with_extension("tmp-gpushare");
    std::fs::write(&tmp, text + "\n").with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

pub fn load(path: &Path) -> anyhow::Result<SavedPlan> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading plan file {}", path.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a saved plan (not JSON)", path.display()))?;
    match value.get("format_version").and_then(|v| v.as_str()) {
        Some(v) if v == FORMAT_VERSION => {}
        Some(v) => bail!(
            "{} has plan format_version {v}, this gpushare reads {FORMAT_VERSION}; make the plan again",
            path.display()
        ),
        None => bail!("{} is not a saved plan (no format_version)", path.display()),
    }
    serde_json::from_value(value)
        .with_context(|| format!("{} is not a valid saved plan", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_changes_with_content_names_and_vars() {
        let d = tempfile::tempdir().expect("tempdir");
        let a = d.path().join("a.hcl");
        std::fs::write(&a, "x = 1\n").expect("write");
        let files = vec![a.clone()];
        let h1 = config_hash(d.path(), &files, &[]).expect("hash");
        assert_eq!(
            h1,
            config_hash(d.path(), &files, &[]).expect("hash"),
            "deterministic"
        );
        let with_var = config_hash(d.path(), &files, &[("n".into(), "2".into())]).expect("hash");
        assert_ne!(h1, with_var);
        std::fs::write(&a, "x = 2\n").expect("write");
        assert_ne!(h1, config_hash(d.path(), &files, &[]).expect("hash"));
    }

    #[test]
    fn a_plan_file_of_another_format_is_refused() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join("p.json");
        std::fs::write(&p, r#"{"format_version":"0.1"}"#).expect("write");
        let err = load(&p).expect_err("refused");
        assert!(format!("{err:#}").contains("format_version 0.1"), "{err:#}");
        std::fs::write(&p, "garbage").expect("write");
        assert!(format!("{:#}", load(&p).expect_err("refused")).contains("not a saved plan"));
    }
}

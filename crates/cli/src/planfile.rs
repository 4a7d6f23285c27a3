//! Saved plans (`gpushare plan --out FILE`, then `gpushare apply FILE`).
//!
//! A saved plan is one JSON document: `format_version`, the configuration directory,
//! a hash of the configuration files it was made from, the desired state (apply needs
//! the pools to launch hosts) and the plan itself. Applying it is refused when the
//! configuration files changed or the live state moved on since (stale plan).
//!
//! A plan file is input like any other: `digest` (SHA-256 over the desired state and
//! the plan) tells an edited file from one gpushare wrote, and on load every
//! identifier is checked and the desired state validated as configuration is, so an
//! edited id such as `../../..` never reaches the state. The file is 0600 (it holds
//! the desired configuration, secrets included).

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
    /// The -var-file files the plan was made with (their contents are in `config_hash`).
    #[serde(default)]
    pub var_files: Vec<PathBuf>,
    pub desired: Desired,
    pub plan: Plan,
    /// Hex SHA-256 over `desired` and `plan` as JSON (filled by [`save`]).
    #[serde(default)]
    pub digest: String,
}

/// The digest of a saved plan's `desired` and `plan` values (canonical JSON: object
/// keys sorted, as `serde_json::Value` keeps them).
fn digest(desired: &serde_json::Value, plan: &serde_json::Value) -> String {
    let mut h = Sha256::new();
    for part in [desired, plan] {
        let bytes = serde_json::to_vec(part).unwrap_or_default();
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    hex::encode(h.finalize())
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
/// order (callers pass the variable files too), then the variable overrides given on
/// the command line.
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
    let mut value = serde_json::to_value(saved).context("serialising the plan")?;
    let d = digest(&value["desired"], &value["plan"]);
    value["digest"] = serde_json::Value::String(d);
    let text = serde_json::to_string_pretty(&value).context("serialising the plan")?;
    // Private (0600: the plan holds the desired configuration, secrets included),
    // through a fresh temporary file, so nothing planted at a fixed name is written through.
    gpushare_engine::fsutil::write_atomic(path, (text + "\n").as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

pub fn load(path: &Path) -> anyhow::Result<SavedPlan> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading plan file {}", path.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a saved plan (not JSON)", path.display()))?;
    match value.get("format_version").and_then(|v| v.as_str()) {
        Some(v) if v == FORMAT_VERSION => {}
        Some(v) => bail!(
            "{} has plan format_version {v}, this gpushare reads {FORMAT_VERSION} (whose launches carry everything the cloud needs: the pool's settings, image, subnet, zone and root device); make the plan again",
            path.display()
        ),
        None => bail!("{} is not a saved plan (no format_version)", path.display()),
    }
    let recorded = value.get("digest").and_then(|v| v.as_str()).unwrap_or("");
    if recorded != digest(&value["desired"], &value["plan"]) {
        bail!(
            "{} was edited after gpushare wrote it (its digest does not match its content); make the plan again with gpushare plan --out",
            path.display()
        );
    }
    let saved: SavedPlan = serde_json::from_value(value)
        .with_context(|| format!("{} is not a valid saved plan", path.display()))?;
    saved
        .plan
        .check_identifiers()
        .with_context(|| format!("{} is not a valid saved plan", path.display()))?;
    let problems: Vec<_> = gpushare_config::validate(&saved.desired)
        .into_iter()
        .filter(|d| d.is_error())
        .collect();
    if !problems.is_empty() {
        return Err(
            anyhow::Error::new(gpushare_config::Diagnostics(problems)).context(format!(
                "{} holds a configuration that does not validate",
                path.display()
            )),
        );
    }
    Ok(saved)
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
    fn an_edited_plan_file_is_refused_and_a_saved_one_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join("p.json");
        let saved = SavedPlan {
            format_version: FORMAT_VERSION.into(),
            config_dir: d.path().into(),
            config_hash: "x".into(),
            var_files: vec![],
            vars: vec![],
            desired: Desired::default(),
            plan: Plan {
                format_version: FORMAT_VERSION.into(),
                cluster: "c".into(),
                ..Plan::default()
            },
            digest: String::new(),
        };
        save(&p, &saved).expect("save");
        let mode = std::fs::metadata(&p).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let back = load(&p).expect("a file gpushare wrote loads");
        assert_eq!(back.plan, saved.plan);
        let text = std::fs::read_to_string(&p).expect("read");
        std::fs::write(&p, text.replace("\"cluster\": \"c\"", "\"cluster\": \"d\""))
            .expect("write");
        let err = format!("{:#}", load(&p).expect_err("edited"));
        assert!(err.contains("was edited"), "{err}");
        // An edit that also recomputes the digest still meets the identifier check.
        let mut bad = saved.clone();
        bad.plan.retirements.push(gpushare_core::plan::Retire {
            host_id: "../../..".into(),
            reason: "x".into(),
            if_empty: false,
        });
        save(&p, &bad).expect("save");
        let err = format!("{:#}", load(&p).expect_err("bad id"));
        assert!(
            err.contains("retirements[0].host_id") && err.contains("../../.."),
            "{err}"
        );
    }

    #[test]
    fn a_plan_file_of_another_format_is_refused() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join("p.json");
        std::fs::write(&p, r#"{"format_version":"0.1"}"#).expect("write");
        let err = load(&p).expect_err("refused");
        assert!(format!("{err:#}").contains("format_version 0.1"), "{err:#}");
        // A plan of the format before launches carried their pool settings (1.0) is
        // refused by its version, before its launches are read.
        std::fs::write(
            &p,
            r#"{"format_version":"1.0","plan":{"launches":[{"host":{"id":"h-1"}}]}}"#,
        )
        .expect("write");
        let err = format!("{:#}", load(&p).expect_err("refused"));
        assert!(
            err.contains("format_version 1.0")
                && err.contains(&format!("reads {FORMAT_VERSION}"))
                && err.contains("make the plan again"),
            "{err}"
        );
        assert_ne!(FORMAT_VERSION, "1.0");
        std::fs::write(&p, "garbage").expect("write");
        assert!(format!("{:#}", load(&p).expect_err("refused")).contains("not a saved plan"));
    }
}

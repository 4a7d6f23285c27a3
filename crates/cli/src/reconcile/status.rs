//! `gpushare status`: the last reconcile pass's status record.

use crate::cli::VarArgs;
use crate::setup;
use anyhow::Context;
use std::path::Path;

/// `gpushare status [DIR] [--json]`: the last reconcile pass's status record. The
/// store is the one DIR's configuration names, or (a directory without
/// configuration, as a git controller's) `DIR/.gpushare/`.
pub async fn status(dir: &Path, json: bool) -> anyhow::Result<u8> {
    let store_url = if crate::planfile::config_files(dir)?.is_empty() {
        let state = dir.join(gpushare_backends::STATE_DIR);
        if !state.is_dir() {
            anyhow::bail!(
                "{} holds neither a configuration nor a state directory ({})",
                dir.display(),
                gpushare_backends::STATE_DIR
            );
        }
        None
    } else {
        setup::load(dir, &VarArgs::default())?.settings.store
    };
    let (store, _) = gpushare_backends::open_store(store_url.as_deref(), dir).await?;
    let Some(s) = store.status().await.context("reading the status record")? else {
        if json {
            println!("null");
        } else {
            println!(
                "No reconcile pass has written a status to {} yet.",
                store.location()
            );
        }
        return Ok(0);
    };
    let leader = store.leader().await.context("reading the leader")?;
    if json {
        let mut v = serde_json::to_value(&s)?;
        if let (Some(l), Some(m)) = (&leader, v.as_object_mut()) {
            m.insert("leader".into(), serde_json::Value::String(l.clone()));
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    println!("pass {} by {}", s.pass, s.holder);
    if let Some(l) = &leader {
        println!("  leader:   {l}");
    }
    println!("  started:  {}", s.started_at);
    println!("  finished: {}", s.finished_at);
    println!("  source:   {}", s.source);
    if let Some(c) = &s.commit {
        println!("  commit:   {c}");
    }
    println!("  outcome:  {}", s.outcome.as_str().replace('_', " "));
    if let Some(summary) = &s.summary {
        println!("  plan:     {summary}");
    }
    println!("  drift corrections: {}", s.drift_corrections);
    if !s.health.is_empty() {
        println!("  health:");
        for line in &s.health {
            println!("    {line}");
        }
    }
    if !s.deployments.is_empty() {
        println!("  deployments:");
        for line in &s.deployments {
            println!("    {line}");
        }
    }
    if let Some(e) = &s.error {
        println!("  error:");
        for line in e.lines() {
            println!("    {line}");
        }
    }
    Ok(0)
}

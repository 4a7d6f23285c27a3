//! The argument groups several commands share (variables, the lock timeout, the
//! planner's overrides): a leaf module, so the commands that take them and the
//! command line that lists the commands do not import each other.

use clap::Args;
use gpushare_engine::reconcile::PlannerOverrides;
use std::path::PathBuf;

#[derive(Debug, Clone, Default, Args)]
pub struct VarArgs {
    /// Set a variable: -var name=value (repeatable; wins over every other source).
    #[arg(long = "var", short = 'v', value_name = "NAME=VALUE", value_parser = parse_var)]
    pub vars: Vec<(String, String)>,
    /// Read variables from a file: *.tfvars (HCL) or *.tfvars.json (repeatable, a later file wins).
    /// Precedence, highest first: -var, -var-file, *.auto.tfvars(.json) of the
    /// directory (lexical order, later wins), terraform.tfvars(.json), GPUSHARE_VAR_name, the default.
    #[arg(long = "var-file", value_name = "FILE")]
    pub var_files: Vec<PathBuf>,
}

/// Where a command that reads or edits the store finds it: the configuration
/// directory (`--dir`), its variables and how long to wait for the state lock.
#[derive(Debug, Clone, Default, Args)]
pub struct StoreArgs {
    /// The configuration directory (default: the current one).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    pub vars: VarArgs,
    #[command(flatten)]
    pub lock: LockArgs,
}

/// How long to wait for the state lock.
#[derive(Debug, Clone, Default, Args)]
pub struct LockArgs {
    /// Wait up to DUR for the state lock (e.g. 0s, 30s, 2m, 1h; default: the
    /// configuration's lock_timeout_seconds).
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub lock_timeout: Option<std::time::Duration>,
}

/// The planner flags: each one given overrides the `gpushare` block's setting for
/// this run (`consolidate`, `heartbeat_timeout_seconds`, `boot_grace_seconds`).
#[derive(Debug, Clone, Default, Args)]
pub struct PlannerArgs {
    /// Move running tasks to free hosts (at most --max-moves moves); overrides the
    /// settings' `consolidate`.
    #[arg(long)]
    pub consolidate: bool,
    /// At most this many moves a plan when consolidating [default: 10].
    #[arg(long, value_name = "N")]
    pub max_moves: Option<u32>,
    /// Seconds without an agent report after which a host counts as silent and is
    /// replaced (0 = never); overrides the settings' `heartbeat_timeout_seconds` (120).
    #[arg(long, value_name = "SECS")]
    pub heartbeat_timeout: Option<u64>,
    /// Seconds after launch within which a host's agent must first report, or the host
    /// counts as silent and is replaced (0 = never); overrides the settings'
    /// `boot_grace_seconds` (600).
    #[arg(long, value_name = "SECS")]
    pub boot_grace: Option<u64>,
}

impl PlannerArgs {
    /// What these flags override in the settings' planner options.
    pub fn overrides(&self) -> PlannerOverrides {
        PlannerOverrides {
            consolidate: self.consolidate.then_some(true),
            max_moves: self.max_moves,
            heartbeat_timeout_seconds: self.heartbeat_timeout,
            boot_grace_seconds: self.boot_grace,
        }
    }
}

/// `30s`, `2m`, `1h`, `500ms` (a unit is required, as in Terraform).
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration such as 30s, 2m or 1h"))?;
    let secs = |k: u64| n.checked_mul(k).map(std::time::Duration::from_secs);
    match unit {
        "ms" => Some(std::time::Duration::from_millis(n)),
        "s" => secs(1),
        "m" => secs(60),
        "h" => secs(3600),
        _ => None,
    }
    .ok_or_else(|| format!("{s:?} is not a duration such as 30s, 2m or 1h (units: ms, s, m, h)"))
}

fn parse_var(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not NAME=VALUE"))?;
    let k = k.trim();
    if k.is_empty() {
        return Err(format!("{s:?} has an empty variable name"));
    }
    Ok((k.to_string(), v.to_string()))
}

#[cfg(test)]
mod tests {
    use super::parse_duration;

    #[test]
    fn durations_take_terraform_units() {
        use std::time::Duration;
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        for bad in ["30", "s", "2d", "-1s", "1.5m", ""] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}

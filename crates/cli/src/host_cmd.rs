//! `gpushare host cordon|uncordon|drain|remove|replace HOST` (holds the next plan carries
//! out, docs/own-hosts.md) and `gpushare host setup` (a server of your own joining a
//! registered pool, [`crate::host_setup`]).

use crate::args::{LockArgs, VarArgs};
use crate::setup::open_for_edit;
use crate::state_cmd;
use anyhow::bail;
use gpushare_core::model::{Hold, StoreState};
use std::path::PathBuf;

#[derive(Debug, clap::Subcommand)]
pub enum HostCommand {
    /// Take no new tasks on HOST; nothing running moves.
    Cordon(HoldArgs),
    /// Let HOST take tasks again (ends a cordon or a drain).
    Uncordon(HoldArgs),
    /// Move HOST's tasks to other hosts (each started before the old one stops), then
    /// keep it cordoned. Carried out by the next apply or reconcile pass.
    Drain(HoldArgs),
    /// Drain HOST, then take it out of the fleet: a registered host is deregistered
    /// (its agent stops its tasks and the agent API refuses its certificate), a
    /// launched one terminated. Carried out by the next apply or reconcile pass.
    Remove(HoldArgs),
    /// Replace a launched HOST now: its tasks start on other hosts (a new one is
    /// launched when they need it), each before the old one stops, then HOST is
    /// terminated. The way to replace a silent host the pool's disruption budget
    /// (`unhealthy_threshold_percent`) holds back. Carried out by the next apply or
    /// reconcile pass.
    Replace(HoldArgs),
    /// On a server of your own: install the MPS control daemon's and the agent's
    /// systemd units (the ones the EC2 user data installs) and start the agent, which
    /// joins the registered pool its token is for.
    Setup(crate::host_setup::SetupArgs),
    /// Refuse every agent API certificate HOST was issued so far (a stolen one):
    /// its agent is told the host is removed and stops its tasks; its reports and
    /// renewals are refused. The host joins again with a new token.
    Revoke {
        host: String,
        dir: Option<PathBuf>,
        #[command(flatten)]
        vars: VarArgs,
    },
}

#[derive(Debug, clap::Args)]
pub struct HoldArgs {
    /// The host id (see `gpushare show`).
    pub host: String,
    /// Configuration directory.
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    pub vars: VarArgs,
    #[command(flatten)]
    pub lock: LockArgs,
}

/// Put `hold` (or none) on host `id` of `state`; the text of what was done.
pub fn set_hold(state: &mut StoreState, id: &str, hold: Option<Hold>) -> anyhow::Result<String> {
    let Some(h) = state.hosts.get_mut(id) else {
        let known: Vec<&str> = state.hosts.keys().map(String::as_str).collect();
        bail!(
            "no host {id:?} in the state (hosts: {})",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        );
    };
    let before = h.hold;
    h.hold = hold;
    let kind = if h.is_registered() {
        "registered host"
    } else {
        "host"
    };
    Ok(match (before, hold) {
        (a, b) if a == b => format!("{kind} {id} is already {}", b.map_or("in use", Hold::as_str)),
        (_, None) => format!("{kind} {id} takes tasks again"),
        (_, Some(Hold::Cordoned)) => format!("{kind} {id} is cordoned: it takes no new tasks; nothing moves"),
        (_, Some(Hold::Drain)) => format!("{kind} {id} is marked for draining: the next apply moves its tasks (start before stop); it then stays cordoned"),
        (_, Some(Hold::Remove)) => format!("{kind} {id} is marked for removal: the next apply moves its tasks (start before stop), then {}", if h.is_registered() { "deregisters it (its agent stops, its certificate is refused)" } else { "terminates it" }),
    })
}

/// Mark launched host `id` of `state` for replacement (a Remove hold, which the
/// planner carries out whatever the disruption budget: the operator asked); a
/// registered host is refused (gpushare cannot launch one of your servers).
pub fn mark_replaced(state: &mut StoreState, id: &str) -> anyhow::Result<String> {
    if state.hosts.get(id).is_some_and(|h| h.is_registered()) {
        bail!("host {id:?} is a registered host: gpushare cannot launch another of your servers; use `gpushare host remove` (its tasks move to the pool's other hosts)");
    }
    set_hold(state, id, Some(Hold::Remove))?;
    Ok(format!("host {id} is marked for replacement: the next apply starts its tasks on other hosts (launching one when they need it), each before the old one stops, then terminates it, whatever the pool's disruption budget"))
}

pub async fn run(command: HostCommand) -> anyhow::Result<u8> {
    let (args, hold, holder) = match command {
        HostCommand::Setup(a) => return crate::host_setup::run(&a).await,
        HostCommand::Revoke { host, dir, vars } => {
            return crate::agent_api_cmd::revoke_host(&host, dir, &vars).await
        }
        HostCommand::Cordon(a) => (a, Some(Hold::Cordoned), "gpushare host cordon"),
        HostCommand::Uncordon(a) => (a, None, "gpushare host uncordon"),
        HostCommand::Drain(a) => (a, Some(Hold::Drain), "gpushare host drain"),
        HostCommand::Remove(a) => (a, Some(Hold::Remove), "gpushare host remove"),
        HostCommand::Replace(a) => (a, Some(Hold::Remove), "gpushare host replace"),
    };
    let replace = holder == "gpushare host replace";
    let (b, timeout) = open_for_edit(args.dir, &args.vars, &args.lock).await?;
    let host = args.host;
    let said = state_cmd::edit(&b, holder, timeout, |s| {
        if replace {
            mark_replaced(s, &host)
        } else {
            set_hold(s, &host, hold)
        }
    })
    .await?;
    println!("{said}.");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_are_set_on_known_hosts_only() {
        let mut s = StoreState::default();
        let h: gpushare_core::model::Host = serde_json::from_value(serde_json::json!({
            "id": "gpu-1", "capacity_provider": "lab", "instance_type": "registered",
            "state": "running", "gpus": [], "cpu_units": 0, "memory_mib": 0, "launch_token": ""
        }))
        .expect("host");
        s.hosts.insert("gpu-1".into(), h);
        assert!(set_hold(&mut s, "nope", Some(Hold::Cordoned)).is_err());
        set_hold(&mut s, "gpu-1", Some(Hold::Cordoned)).expect("cordon");
        assert_eq!(s.hosts["gpu-1"].hold, Some(Hold::Cordoned));
        set_hold(&mut s, "gpu-1", None).expect("uncordon");
        assert_eq!(s.hosts["gpu-1"].hold, None);
        set_hold(&mut s, "gpu-1", Some(Hold::Remove)).expect("remove");
        assert_eq!(s.hosts["gpu-1"].hold, Some(Hold::Remove));
    }

    #[test]
    fn replace_marks_a_launched_host_and_refuses_a_registered_one() {
        let mut s = StoreState::default();
        let host = |id: &str, registration: serde_json::Value| {
            let mut v = serde_json::json!({
                "id": id, "capacity_provider": "l4", "instance_type": "g6.xlarge",
                "state": "running", "gpus": [], "cpu_units": 0, "memory_mib": 0, "launch_token": ""
            });
            if !registration.is_null() {
                v["registration"] = registration;
            }
            serde_json::from_value::<gpushare_core::model::Host>(v).expect("host")
        };
        s.hosts
            .insert("h-1".into(), host("h-1", serde_json::Value::Null));
        let said = mark_replaced(&mut s, "h-1").expect("marked");
        assert!(said.contains("marked for replacement"), "{said}");
        assert_eq!(s.hosts["h-1"].hold, Some(Hold::Remove));
        assert!(mark_replaced(&mut s, "nope").is_err());
        let registered = serde_json::json!({"key_sha256": "ab", "joined_at": 1});
        s.hosts.insert("gpu-1".into(), host("gpu-1", registered));
        assert!(s.hosts["gpu-1"].is_registered());
        let err = mark_replaced(&mut s, "gpu-1").expect_err("refused");
        assert!(err.to_string().contains("registered host"), "{err}");
        assert_eq!(s.hosts["gpu-1"].hold, None);
    }
}

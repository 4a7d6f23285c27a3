//! The systemd units every gpushare host runs, in one place: the NVIDIA MPS control
//! daemon (`gpushare-mps.service`: EXCLUSIVE_PROCESS compute mode, the daemon in the
//! foreground, pipe and log directories outside /tmp) and the agent
//! (`gpushare-agent.service`). The EC2 user data of launched hosts and
//! `gpushare host setup` on your own servers both include these templates, so the
//! two cannot drift (a golden test renders both).
//!
//! Templates are Jinja (minijinja) with the settings of [`environment`]. Variables:
//! - `gpushare-mps.service`: `pipe_dir`, `log_dir`, `thread_pct` (none or 1-100);
//! - `gpushare-agent.service`: `mps` (bool), `pipe_dir`, `env_file` (an
//!   environment file, optional on the host), `agent_exec` (the agent's command line).
//!
//! Values are checked by the callers against strict character sets, never escaped.

/// Name of the MPS control daemon's unit (and its template).
pub const MPS_UNIT: &str = "gpushare-mps.service";
/// Name of the agent's unit (and its template).
pub const AGENT_UNIT: &str = "gpushare-agent.service";
/// Where systemd units are installed.
pub const UNIT_DIR: &str = "/etc/systemd/system";

const MPS_TEMPLATE: &str = include_str!("host_units/gpushare-mps.service");
const AGENT_TEMPLATE: &str = include_str!("host_units/gpushare-agent.service");

/// A minijinja environment holding the two unit templates (include them by name:
/// `{% include "gpushare-mps.service" %}`): block tags alone on their line take the
/// line with them, no HTML escaping, an undefined name is an error, and the
/// `systemd` filter doubles `%` (a specifier in unit files).
pub fn environment() -> minijinja::Environment<'static> {
    let mut env = minijinja::Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(true);
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    env.add_filter("systemd", |v: String| v.replace('%', "%%"));
    // Both templates are constants of this crate and parse (tested below).
    let _ = env.add_template(MPS_UNIT, MPS_TEMPLATE);
    let _ = env.add_template(AGENT_UNIT, AGENT_TEMPLATE);
    env
}

/// Render one of the units (`MPS_UNIT`, `AGENT_UNIT`) with `context`.
pub fn render_unit(name: &str, context: minijinja::Value) -> Result<String, minijinja::Error> {
    environment().get_template(name)?.render(context)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_units_render_and_keep_the_mps_pipe_out_of_tmp() {
        let mps = render_unit(
            MPS_UNIT,
            minijinja::context! { pipe_dir => "/run/p", log_dir => "/run/l", thread_pct => 50 },
        )
        .expect("mps unit");
        assert!(mps.contains("Environment=CUDA_MPS_PIPE_DIRECTORY=/run/p\n"));
        assert!(mps.contains("nvidia-smi -c EXCLUSIVE_PROCESS"));
        assert!(mps.contains("set_default_active_thread_percentage 50"));
        let agent = render_unit(
            AGENT_UNIT,
            minijinja::context! { mps => false, pipe_dir => "/run/p", env_file => "/etc/g.env", agent_exec => "/bin/g agent" },
        )
        .expect("agent unit");
        assert!(agent.contains("ExecStart=/bin/g agent\n"));
        assert!(!agent.contains("CUDA_MPS"));
        assert!(render_unit(AGENT_UNIT, minijinja::context! {}).is_err());
    }
}

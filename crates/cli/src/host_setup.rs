//! `gpushare host setup`: a GPU server of your own joins a registered pool with one
//! command. It installs what the EC2 user data installs on a launched host (the
//! MPS control daemon's unit with the pipe directory outside /tmp and the GPUs in
//! EXCLUSIVE_PROCESS compute mode, the agent's unit: both gpushare-core's
//! `host_units`, the very templates the user data includes), this binary as the
//! agent, and the join settings in a root-only environment file; then starts both.
//! `--dry-run` prints the files and commands instead (the join token shown as
//! `(sensitive)`).

use anyhow::{bail, Context};
use gpushare_core::host_units::{self, AGENT_UNIT, MPS_UNIT, UNIT_DIR};
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct SetupArgs {
    /// The controller's agent API, e.g. https://controller.example:7443.
    #[arg(long, value_name = "URL")]
    pub server: String,
    /// A pool token (`gpushare token create --pool POOL --uses N`).
    #[arg(
        long,
        value_name = "TOKEN",
        env = "GPUSHARE_JOIN_TOKEN",
        hide_env_values = true
    )]
    pub join: String,
    /// The cluster CA's hash, sha256:HEX, as `gpushare token create` prints it.
    #[arg(long, value_name = "sha256:HEX")]
    pub ca_hash: String,
    /// This host's id (default: derived by the agent from the host name, or the machine id).
    #[arg(long, value_name = "ID")]
    pub host_id: Option<String>,
    /// The instance type this host is, for a pool whose instance_type is a filter.
    #[arg(long, value_name = "TYPE")]
    pub instance_type: Option<String>,
    /// This host runs no MPS daemon (whole-GPU and CPU-only tasks only).
    #[arg(long)]
    pub no_mps: bool,
    /// The MPS daemon's pipe directory (outside /tmp).
    #[arg(long, value_name = "DIR", default_value = "/run/gpushare-mps/pipe")]
    pub mps_pipe_dir: String,
    /// The MPS daemon's log directory.
    #[arg(long, value_name = "DIR", default_value = "/run/gpushare-mps/log")]
    pub mps_log_dir: String,
    /// The user id every MPS container runs as (the pool's `mps { user }`: one user
    /// per MPS server; the agent refuses a container declaring another).
    #[arg(long, value_name = "UID")]
    pub mps_user: Option<u32>,
    /// What runs the tasks: docker or process.
    #[arg(long, value_name = "RUNTIME", default_value = "docker", value_parser = ["docker", "process"])]
    pub runtime: String,
    /// Where the agent binary is installed (this binary is copied there).
    #[arg(long, value_name = "PATH", default_value = "/usr/local/bin/gpushare")]
    pub agent_path: String,
    /// The root-only file holding the join settings (GPUSHARE_JOIN_TOKEN, ...).
    #[arg(long, value_name = "PATH", default_value = "/etc/gpushare/join.env")]
    pub env_file: String,
    /// Print the files and the commands instead of writing and running them.
    #[arg(long)]
    pub dry_run: bool,
    /// Write the files (and install the agent) under DIR instead of `/`, for staging
    /// a machine image's file tree and for tests; the commands (nvidia-smi,
    /// systemctl) still run as they are.
    #[arg(long, value_name = "DIR")]
    pub root: Option<String>,
}

/// One file to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupFile {
    pub path: String,
    pub mode: u32,
    pub text: String,
    /// Shown as `(sensitive)` lines in a dry run (it holds the join token).
    pub secret: bool,
}

/// What setup does: the files it writes, then the commands it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupPlan {
    pub files: Vec<SetupFile>,
    pub commands: Vec<Vec<String>>,
}

/// A value that goes into a unit file or a command line: a strict character set,
/// never escaped (as the EC2 user data's values).
fn check(field: &str, value: &str, extra: &str) -> anyhow::Result<()> {
    if value.is_empty() {
        bail!("--{field} must not be empty");
    }
    if let Some(c) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || extra.contains(*c)))
    {
        bail!("--{field} {value:?} holds {c:?}; only letters, digits and {extra:?} are taken");
    }
    Ok(())
}

fn check_path(field: &str, value: &str) -> anyhow::Result<()> {
    check(field, value, "._/-")?;
    if !value.starts_with('/') || value.split('/').any(|p| p == "..") || value.ends_with('/') {
        bail!("--{field} {value:?} must be an absolute path without \"..\"");
    }
    Ok(())
}

/// The files and commands of a setup with `args`; `binary`: this program (copied
/// to `--agent-path`).
pub fn plan(args: &SetupArgs, binary: &Path) -> anyhow::Result<SetupPlan> {
    check_args(args)?;
    let mps = !args.no_mps;
    let mut files = setup_files(args, mps, agent_exec(args, mps))?;
    // Under --root, every path written is the root's; the units name the paths of
    // the machine the root becomes.
    for f in &mut files {
        f.path = rooted(args, &f.path);
    }
    let commands = setup_commands(args, binary, mps);
    Ok(SetupPlan { files, commands })
}

/// `path` under `--root`, if one is given.
fn rooted(args: &SetupArgs, path: &str) -> String {
    format!("{}{path}", args.root.as_deref().unwrap_or(""))
}

/// Every flag that ends up in a file or a command, checked (characters, absolute
/// paths, no MPS directory in a world-writable place).
fn check_args(args: &SetupArgs) -> anyhow::Result<()> {
    check("server", &args.server, "-._~:/[]")?;
    if !args.server.starts_with("https://") {
        bail!(
            "--server {:?} must be an https:// URL (the agent API)",
            args.server
        );
    }
    check("ca-hash", &args.ca_hash, ":")?;
    if !args.ca_hash.starts_with("sha256:") {
        bail!("--ca-hash must be sha256:HEX, as `gpushare token create` prints it");
    }
    check("join", &args.join, ".")?;
    for (f, v) in [
        ("host-id", &args.host_id),
        ("instance-type", &args.instance_type),
    ] {
        if let Some(v) = v {
            check(f, v, "._-")?;
        }
    }
    check_path("agent-path", &args.agent_path)?;
    check_path("env-file", &args.env_file)?;
    if let Some(root) = &args.root {
        check_path("root", root)?;
    }
    if !args.no_mps {
        for (f, v) in [
            ("mps-pipe-dir", &args.mps_pipe_dir),
            ("mps-log-dir", &args.mps_log_dir),
        ] {
            check_path(f, v)?;
            if let Some(why) = gpushare_core::pool::mps_dir_issue(v) {
                bail!("--{f}: {why}");
            }
        }
    }
    Ok(())
}

/// The agent unit's command line.
fn agent_exec(args: &SetupArgs, mps: bool) -> String {
    let mut exec = format!(
        "{} agent --server {} --ca-hash {} --runtime {} --state-dir /var/lib/gpushare-agent",
        args.agent_path, args.server, args.ca_hash, args.runtime
    );
    if let Some(id) = &args.host_id {
        exec.push_str(&format!(" --host-id {id}"));
    }
    if mps {
        exec.push_str(&format!(" --mps-pipe-dir {}", args.mps_pipe_dir));
        if let Some(u) = args.mps_user {
            exec.push_str(&format!(" --mps-user {u}"));
        }
    } else {
        exec.push_str(" --no-mps");
    }
    exec
}

/// The environment file (the join token) and the units.
fn setup_files(args: &SetupArgs, mps: bool, exec: String) -> anyhow::Result<Vec<SetupFile>> {
    let env = host_units::environment();
    let render = |name: &str, ctx: minijinja::Value| -> anyhow::Result<String> {
        env.get_template(name)
            .and_then(|t| t.render(ctx))
            .with_context(|| format!("rendering {name}"))
    };
    let mut files = vec![];
    let mut env_text = format!("GPUSHARE_JOIN_TOKEN={}\n", args.join);
    if let Some(t) = &args.instance_type {
        env_text.push_str(&format!("GPUSHARE_INSTANCE_TYPE={t}\n"));
    }
    files.push(SetupFile {
        path: args.env_file.clone(),
        mode: 0o600,
        text: env_text,
        secret: true,
    });
    if mps {
        files.push(SetupFile {
            path: format!("{UNIT_DIR}/{MPS_UNIT}"),
            mode: 0o644,
            text: render(
                MPS_UNIT,
                minijinja::context! {
                    pipe_dir => &args.mps_pipe_dir,
                    log_dir => &args.mps_log_dir,
                    thread_pct => None::<u8>,
                },
            )?,
            secret: false,
        });
    }
    files.push(SetupFile {
        path: format!("{UNIT_DIR}/{AGENT_UNIT}"),
        mode: 0o644,
        text: render(
            AGENT_UNIT,
            minijinja::context! {
                mps => mps,
                pipe_dir => &args.mps_pipe_dir,
                env_file => &args.env_file,
                agent_exec => exec,
            },
        )?,
        secret: false,
    });
    Ok(files)
}

/// The commands: install the binary, set the GPUs up for MPS, start the units.
fn setup_commands(args: &SetupArgs, binary: &Path, mps: bool) -> Vec<Vec<String>> {
    let cmd = |parts: &[&str]| parts.iter().map(|p| p.to_string()).collect::<Vec<_>>();
    let mut commands = vec![];
    let binary = binary.display().to_string();
    let agent_path = rooted(args, &args.agent_path);
    if binary != agent_path {
        commands.push(cmd(&["install", "-D", "-m", "0755", &binary, &agent_path]));
    }
    if mps {
        commands.push(cmd(&["nvidia-smi", "-pm", "1"]));
        commands.push(cmd(&["nvidia-smi", "-c", "EXCLUSIVE_PROCESS"]));
    }
    commands.push(cmd(&["systemctl", "daemon-reload"]));
    if mps {
        commands.push(cmd(&["systemctl", "enable", "--now", MPS_UNIT]));
    }
    commands.push(cmd(&["systemctl", "enable", "--now", AGENT_UNIT]));
    commands
}

/// The dry run's text: every file (secret ones shown as `(sensitive)`), then the commands.
pub fn dry_run_text(p: &SetupPlan) -> String {
    let mut out = String::from("# gpushare host setup --dry-run: nothing is written or run.\n");
    for f in &p.files {
        out.push_str(&format!("\n# file {} (mode {:04o})\n", f.path, f.mode));
        if f.secret {
            for line in f.text.lines() {
                let key = line.split('=').next().unwrap_or(line);
                out.push_str(&format!("{key}={}\n", gpushare_core::model::SENSITIVE));
            }
        } else {
            out.push_str(&f.text);
        }
    }
    out.push_str("\n# commands\n");
    for c in &p.commands {
        out.push_str(&c.join(" "));
        out.push('\n');
    }
    out
}

pub async fn run(args: &SetupArgs) -> anyhow::Result<u8> {
    let binary: PathBuf = std::env::current_exe().context("finding this program's path")?;
    let p = plan(args, &binary)?;
    if args.dry_run {
        print!("{}", dry_run_text(&p));
        return Ok(0);
    }
    for f in &p.files {
        write_file(f).with_context(|| format!("writing {}", f.path))?;
        println!("wrote {}", f.path);
    }
    for c in &p.commands {
        let (prog, rest) = c.split_first().context("an empty command")?;
        let status = tokio::process::Command::new(prog)
            .args(rest)
            .status()
            .await
            .with_context(|| format!("running {}", c.join(" ")))?;
        if !status.success() {
            bail!("{} failed ({status})", c.join(" "));
        }
        println!("ran {}", c.join(" "));
    }
    if args.runtime == "docker" {
        check_nvidia_runtime().await;
    }
    println!("The agent is started: it joins the pool and runs the tasks placed here (journalctl -u {AGENT_UNIT}).");
    Ok(0)
}

/// Say what is missing when Docker has no NVIDIA runtime (`docker info`'s
/// runtimes), as the EC2 user data configures it: without it a container sees a
/// GPU only where the engine's default runtime happens to be NVIDIA's.
async fn check_nvidia_runtime() {
    let out = tokio::process::Command::new("docker")
        .args(["info", "--format", "{{json .Runtimes}}"])
        .output()
        .await;
    let issue = match out {
        Ok(o) if o.status.success() => nvidia_runtime_issue(&String::from_utf8_lossy(&o.stdout)),
        Ok(o) => Some(format!(
            "`docker info` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("cannot run `docker info`: {e}")),
    };
    if let Some(why) = issue {
        println!("warning: {why}");
    }
}

/// What is missing for GPU containers, from `docker info --format '{{json .Runtimes}}'`
/// (a JSON object by runtime name); `None` when the `nvidia` runtime is there.
fn nvidia_runtime_issue(runtimes_json: &str) -> Option<String> {
    let runtimes: serde_json::Value = match serde_json::from_str(runtimes_json.trim()) {
        Ok(v) => v,
        Err(e) => return Some(format!("cannot read Docker's runtimes ({e})")),
    };
    if runtimes.get("nvidia").is_some() {
        return None;
    }
    let names: Vec<&str> = runtimes
        .as_object()
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    Some(format!("Docker has no nvidia runtime (it has: {}): install the NVIDIA Container Toolkit, run `nvidia-ctk runtime configure --runtime=docker` and restart Docker, or GPU containers see no GPU", names.join(", ")))
}

fn write_file(f: &SetupFile) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let path = Path::new(&f.path);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // Written 0600, then given its mode (the environment file stays root-only).
    gpushare_engine::fsutil::write_atomic(path, f.text.as_bytes())?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(f.mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> SetupArgs {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct T {
            #[command(flatten)]
            a: SetupArgs,
        }
        let mut argv = vec![
            "t",
            "--server",
            "https://controller.example:7443",
            "--join",
            "0a1b2c3d.00112233445566778899aabbccddeeff",
            "--ca-hash",
            "sha256:4f1b2b0b822cd15d6c15b0f00a089f86d081884c7d659a2feaa0c55ad015a3bf",
        ];
        argv.extend_from_slice(extra);
        T::parse_from(argv).a
    }

    /// The unit `name` as a script writes it: the lines between
    /// `cat > /etc/systemd/system/NAME <<'UNIT'` and `UNIT`.
    fn unit_in_script(script: &str, name: &str) -> String {
        let start = format!("{UNIT_DIR}/{name} <<'UNIT'\n");
        let from = script
            .find(&start)
            .map(|i| i + start.len())
            .expect("unit in script");
        let len = script[from..].find("\nUNIT\n").expect("unit end") + 1;
        script[from..from + len].to_string()
    }

    /// One golden for both: `host setup --dry-run` prints the units of the EC2 user
    /// data (gpushare-core's host_units); the MPS unit is the same text, and the agent
    /// units differ only in the agent's command line.
    #[test]
    fn dry_run_matches_the_golden_and_the_ec2_user_data_units() {
        let p = plan(&args(&[]), Path::new("/usr/local/bin/gpushare")).expect("plan");
        let text = dry_run_text(&p);
        expectorate::assert_contents("tests/golden/host_setup_dry_run.txt", &text);
        assert!(
            !text.contains("00112233445566778899"),
            "the token is never printed"
        );
        let pool: gpushare_core::model::CapacityProvider = serde_json::from_value(
            serde_json::json!({ "instance_type": "g6.xlarge", "max_size": 1 }),
        )
        .expect("pool");
        let script = gpushare_ec2::render_user_data(&gpushare_ec2::UserDataInput {
            cluster: "prod",
            pool_name: "l4",
            pool: &pool,
            host_id: "h-l4-1",
            join: &gpushare_engine::join::JoinGrant::placeholder(
                "https://controller.internal:7443",
            ),
        })
        .expect("user data");
        let file = |name: &str| {
            p.files
                .iter()
                .find(|f| f.path.ends_with(name))
                .map(|f| f.text.clone())
                .expect("file")
        };
        assert_eq!(file(MPS_UNIT), unit_in_script(&script, MPS_UNIT));
        let not_exec = |u: &str| {
            u.lines()
                .filter(|l| !l.starts_with("ExecStart="))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            not_exec(&file(AGENT_UNIT)),
            not_exec(&unit_in_script(&script, AGENT_UNIT))
        );
    }

    #[test]
    fn a_docker_without_the_nvidia_runtime_is_named() {
        let with = r#"{"io.containerd.runc.v2":{"path":"runc"},"nvidia":{"path":"nvidia-container-runtime"}}"#;
        assert_eq!(nvidia_runtime_issue(with), None);
        let without = nvidia_runtime_issue(
            r#"{"io.containerd.runc.v2":{"path":"runc"},"runc":{"path":"runc"}}"#,
        )
        .expect("an issue");
        assert!(
            without.contains("no nvidia runtime (it has: io.containerd.runc.v2, runc)")
                && without.contains("nvidia-ctk runtime configure --runtime=docker"),
            "{without}"
        );
        assert!(nvidia_runtime_issue("not json").is_some());
    }

    #[test]
    fn the_pools_mps_user_goes_to_the_agent() {
        let exec = agent_exec(&args(&["--mps-user", "1000"]), true);
        assert!(
            exec.ends_with(" --mps-pipe-dir /run/gpushare-mps/pipe --mps-user 1000"),
            "{exec}"
        );
        assert!(!agent_exec(&args(&[]), true).contains("--mps-user"));
    }

    #[test]
    fn values_that_could_escape_their_line_are_refused() {
        let bin = Path::new("/usr/local/bin/gpushare");
        assert!(plan(&args(&["--mps-pipe-dir", "/tmp/mps"]), bin).is_err());
        assert!(plan(&args(&["--host-id", "a b"]), bin).is_err());
        assert!(plan(&args(&["--agent-path", "relative"]), bin).is_err());
        let mut a = args(&[]);
        a.server = "http://plain:80".into();
        assert!(plan(&a, bin).is_err());
        a = args(&[]);
        a.join = "x\nExecStart=/bin/evil".into();
        assert!(plan(&a, bin).is_err());
        let no_mps = plan(&args(&["--no-mps"]), bin).expect("no mps");
        assert!(no_mps.files.iter().all(|f| !f.path.ends_with(MPS_UNIT)));
        assert!(dry_run_text(&no_mps).contains(" --no-mps"));
    }
}

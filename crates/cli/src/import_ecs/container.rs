//! One ECS container definition -> one `container` block.

use super::doc::{Block, Val};
use super::ecs::{
    ContainerDef, HealthCheck, LinuxParameters, PortMapping, ResourceRequirement, CONTAINER_KEYS,
    HEALTH_KEYS, LINUX_KEYS, MOUNT_KEYS, MPS_KEYS, NAME_VALUE_KEYS, PORT_KEYS, REQUIREMENT_KEYS,
    SECRET_KEYS, SHARING_KEYS, ULIMIT_KEYS,
};
use super::pool::largest;
use super::report::{at, either, field_error, index, join, nth, FieldError, Report};
use gpushare_core::envname::name_issue;
use gpushare_core::model::{
    HEALTH_INTERVAL, HEALTH_RETRIES, HEALTH_START_PERIOD, HEALTH_TIMEOUT, ULIMIT_NAMES,
};
use serde_json::Value;

/// Container keys gpushare knows and does not carry over, with the reason.
const DROPPED: &[(&str, &str)] = &[
    ("logConfiguration", "no log drivers: each container's output stays on its host and `gpushare logs TASK` shows it"),
    ("firelensConfiguration", "FireLens log routing has no gpushare counterpart (no log drivers or router sidecars)"),
    ("dependsOn", "container start order is not modelled: a task's containers start together"),
    ("links", "legacy Docker links are not supported: a task's containers reach each other through their ports"),
    ("hostname", "the container's hostname is Docker's default"),
    ("dnsServers", "DNS settings are the host's"),
    ("dnsSearchDomains", "DNS settings are the host's"),
    ("extraHosts", "extra /etc/hosts entries are not supported"),
    ("disableNetworking", "use network_mode = \"none\" on the task definition instead"),
    ("privileged", "privileged containers are not supported"),
    ("readonlyRootFilesystem", "a read-only root filesystem is not supported"),
    ("interactive", "containers get no stdin"),
    ("pseudoTerminal", "containers get no terminal"),
    ("dockerSecurityOptions", "Docker security options are not supported"),
    ("systemControls", "sysctls are not supported"),
    ("repositoryCredentials", "hosts pull images with their own Docker credentials"),
    ("environmentFiles", "environment files in S3 are not read: put the variables in env"),
    ("volumesFrom", "declare the volume on the task definition and mount it with a mount_point"),
    ("startTimeout", "there is no dependsOn, so no start timeout"),
    ("restartPolicy", "containers are not restarted in place: a task whose essential container stops is replaced"),
    ("credentialSpecs", "Windows gMSA credential specs are not supported"),
    ("versionConsistency", "gpushare does not resolve image tags to digests: pin a digest in the image"),
    ("memoryReservation", "gpushare reserves and limits one value"),
];

const LINUX_DROPPED: &[(&str, &str)] = &[
    ("capabilities", "Linux capabilities are Docker's defaults"),
    (
        "devices",
        "host devices are not mapped (the GPUs are, by the agent)",
    ),
    ("maxSwap", "swap settings are not supported"),
    ("swappiness", "swap settings are not supported"),
    (
        "tmpfs",
        "tmpfs mounts are not supported: use a volume without host_path",
    ),
];

const PORT_DROPPED: &[(&str, &str)] = &[
    ("appProtocol", "Service Connect is not supported"),
    (
        "containerPortRange",
        "port ranges are not supported: map each port",
    ),
    (
        "hostPortRange",
        "port ranges are not supported: map each port",
    ),
];

/// How the task is networked, as far as its ports go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Net {
    Bridge,
    Host,
    None,
    /// awsvpc, carried over as bridge: every host port becomes dynamic.
    Awsvpc,
}

/// A container's GPU need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gpu {
    None,
    Whole(u32),
    Mps(u64),
}

/// What one container takes from its host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Takes {
    pub gpu: Gpu,
    pub cpu: u64,
    pub memory: u64,
    pub fixed_port: bool,
}

/// A sensitive variable an ECS secret became: its value is the secret's, which
/// gpushare cannot read from Secrets Manager or SSM itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretVar {
    pub var: String,
    pub value_from: String,
}

/// What the container mapping shares with the task's.
pub struct Ctx<'a> {
    pub report: &'a mut Report,
    pub net: Net,
    pub volumes: &'a [String],
    pub secrets: &'a mut Vec<SecretVar>,
}

/// gpushare's rule for resource and container names.
pub fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && s.len() <= 63
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A required name that must follow gpushare's naming rule.
pub fn name_at(v: Option<&String>, path: String, what: &str) -> Result<String, FieldError> {
    match v {
        None => Err(field_error(path, format!("missing: every {what} has a name"))),
        Some(n) if !valid_name(n) => Err(field_error(
            path,
            format!("{n:?} is not a gpushare name: letters, digits, `_` and `-`, starting with a letter or digit, at most 63"),
        )),
        Some(n) => Ok(n.clone()),
    }
}

/// The container block for `c` (at `path`, raw JSON `raw`) and what it takes.
pub fn container(
    c: &ContainerDef,
    raw: &Value,
    path: &str,
    cx: &mut Ctx<'_>,
) -> Result<(Block, Takes), FieldError> {
    cx.report.keys(raw, path, CONTAINER_KEYS, DROPPED);
    let name = name_at(c.name.as_ref(), join(path, "name"), "container")?;
    let image = c
        .image
        .clone()
        .ok_or_else(|| field_error(join(path, "image"), "missing: a container needs an image"))?;
    let mut b = Block::new("container", Some(name.clone()));
    b.attr("image", Val::Str(image));
    if !c.entry_point.is_empty() {
        b.attr("entry_point", Val::List(c.entry_point.clone()));
    }
    if !c.command.is_empty() {
        b.attr("command", Val::List(c.command.clone()));
    }
    let cpu = c.cpu.unwrap_or(0);
    if cpu > 0 {
        b.attr("cpu", Val::Num(i64::from(cpu)));
    }
    let memory = memory_of(c, path, cx.report);
    if memory > 0 {
        b.attr(
            "memory",
            Val::Num(i64::try_from(memory).unwrap_or(i64::MAX)),
        );
    }
    if c.essential == Some(false) {
        b.attr("essential", Val::Bool(false));
    }
    b.opt("user", c.user.clone().map(Val::Str));
    b.opt(
        "working_directory",
        c.working_directory.clone().map(Val::Str),
    );
    if let Some(t) = c.stop_timeout {
        b.attr(
            "stop_timeout",
            Val::Num(i64::from(in_range(t, 1, 120, &join(path, "stopTimeout"))?)),
        );
    }
    linux(
        c.linux_parameters.as_ref(),
        at(raw, "linuxParameters"),
        &join(path, "linuxParameters"),
        &mut b,
        cx.report,
    )?;
    env(c, raw, path, &name, &mut b, cx)?;
    if !c.docker_labels.is_empty() {
        labels(c, path, &mut b, cx.report);
    }
    let fixed_port = ports(
        &c.port_mappings,
        at(raw, "portMappings"),
        &join(path, "portMappings"),
        &mut b,
        cx,
    )?;
    if let Some(h) = &c.health_check {
        b.block(health(
            h,
            at(raw, "healthCheck"),
            &join(path, "healthCheck"),
            cx.report,
        )?);
    }
    mounts(c, raw, path, &mut b, cx)?;
    ulimits(c, raw, path, &mut b, cx.report)?;
    let gpu = gpu_need(
        &c.resource_requirements,
        at(raw, "resourceRequirements"),
        &join(path, "resourceRequirements"),
        cx.report,
    )?;
    match gpu {
        Gpu::None => {}
        Gpu::Whole(n) => {
            let mut g = Block::new("gpu", None);
            g.attr("count", Val::Num(i64::from(n)));
            b.block(g);
        }
        Gpu::Mps(_) => b.block(mps_block(&c.resource_requirements)),
    }
    let takes = Takes {
        gpu,
        cpu: u64::from(cpu),
        memory,
        fixed_port,
    };
    Ok((b, takes))
}

/// `memory` (the hard limit) when set, else `memoryReservation`: gpushare reserves
/// and limits one value, so the larger of ECS's two keeps the container from an OOM
/// kill it did not have on ECS.
fn memory_of(c: &ContainerDef, path: &str, report: &mut Report) -> u64 {
    match (c.memory, c.memory_reservation) {
        (Some(hard), Some(soft)) => {
            report.note(
                join(path, "memory"),
                format!("gpushare reserves and limits one value: memory = {hard} (ECS's hard limit) is reserved, not the soft memoryReservation {soft}"),
            );
            hard.max(soft)
        }
        (Some(hard), None) => hard,
        (None, Some(soft)) => {
            report.note(
                join(path, "memoryReservation"),
                format!("carried over as memory = {soft}: gpushare also limits the container to it (ECS let it use more)"),
            );
            soft
        }
        (None, None) => 0,
    }
}

fn in_range(v: u32, lo: u32, hi: u32, path: &str) -> Result<u32, FieldError> {
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(field_error(
            path,
            format!("{v} is out of range: gpushare takes {lo} to {hi}"),
        ))
    }
}

fn linux(
    l: Option<&LinuxParameters>,
    raw: &Value,
    path: &str,
    b: &mut Block,
    report: &mut Report,
) -> Result<(), FieldError> {
    let Some(l) = l else { return Ok(()) };
    report.keys(raw, path, LINUX_KEYS, LINUX_DROPPED);
    if let Some(size) = l.shared_memory_size {
        let size = in_range(size, 1, 1_048_576, &join(path, "sharedMemorySize"))?;
        b.attr("shared_memory_size", Val::Num(i64::from(size)));
    }
    if l.init_process_enabled == Some(true) {
        b.attr("init_process_enabled", Val::Bool(true));
    }
    Ok(())
}

/// `environment` -> `env`; `secrets` -> `secret_env` with a sensitive variable each.
fn env(
    c: &ContainerDef,
    raw: &Value,
    path: &str,
    container: &str,
    b: &mut Block,
    cx: &mut Ctx<'_>,
) -> Result<(), FieldError> {
    let mut env = vec![];
    let env_path = join(path, "environment");
    for (i, e) in c.environment.iter().enumerate() {
        let p = index(&env_path, i);
        let raw_e = nth(at(raw, "environment"), i);
        if let Some(name) = env_name(raw_e, &p, e.name.as_ref(), NAME_VALUE_KEYS, cx.report)? {
            env.push((name, Val::Str(e.value.clone().unwrap_or_default())));
        }
    }
    if !env.is_empty() {
        b.attr("env", Val::Map(env));
    }
    let mut secret_env = vec![];
    let sec_path = join(path, "secrets");
    for (i, s) in c.secrets.iter().enumerate() {
        let p = index(&sec_path, i);
        let from = s
            .value_from
            .clone()
            .ok_or_else(|| field_error(join(&p, "valueFrom"), "missing"))?;
        let raw_s = nth(at(raw, "secrets"), i);
        let Some(name) = env_name(raw_s, &p, s.name.as_ref(), SECRET_KEYS, cx.report)? else {
            continue;
        };
        let var = secret_var(cx.secrets, container, &name, &from);
        secret_env.push((name, Val::Var(var)));
    }
    if !secret_env.is_empty() {
        b.attr("secret_env", Val::Map(secret_env));
    }
    Ok(())
}

/// The variable name of an `environment` or `secrets` entry at `path`: `None` (and
/// reported) when gpushare refuses it (reserved or not a plain name).
fn env_name(
    raw: &Value,
    path: &str,
    name: Option<&String>,
    keys: &[&str],
    report: &mut Report,
) -> Result<Option<String>, FieldError> {
    report.keys(raw, path, keys, &[]);
    let name = name
        .cloned()
        .ok_or_else(|| field_error(join(path, "name"), "missing"))?;
    match name_issue(&name) {
        Some(issue) => {
            report.drop(join(path, "name"), &Value::String(name), issue);
            Ok(None)
        }
        None => Ok(Some(name)),
    }
}

/// The variable for secret `name` read from `from`: `name` in lower case, shared by
/// the containers that read the same secret, prefixed with the container's name when
/// another secret took it.
fn secret_var(secrets: &mut Vec<SecretVar>, container: &str, name: &str, from: &str) -> String {
    let base = name.to_ascii_lowercase();
    for candidate in [
        base.clone(),
        format!(
            "{}_{base}",
            container.replace('-', "_").to_ascii_lowercase()
        ),
    ] {
        match secrets.iter().find(|s| s.var == candidate) {
            Some(s) if s.value_from == from => return candidate,
            Some(_) => continue,
            None => {
                secrets.push(SecretVar {
                    var: candidate.clone(),
                    value_from: from.to_string(),
                });
                return candidate;
            }
        }
    }
    let var = format!("{base}_{}", secrets.len());
    secrets.push(SecretVar {
        var: var.clone(),
        value_from: from.to_string(),
    });
    var
}

fn labels(c: &ContainerDef, path: &str, b: &mut Block, report: &mut Report) {
    let mut kept = vec![];
    for (k, v) in &c.docker_labels {
        if k.starts_with("gpushare.") {
            report.drop(
                join(&join(path, "dockerLabels"), k),
                &Value::String(v.clone()),
                "the `gpushare.` label prefix is the agent's own",
            );
        } else {
            kept.push((k.clone(), Val::Str(v.clone())));
        }
    }
    if !kept.is_empty() {
        b.attr("docker_labels", Val::Map(kept));
    }
}

/// The port_mapping blocks; true when a host port is fixed (one task per host).
fn ports(
    ports: &[PortMapping],
    raw: &Value,
    path: &str,
    b: &mut Block,
    cx: &mut Ctx<'_>,
) -> Result<bool, FieldError> {
    let mut fixed = false;
    for (i, pm) in ports.iter().enumerate() {
        let p = index(path, i);
        cx.report.keys(nth(raw, i), &p, PORT_KEYS, PORT_DROPPED);
        let cport = pm.container_port.ok_or_else(|| {
            field_error(
                join(&p, "containerPort"),
                "missing: gpushare maps each port by its container port",
            )
        })?;
        let cport = in_range(cport, 1, 65535, &join(&p, "containerPort"))?;
        if cx.net == Net::None {
            return Err(field_error(p, "networkMode none publishes no ports"));
        }
        let host = pm.host_port.unwrap_or(0);
        let host = match cx.net {
            Net::Awsvpc if host != 0 => {
                cx.report.note(join(&p, "hostPort"), format!("awsvpc's host port {host} became a dynamic one the planner assigns (bridge mode)"));
                0
            }
            Net::Host if host != 0 && host != cport => {
                return Err(field_error(
                    join(&p, "hostPort"),
                    format!("{host}: in host mode the host port is the container port ({cport})"),
                ))
            }
            _ => in_range(host, 0, 65535, &join(&p, "hostPort"))?,
        };
        fixed |= host != 0 || cx.net == Net::Host;
        let mut m = Block::new("port_mapping", None);
        if let Some(n) = &pm.name {
            if port_name_ok(n) {
                m.attr("name", Val::Str(n.clone()));
            } else {
                cx.report.drop(
                    join(&p, "name"),
                    &Value::String(n.clone()),
                    "port names are lower-case letters, digits, `_` and `-` (at most 64)",
                );
            }
        }
        m.attr("container_port", Val::Num(i64::from(cport)));
        if host != 0 && cx.net == Net::Bridge {
            m.attr("host_port", Val::Num(i64::from(host)));
        }
        if let Some(udp) = either(pm.protocol.as_deref(), "tcp", "udp", join(&p, "protocol"))? {
            m.attr("protocol", Val::Str(udp.into()));
        }
        b.block(m);
    }
    Ok(fixed)
}

fn port_name_ok(n: &str) -> bool {
    let mut chars = n.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit())
        && n.len() <= 64
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

fn health(
    h: &HealthCheck,
    raw: &Value,
    path: &str,
    report: &mut Report,
) -> Result<Block, FieldError> {
    report.keys(raw, path, HEALTH_KEYS, &[]);
    match h.command.first().map(String::as_str) {
        Some("CMD" | "CMD-SHELL") if h.command.len() >= 2 => {}
        _ => {
            return Err(field_error(
                join(path, "command"),
                "expected [\"CMD\", program, args...] or [\"CMD-SHELL\", line]",
            ))
        }
    }
    let mut b = Block::new("health_check", None);
    b.attr("command", Val::List(h.command.clone()));
    let fields = [
        ("interval", h.interval, HEALTH_INTERVAL),
        ("timeout", h.timeout, HEALTH_TIMEOUT),
        ("retries", h.retries, HEALTH_RETRIES),
        ("start_period", h.start_period, HEALTH_START_PERIOD),
    ];
    for (name, v, (default, lo, hi)) in fields {
        let Some(v) = v else { continue };
        let ecs_name = if name == "start_period" {
            "startPeriod"
        } else {
            name
        };
        let v = in_range(v, lo, hi, &join(path, ecs_name))?;
        if v != default {
            b.attr(name, Val::Num(i64::from(v)));
        }
    }
    Ok(b)
}

fn mounts(
    c: &ContainerDef,
    raw: &Value,
    path: &str,
    b: &mut Block,
    cx: &mut Ctx<'_>,
) -> Result<(), FieldError> {
    let mp_path = join(path, "mountPoints");
    for (i, m) in c.mount_points.iter().enumerate() {
        let p = index(&mp_path, i);
        cx.report
            .keys(nth(at(raw, "mountPoints"), i), &p, MOUNT_KEYS, &[]);
        let source = m
            .source_volume
            .clone()
            .ok_or_else(|| field_error(join(&p, "sourceVolume"), "missing"))?;
        if !cx.volumes.contains(&source) {
            return Err(field_error(
                join(&p, "sourceVolume"),
                format!("{source:?} names no volume of the task definition"),
            ));
        }
        let target = m.container_path.clone().unwrap_or_default();
        if !target.starts_with('/') {
            return Err(field_error(
                join(&p, "containerPath"),
                "expected an absolute path",
            ));
        }
        let mut mb = Block::new("mount_point", None);
        mb.attr("source_volume", Val::Str(source));
        mb.attr("container_path", Val::Str(target));
        if m.read_only == Some(true) {
            mb.attr("read_only", Val::Bool(true));
        }
        b.block(mb);
    }
    Ok(())
}

fn ulimits(
    c: &ContainerDef,
    raw: &Value,
    path: &str,
    b: &mut Block,
    report: &mut Report,
) -> Result<(), FieldError> {
    let ul_path = join(path, "ulimits");
    for (i, u) in c.ulimits.iter().enumerate() {
        let p = index(&ul_path, i);
        let rawu = nth(at(raw, "ulimits"), i);
        report.keys(rawu, &p, ULIMIT_KEYS, &[]);
        let name = u
            .name
            .clone()
            .ok_or_else(|| field_error(join(&p, "name"), "missing"))?;
        if !ULIMIT_NAMES.contains(&name.as_str()) {
            report.drop(
                join(&p, "name"),
                &Value::String(name),
                format!("not a limit gpushare sets ({})", ULIMIT_NAMES.join(", ")),
            );
            continue;
        }
        let soft = u
            .soft_limit
            .ok_or_else(|| field_error(join(&p, "softLimit"), "missing"))?;
        let hard = u
            .hard_limit
            .ok_or_else(|| field_error(join(&p, "hardLimit"), "missing"))?;
        if soft < -1 || hard < -1 || (hard != -1 && (soft == -1 || soft > hard)) {
            return Err(field_error(
                p,
                format!("soft limit {soft} above hard limit {hard}, or below -1"),
            ));
        }
        let mut ub = Block::new("ulimit", None);
        ub.attr("name", Val::Str(name));
        ub.attr("soft", Val::Num(soft));
        ub.attr("hard", Val::Num(hard));
        b.block(ub);
    }
    Ok(())
}

/// The container's GPU need from its `resourceRequirements`.
pub fn gpu_need(
    reqs: &[ResourceRequirement],
    raw: &Value,
    path: &str,
    report: &mut Report,
) -> Result<Gpu, FieldError> {
    let (most_gpus, most_mib) = largest();
    let mut need = Gpu::None;
    for (i, r) in reqs.iter().enumerate() {
        let p = index(path, i);
        let rawr = nth(raw, i);
        report.keys(rawr, &p, REQUIREMENT_KEYS, &[]);
        match r.kind.as_deref() {
            Some("GPU") if need != Gpu::None => {
                return Err(field_error(
                    p,
                    "a second GPU requirement: a container has one",
                ));
            }
            Some("GPU") => need = one_gpu(r, rawr, &p, report, most_gpus, most_mib)?,
            Some("InferenceAccelerator") => {
                report.drop(
                    p,
                    rawr,
                    "Elastic Inference accelerators have no gpushare counterpart",
                );
            }
            _ => {
                return Err(field_error(
                    join(&p, "type"),
                    "expected GPU or InferenceAccelerator",
                ))
            }
        }
    }
    Ok(need)
}

fn one_gpu(
    r: &ResourceRequirement,
    raw: &Value,
    p: &str,
    report: &mut Report,
    most_gpus: u32,
    most_mib: u64,
) -> Result<Gpu, FieldError> {
    if let Some(s) = &r.sharing_strategy {
        let sp = join(p, "sharingStrategy");
        report.keys(at(raw, "sharingStrategy"), &sp, SHARING_KEYS, &[]);
        let mp = join(&sp, "nvidiaMps");
        let mps = s
            .nvidia_mps
            .as_ref()
            .ok_or_else(|| field_error(&mp, "missing: nvidiaMps is the only sharing strategy"))?;
        report.keys(
            at(at(raw, "sharingStrategy"), "nvidiaMps"),
            &mp,
            MPS_KEYS,
            &[],
        );
        let memory = match mps.memory {
            None | Some(0) => {
                return Err(field_error(
                    join(&mp, "memory"),
                    "required: MiB of GPU memory, at least 1",
                ))
            }
            Some(m) if m > most_mib => {
                return Err(field_error(
                    join(&mp, "memory"),
                    format!(
                        "{m} MiB fits on no GPU of the catalogue (the largest has {most_mib} MiB)"
                    ),
                ))
            }
            Some(m) => m,
        };
        if let Some(pct) = mps.max_compute_percent {
            in_range(pct, 1, 100, &join(&mp, "maxComputePercent"))?;
        }
        if let Some(v) = &r.value {
            report.drop(join(p, "value"), &Value::String(v.clone()), "with sharingStrategy the container shares one GPU: its nvidiaMps memory is what it takes");
        }
        return Ok(Gpu::Mps(memory));
    }
    let vp = join(p, "value");
    let v = r
        .value
        .as_deref()
        .ok_or_else(|| field_error(&vp, "missing: the number of GPUs, or a sharingStrategy"))?;
    match v.trim().parse::<u32>() {
        Ok(0) => Err(field_error(vp, "0 GPUs: leave the requirement out for a container without a GPU")),
        Ok(n) if n > most_gpus => Err(field_error(vp, format!("{n} GPUs cannot be placed: no instance type of the catalogue has more than {most_gpus}"))),
        Ok(n) => Ok(Gpu::Whole(n)),
        Err(_) if v.trim().parse::<f64>().is_ok() => Err(field_error(
            vp,
            format!("{v:?}: fractional GPUs (G6f) cannot be imported; use sharingStrategy.nvidiaMps for a share of one GPU"),
        )),
        Err(_) => Err(field_error(vp, format!("{v:?}: expected a whole number of GPUs"))),
    }
}

/// `gpu { mps { memory, max_compute_percent } }` of a container whose need is MPS.
fn mps_block(reqs: &[ResourceRequirement]) -> Block {
    let mut mps = Block::new("mps", None);
    let alloc = reqs
        .iter()
        .filter_map(|r| r.sharing_strategy.as_ref()?.nvidia_mps.as_ref())
        .next();
    if let Some(a) = alloc {
        mps.opt(
            "memory",
            a.memory
                .map(|m| Val::Num(i64::try_from(m).unwrap_or(i64::MAX))),
        );
        mps.opt(
            "max_compute_percent",
            a.max_compute_percent.map(|p| Val::Num(i64::from(p))),
        );
    }
    let mut g = Block::new("gpu", None);
    g.block(mps);
    g
}

//! An ECS task definition -> a `task_definition` block, what one task needs from a
//! host, and the sensitive variables its secrets became.

use super::container::{container, name_at, valid_name, Ctx, Gpu, Net, SecretVar, Takes};
use super::doc::{Block, Val};
use super::ecs::{
    NumOrText, TaskDef, Volume, DOCKER_VOLUME_KEYS, HOST_VOLUME_KEYS, RUNTIME_PLATFORM_KEYS,
    TASK_KEYS, VOLUME_KEYS,
};
use super::pool::{constraints, largest, Constraints, Needs};
use super::report::{at, either, field_error, index, join, nth, FieldError, Report};
use serde_json::Value;

/// Why a read-only key of `describe-task-definition` output is not carried over.
const READ_ONLY: &str =
    "read-only record of the registered ECS revision (gpushare numbers its own revisions)";

/// Task definition keys gpushare knows and does not carry over, with the reason.
const DROPPED: &[(&str, &str)] = &[
    ("taskRoleArn", "no per-task IAM role: containers run with their host's instance profile (capacity_provider.instance_profile)"),
    ("executionRoleArn", "no execution role: hosts pull images with their own credentials, and secrets come from sensitive variables"),
    ("proxyConfiguration", "App Mesh proxy configuration is not supported"),
    ("inferenceAccelerators", "Elastic Inference accelerators have no gpushare counterpart"),
    ("ipcMode", "containers share the host's IPC namespace (the MPS daemon's) whatever this says"),
    ("pidMode", "the PID namespace is Docker's default"),
    ("ephemeralStorage", "Fargate ephemeral storage: tasks use their host's root volume (capacity_provider.root_volume)"),
    ("enableFaultInjection", "ECS fault injection is not supported (gpushare debug fault injects host faults)"),
    ("tags", "ECS resource tags: tag the hosts with capacity_provider.tags"),
    ("taskDefinitionArn", READ_ONLY),
    ("revision", READ_ONLY),
    ("status", READ_ONLY),
    ("requiresAttributes", READ_ONLY),
    ("compatibilities", READ_ONLY),
    ("registeredAt", READ_ONLY),
    ("registeredBy", READ_ONLY),
    ("deregisteredAt", READ_ONLY),
];

const VOLUME_DROPPED: &[(&str, &str)] = &[
    ("efsVolumeConfiguration", "EFS is not mounted by gpushare (the volume is task scratch space here): mount the file system on the hosts and use host.sourcePath"),
    ("fsxWindowsFileServerVolumeConfiguration", "Windows file server volumes are not supported (the volume is task scratch space here)"),
    ("configuredAtLaunch", "EBS volumes configured at launch are not supported (the volume is task scratch space here)"),
];

const DOCKER_VOLUME_DROPPED: &[(&str, &str)] = &[(
    "autoprovision",
    "Docker creates a missing named volume when a container first mounts it",
)];

/// The imported task definition.
#[derive(Debug)]
pub struct Imported {
    pub family: String,
    pub block: Block,
    pub needs: Needs,
    pub secrets: Vec<SecretVar>,
    pub constraints: Constraints,
    /// Each container's name and container ports (a load balancer names one).
    pub ports: Vec<(String, Vec<u32>)>,
}

/// Map the task definition `td` (raw JSON `raw`, at `path`: "" or "taskDefinition").
pub fn task_definition(
    td: &TaskDef,
    raw: &Value,
    path: &str,
    report: &mut Report,
) -> Result<Imported, FieldError> {
    report.keys(raw, path, TASK_KEYS, DROPPED);
    let family = name_at(td.family.as_ref(), join(path, "family"), "task definition")?;
    let mut block = Block::new("task_definition", Some(family.clone()));
    let net = network(td, path, &mut block, report)?;
    let mut needs = Needs::default();
    compatibilities(td, raw, path, report);
    platform(td, raw, path, report, &mut needs)?;
    let mut cons = Constraints::default();
    let cpath = join(path, "placementConstraints");
    constraints(
        &td.placement_constraints,
        at(raw, "placementConstraints"),
        &cpath,
        report,
        &mut cons,
    );
    let volumes = volumes(
        &td.volumes,
        at(raw, "volumes"),
        &join(path, "volumes"),
        &mut block,
        report,
    )?;
    let cdpath = join(path, "containerDefinitions");
    if td.container_definitions.is_empty() {
        return Err(field_error(
            cdpath,
            "missing or empty: a task definition has at least one container",
        ));
    }
    let mut secrets = vec![];
    let mut cx = Ctx {
        report,
        net,
        volumes: &volumes,
        secrets: &mut secrets,
    };
    let mut ports = vec![];
    let mut takes_all: Vec<(String, Takes)> = vec![];
    let mut blocks = vec![];
    for (i, c) in td.container_definitions.iter().enumerate() {
        let p = index(&cdpath, i);
        let (b, takes) = container(c, nth(at(raw, "containerDefinitions"), i), &p, &mut cx)?;
        if blocks.iter().any(|x: &Block| x.label == b.label) {
            return Err(field_error(
                join(&p, "name"),
                "a second container of this name",
            ));
        }
        let name = b.label.clone().unwrap_or_default();
        ports.push((
            name,
            c.port_mappings
                .iter()
                .filter_map(|m| m.container_port)
                .collect(),
        ));
        takes_all.push((p, takes));
        blocks.push(b);
    }
    sum_needs(&takes_all, &cdpath, &mut needs)?;
    needs.one_per_host |= net == Net::Host;
    task_size(td, raw, path, &mut blocks, &mut needs, report)?;
    for b in blocks {
        block.block(b);
    }
    Ok(Imported {
        family,
        block,
        needs,
        secrets,
        constraints: cons,
        ports,
    })
}

fn network(
    td: &TaskDef,
    path: &str,
    block: &mut Block,
    report: &mut Report,
) -> Result<Net, FieldError> {
    let p = join(path, "networkMode");
    Ok(match td.network_mode.as_deref() {
        None | Some("bridge") => Net::Bridge,
        Some("host") => {
            block.attr("network_mode", Val::Str("host".into()));
            Net::Host
        }
        Some("none") => {
            block.attr("network_mode", Val::Str("none".into()));
            Net::None
        }
        Some("awsvpc") => {
            report.drop(
                p,
                &Value::String("awsvpc".into()),
                "awsvpc gives each task its own network interface; gpushare runs the task in bridge mode, its host ports assigned by the planner",
            );
            Net::Awsvpc
        }
        Some(other) => {
            return Err(field_error(
                p,
                format!("{other:?}: expected bridge, host, none or awsvpc"),
            ))
        }
    })
}

fn compatibilities(td: &TaskDef, raw: &Value, path: &str, report: &mut Report) {
    let p = join(path, "requiresCompatibilities");
    for (i, c) in td.requires_compatibilities.iter().enumerate() {
        match c.as_str() {
            "EC2" | "MANAGED_INSTANCES" => {}
            "FARGATE" => report.drop(
                index(&p, i),
                nth(at(raw, "requiresCompatibilities"), i),
                "Fargate has no GPUs: gpushare runs the task on the EC2 GPU hosts of a capacity_provider",
            ),
            "EXTERNAL" => report.note(
                index(&p, i),
                "ECS Anywhere: a capacity_provider with hosts = \"registered\" takes your own servers (docs/own-hosts.md); the generated one launches EC2 hosts",
            ),
            _ => report.drop(index(&p, i), nth(at(raw, "requiresCompatibilities"), i), "an unknown launch type"),
        }
    }
}

fn platform(
    td: &TaskDef,
    raw: &Value,
    path: &str,
    report: &mut Report,
    needs: &mut Needs,
) -> Result<(), FieldError> {
    let Some(rp) = &td.runtime_platform else {
        return Ok(());
    };
    let p = join(path, "runtimePlatform");
    report.keys(at(raw, "runtimePlatform"), &p, RUNTIME_PLATFORM_KEYS, &[]);
    match rp.operating_system_family.as_deref() {
        None | Some("LINUX") => {}
        Some(os) => {
            return Err(field_error(
                join(&p, "operatingSystemFamily"),
                format!("{os}: gpushare runs Linux containers only"),
            ))
        }
    }
    match rp.cpu_architecture.as_deref() {
        None | Some("X86_64") => {}
        Some("ARM64") => {
            needs.arm64 = true;
            report.note(
                join(&p, "cpuArchitecture"),
                "ARM64: the generated pool is of Graviton GPU hosts (g5g, NVIDIA T4G)",
            );
        }
        Some(a) => {
            return Err(field_error(
                join(&p, "cpuArchitecture"),
                format!("{a:?}: expected X86_64 or ARM64"),
            ))
        }
    }
    Ok(())
}

fn volumes(
    list: &[Volume],
    raw: &Value,
    path: &str,
    block: &mut Block,
    report: &mut Report,
) -> Result<Vec<String>, FieldError> {
    let mut names = vec![];
    for (i, v) in list.iter().enumerate() {
        let p = index(path, i);
        let rawv = nth(raw, i);
        report.keys(rawv, &p, VOLUME_KEYS, VOLUME_DROPPED);
        let name = v
            .name
            .clone()
            .ok_or_else(|| field_error(join(&p, "name"), "missing"))?;
        if !valid_name(&name) {
            return Err(field_error(
                join(&p, "name"),
                format!("{name:?} is not a gpushare volume name (letters, digits, `_`, `-`)"),
            ));
        }
        let mut b = Block::new("volume", Some(name.clone()));
        if let Some(h) = &v.host {
            report.keys(at(rawv, "host"), &join(&p, "host"), HOST_VOLUME_KEYS, &[]);
            if let Some(src) = &h.source_path {
                if !src.starts_with('/') {
                    return Err(field_error(
                        join(&p, "host.sourcePath"),
                        "expected an absolute path",
                    ));
                }
                b.attr("host_path", Val::Str(src.clone()));
            }
        }
        if let Some(d) = &v.docker_volume_configuration {
            let dp = join(&p, "dockerVolumeConfiguration");
            report.keys(
                at(rawv, "dockerVolumeConfiguration"),
                &dp,
                DOCKER_VOLUME_KEYS,
                DOCKER_VOLUME_DROPPED,
            );
            let mut db = Block::new("docker_volume", None);
            if let Some(shared) = either(d.scope.as_deref(), "task", "shared", join(&dp, "scope"))?
            {
                db.attr("scope", Val::Str(shared.into()));
            }
            db.opt("driver", d.driver.clone().map(Val::Str));
            let opts = |m: &std::collections::BTreeMap<String, String>| {
                Val::Map(
                    m.iter()
                        .map(|(k, v)| (k.clone(), Val::Str(v.clone())))
                        .collect(),
                )
            };
            if !d.driver_opts.is_empty() {
                db.attr("driver_opts", opts(&d.driver_opts));
            }
            if !d.labels.is_empty() {
                db.attr("labels", opts(&d.labels));
            }
            b.block(db);
        }
        block.block(b);
        names.push(name);
    }
    Ok(names)
}

/// Add up what the containers take; whole GPUs and MPS shares do not mix in a task,
/// and the sums must fit on some catalogue type.
fn sum_needs(takes: &[(String, Takes)], path: &str, needs: &mut Needs) -> Result<(), FieldError> {
    let (most_gpus, most_mib) = largest();
    for (p, t) in takes {
        match t.gpu {
            Gpu::None => {}
            Gpu::Whole(n) => needs.whole_gpus += n,
            Gpu::Mps(m) => needs.mps_memory += m,
        }
        if needs.whole_gpus > 0 && needs.mps_memory > 0 {
            return Err(field_error(
                join(p, "resourceRequirements"),
                "whole GPUs and MPS shares do not mix in one task (as in ECS)",
            ));
        }
        needs.cpu += t.cpu;
        needs.memory += t.memory;
        needs.one_per_host |= t.fixed_port;
    }
    if needs.whole_gpus > most_gpus {
        return Err(field_error(path, format!("the task's containers need {} GPUs together: no instance type of the catalogue has more than {most_gpus}", needs.whole_gpus)));
    }
    if needs.mps_memory > most_mib {
        return Err(field_error(path, format!("the task's MPS containers share one GPU and need {} MiB of it together: the largest GPU of the catalogue has {most_mib} MiB", needs.mps_memory)));
    }
    Ok(())
}

/// Task-level `cpu` and `memory`: gpushare reserves per container. With a single
/// container that sets none of its own, the task's value is the container's.
fn task_size(
    td: &TaskDef,
    raw: &Value,
    path: &str,
    blocks: &mut [Block],
    needs: &mut Needs,
    report: &mut Report,
) -> Result<(), FieldError> {
    let fields = [
        ("cpu", &td.cpu, 1024u64, "vcpu"),
        ("memory", &td.memory, 1024u64, "gb"),
    ];
    for (key, v, unit, word) in fields {
        let Some(v) = v else { continue };
        let p = join(path, key);
        let amount = parse_size(v, unit, word).ok_or_else(|| {
            field_error(
                &p,
                format!("{}: expected a number (or \"N {word}\")", at(raw, key)),
            )
        })?;
        let sum = if key == "cpu" {
            needs.cpu
        } else {
            needs.memory
        };
        match blocks {
            [only] if only.get(key).is_none() => {
                only.insert_attr(key, Val::Num(i64::try_from(amount).unwrap_or(i64::MAX)));
                if key == "cpu" {
                    needs.cpu = amount;
                } else {
                    needs.memory = amount;
                }
                report.note(p, format!("the task's {key} {amount} is its only container's (gpushare reserves per container)"));
            }
            _ => report.drop(p, at(raw, key), format!("gpushare reserves per container, not per task: the containers reserve {sum} together")),
        }
    }
    Ok(())
}

/// `"1024"`, `1024`, `"1 vCPU"`, `"2 GB"`: in units of `unit` per `word`.
fn parse_size(v: &NumOrText, unit: u64, word: &str) -> Option<u64> {
    match v {
        NumOrText::Num(n) => Some(*n),
        NumOrText::Text(t) => {
            let t = t.trim().to_ascii_lowercase();
            if let Ok(n) = t.parse::<u64>() {
                return Some(n);
            }
            let n = t.strip_suffix(word)?.trim().parse::<f64>().ok()?;
            (n > 0.0).then(|| (n * unit as f64).round() as u64)
        }
    }
}

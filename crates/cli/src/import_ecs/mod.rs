//! `gpushare import-ecs`: an ECS task definition (and optionally its service) turned
//! into gpushare configuration, HCL or Terraform `gpushare_*` resources, with every
//! field that could not be carried over listed with its reason (docs/migrating-from-ecs.md).
//!
//! Reading is two passes over one JSON value: typed structs ([`ecs`]) for what is
//! carried over, and the raw value for the keys report ([`report`]), so no key is
//! dropped without a line saying so. Nothing is written unless the whole import
//! succeeds.

mod container;
// Shared with `gpushare evaluate`, which writes HCL the same way.
pub(crate) mod doc;
mod ecs;
mod pool;
mod report;
mod service;
mod taskdef;
#[cfg(test)]
mod tests;

pub use doc::Format;

use crate::outfile::write_new;
use doc::{Block, Doc, Val};
use report::{at, FieldError, Report, UNKNOWN};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};

/// `gpushare import-ecs`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ImportEcsArgs {
    /// The ECS task definition: `aws ecs describe-task-definition` output, or
    /// `register-task-definition` input JSON.
    #[arg(value_name = "TASKDEF.json")]
    pub taskdef: PathBuf,
    /// The ECS service running it: `aws ecs describe-services` output (one service),
    /// or `create-service` input JSON.
    #[arg(long, value_name = "SERVICE.json")]
    pub service: Option<PathBuf>,
    /// Write the result into DIR (created if missing) as FAMILY.hcl (or FAMILY.tf)
    /// instead of printing it.
    #[arg(long, value_name = "DIR")]
    pub write: Option<PathBuf>,
    /// hcl: gpushare HCL; tf: Terraform `gpushare_*` resources.
    #[arg(long, value_enum, default_value_t = Format::Hcl)]
    pub format: Format,
    /// Run the service in this existing capacity provider instead of generating one.
    #[arg(long, value_name = "NAME")]
    pub capacity_provider: Option<String>,
    /// With --write: replace a file that exists.
    #[arg(long, requires = "write")]
    pub force: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{file}: cannot read it")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: not JSON")]
    NotJson {
        file: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{file}: not an ECS {what}: expected {expected}")]
    Shape {
        file: String,
        what: &'static str,
        expected: &'static str,
    },
    #[error("{file}: {error}")]
    Field { file: String, error: FieldError },
    #[error("--capacity-provider {0:?} is not a gpushare name (letters, digits, `_`, `-`)")]
    PoolName(String),
}

/// The generated configuration and what it could not carry over.
#[derive(Debug)]
pub struct Outcome {
    pub family: String,
    pub text: String,
    pub report: Report,
}

/// Run the command: exit code 0, or an error (exit 1) with nothing written.
pub fn run(args: &ImportEcsArgs) -> anyhow::Result<u8> {
    let outcome = import(args)?;
    let mut err = std::io::stderr().lock();
    for e in &outcome.report.dropped {
        let _ = writeln!(err, "import-ecs: not carried over: {e}");
    }
    for e in &outcome.report.notes {
        let _ = writeln!(err, "import-ecs: note: {e}");
    }
    match &args.write {
        None => {
            print!("{}", outcome.text);
        }
        Some(dir) => {
            let path = dir.join(format!("{}.{}", outcome.family, args.format.extension()));
            write_new(dir, &path, &outcome.text, args.force)?;
            tracing::info!(path = %path.display(), "import-ecs wrote the configuration");
            println!("Wrote {}", path.display());
        }
    }
    Ok(0)
}

/// Read, map and render; no output yet.
pub fn import(args: &ImportEcsArgs) -> Result<Outcome, ImportError> {
    if let Some(name) = &args.capacity_provider {
        if !container::valid_name(name) {
            return Err(ImportError::PoolName(name.clone()));
        }
    }
    let td_file = args.taskdef.display().to_string();
    let td_json = read_json(&args.taskdef)?;
    let svc = match &args.service {
        Some(p) => Some((p.display().to_string(), read_json(p)?)),
        None => None,
    };
    let inputs = Inputs {
        td_file: &td_file,
        td_json: &td_json,
        service: svc.as_ref().map(|(f, v)| (f.as_str(), v)),
        capacity_provider: args.capacity_provider.as_deref(),
    };
    convert(&inputs, args.format)
}

/// The documents of one import, read.
pub struct Inputs<'a> {
    pub td_file: &'a str,
    pub td_json: &'a Value,
    pub service: Option<(&'a str, &'a Value)>,
    pub capacity_provider: Option<&'a str>,
}

/// The configuration for `inputs`, in `format`.
pub fn convert(inputs: &Inputs<'_>, format: Format) -> Result<Outcome, ImportError> {
    let mut report = Report::default();
    let (td_raw, td_path) = unwrap_task_definition(inputs.td_file, inputs.td_json, &mut report)?;
    let field = |file: &str| {
        let file = file.to_string();
        move |error: FieldError| ImportError::Field { file, error }
    };
    let td: ecs::TaskDef = typed(td_raw, td_path).map_err(field(inputs.td_file))?;
    let mut imported = taskdef::task_definition(&td, td_raw, td_path, &mut report)
        .map_err(field(inputs.td_file))?;
    let mut service_block = None;
    let mut peak = 1;
    let mut pool_name = inputs.capacity_provider.map(str::to_string);
    if let Some((file, json)) = inputs.service {
        let (raw, path) = unwrap_service(file, json, &mut report)?;
        let s: ecs::Service = typed(raw, &path).map_err(field(file))?;
        let name = pool_name
            .clone()
            .or_else(|| service::pool_hint(&s))
            .unwrap_or_else(|| imported.family.clone());
        let out =
            service::service(&s, raw, &path, &imported, &name, &mut report).map_err(field(file))?;
        peak = out.peak_tasks;
        imported.needs.one_per_host |= out.constraints.distinct_host;
        for t in out.constraints.instance_types {
            if !imported.constraints.instance_types.contains(&t) {
                imported.constraints.instance_types.push(t);
            }
        }
        pool_name = Some(name);
        service_block = Some(out.block);
    }
    let mut doc = Doc::default();
    for s in &imported.secrets {
        doc.blocks.push(secret_variable(s));
    }
    match inputs.capacity_provider {
        Some(_) => {
            if let Some(b) = service_block.as_mut() {
                let types = imported.constraints.instance_types.clone();
                if !types.is_empty() {
                    b.insert_attr("instance_types", Val::List(types));
                }
            }
        }
        None => {
            let name = pool_name.unwrap_or_else(|| imported.family.clone());
            let pool = generated_pool(&imported, td_path, &name, peak, &mut report);
            doc.blocks.push(pool.map_err(field(inputs.td_file))?);
        }
    }
    doc.blocks.push(imported.block.clone());
    doc.blocks.extend(service_block);
    doc.header = header(inputs, &imported.family, td_raw, &report);
    let name = format!("{}.{}", imported.family, format.extension());
    Ok(Outcome {
        text: doc.render(format, &name),
        family: imported.family,
        report,
    })
}

fn read_json(path: &Path) -> Result<Value, ImportError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ImportError::Read {
        file: file.clone(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| ImportError::NotJson { file, source })
}

/// Deserialize `raw` (found at `path`), naming the JSON path of a bad field.
fn typed<T: DeserializeOwned>(raw: &Value, path: &str) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(raw).map_err(|e| {
        let inner = e.path().to_string();
        let full = match inner.as_str() {
            "." => path.to_string(),
            _ => report::join(path, &inner),
        };
        report::field_error(
            if full.is_empty() {
                "(top)".into()
            } else {
                full
            },
            e.into_inner().to_string(),
        )
    })
}

/// The task definition object inside `json`: describe-task-definition output wraps
/// it in `taskDefinition`; register input is the object itself.
fn unwrap_task_definition<'a>(
    file: &str,
    json: &'a Value,
    report: &mut Report,
) -> Result<(&'a Value, &'static str), ImportError> {
    let shape = || {
        ImportError::Shape {
        file: file.to_string(),
        what: "task definition",
        expected: "an object with containerDefinitions (register-task-definition input), or {\"taskDefinition\": {...}} (describe-task-definition output)",
    }
    };
    let obj = json.as_object().ok_or_else(shape)?;
    if let Some(inner) = obj.get("taskDefinition").filter(|v| v.is_object()) {
        report.keys(
            json,
            "",
            &["taskDefinition"],
            &[(
                "tags",
                "ECS resource tags: tag the hosts with capacity_provider.tags",
            )],
        );
        return Ok((inner, "taskDefinition"));
    }
    if obj.contains_key("containerDefinitions") || obj.contains_key("family") {
        return Ok((json, ""));
    }
    Err(shape())
}

/// The service object inside `json`: describe-services output (`services`, exactly
/// one), create-service output (`service`), or create-service input itself.
fn unwrap_service<'a>(
    file: &str,
    json: &'a Value,
    report: &mut Report,
) -> Result<(&'a Value, String), ImportError> {
    let shape = |expected| ImportError::Shape {
        file: file.to_string(),
        what: "service",
        expected,
    };
    let obj = json.as_object().ok_or_else(|| shape("a JSON object"))?;
    if let Some(list) = obj.get("services").and_then(Value::as_array) {
        report.keys(
            json,
            "",
            &["services"],
            &[(
                "failures",
                "describe-services failures: services it could not describe",
            )],
        );
        return match list.as_slice() {
            [one] if one.is_object() => Ok((one, "services[0]".to_string())),
            _ => Err(shape("describe-services output with exactly one service (select it with jq '{services: [.services[0]]}')")),
        };
    }
    if let Some(one) = obj.get("service").filter(|v| v.is_object()) {
        report.keys(json, "", &["service"], &[]);
        return Ok((one, "service".to_string()));
    }
    if obj.contains_key("serviceName") || obj.contains_key("desiredCount") {
        return Ok((json, String::new()));
    }
    Err(shape("describe-services output ({\"services\": [...]}) or create-service input (serviceName, desiredCount, ...)"))
}

fn secret_variable(s: &container::SecretVar) -> Block {
    let mut b = Block::new("variable", Some(s.var.clone()));
    b.attr(
        "description",
        Val::Str(format!("ECS secret, valueFrom {}", s.value_from)),
    );
    b.attr("sensitive", Val::Bool(true));
    b
}

/// The generated capacity provider: the cheapest catalogue type that holds a task.
fn generated_pool(
    imported: &taskdef::Imported,
    td_path: &str,
    name: &str,
    peak: u64,
    report: &mut Report,
) -> Result<Block, FieldError> {
    let allowed = &imported.constraints.instance_types;
    let t = pool::choose(&imported.needs, allowed, peak).ok_or_else(|| {
        let among = if allowed.is_empty() {
            String::new()
        } else {
            format!(" among {} (placementConstraints)", allowed.join(", "))
        };
        report::field_error(
            report::join(td_path, "containerDefinitions"),
            format!(
                "no instance type of the catalogue{among} holds one task. {}",
                pool::describe(&imported.needs)
            ),
        )
    })?;
    if !allowed.is_empty() {
        report.note("placementConstraints", format!("memberOf instance types: the generated pool is of {}, the one of them that runs the tasks for the least", t.name));
    }
    Ok(pool::block(name, t, &imported.needs, peak))
}

fn header(inputs: &Inputs<'_>, family: &str, td_raw: &Value, report: &Report) -> Vec<String> {
    let revision = match at(td_raw, "revision") {
        Value::Number(n) => format!(", revision {n}"),
        _ => String::new(),
    };
    let mut lines =
        vec![format!(
        "Imported by `gpushare import-ecs` from {} (ECS task definition {family:?}{revision}){}.",
        inputs.td_file,
        inputs.service.map(|(f, _)| format!(" and {f}")).unwrap_or_default()
    )];
    if !report.dropped.iter().any(|e| e.reason == UNKNOWN) {
        lines.push("See docs/migrating-from-ecs.md for the field mapping.".to_string());
    } else {
        lines.push(
            "Unknown fields are listed too: see docs/migrating-from-ecs.md for the mapping."
                .to_string(),
        );
    }
    lines.push(String::new());
    lines.extend(report.comment_lines());
    lines
}

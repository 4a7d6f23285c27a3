//! Semantic validation of a [`Desired`]: the schema's rules on every value (so
//! a desired state built elsewhere, e.g. by the Terraform provider, gets them
//! too), then the checks across resources: the GPU catalogue, pool sizes, GPU
//! needs against the pool's instance type, MPS rules and references.

use crate::check;
use crate::diag::{suggest, Diagnostic};
use gpushare_core::catalog::{self, InstanceType};
use gpushare_core::model::{Service, ShapeError};
use gpushare_core::schema;
use gpushare_core::{Desired, ResourceKind, SourceLoc};
use std::collections::{BTreeMap, BTreeSet};

/// Every problem found in `desired`, located through `desired.locations` where
/// the loader recorded them. Errors and warnings; empty when all is well.
pub fn validate(desired: &Desired) -> Vec<Diagnostic> {
    let mut v = Validator {
        d: desired,
        out: vec![],
        standalone: false,
    };
    v.schema_rules();
    v.store_url();
    v.controller_reachable_from_hosts();
    v.capacity_providers();
    v.gpu_instances();
    v.task_definitions();
    v.services();
    v.jobs();
    v.tags();
    // The same finding reached twice (e.g. one task definition in two services) is shown once.
    let mut seen = BTreeSet::new();
    v.out
        .retain(|d| seen.insert((d.summary.clone(), d.path.clone())));
    v.out
}

/// Checks one resource on its own, without the checks that need other resources
/// (references, a service's pool): for Terraform's ValidateResourceConfig, where
/// other resources are not visible. `attrs` is the resource as JSON keyed by schema
/// attribute names (the form of `Desired::resources()`; `name`, `id` and computed
/// attributes are ignored). Diagnostics carry paths (`task_definition.NAME.container...`), no locations.
pub fn validate_resource(
    kind: ResourceKind,
    name: &str,
    attrs: &serde_json::Value,
) -> Vec<Diagnostic> {
    let addr = format!("{}.{name}", kind.as_str());
    let mut found = vec![];
    check::check_object(schema::schema(kind), attrs, &addr, true, &mut found);
    if let (ResourceKind::CapacityProvider, Some(obj)) = (kind, attrs.as_object()) {
        for a in registered::missing_for_launched(obj) {
            let why = format!("the attribute `{a}` is required for a launched pool");
            found.push((format!("{addr}.{a}"), why));
        }
    }
    if !found.is_empty() {
        return found
            .into_iter()
            .map(|(path, msg)| {
                let attr = path.rsplit('.').next().unwrap_or(&path).to_string();
                Diagnostic::error(format!("invalid value for `{attr}`"))
                    .path(path)
                    .detail(msg)
            })
            .collect();
    }
    let mut d = Desired::default();
    let res = check::insert_resource(&mut d, kind, name, attrs.clone());
    if let Err(e) = res {
        return vec![Diagnostic::error(format!("invalid {addr}"))
            .path(addr)
            .detail(e.to_string())];
    }
    let mut v = Validator {
        d: &d,
        out: vec![],
        standalone: true,
    };
    v.capacity_providers();
    v.gpu_instances();
    v.task_definitions();
    v.services();
    v.jobs();
    v.tags();
    v.out
}

struct Validator<'a> {
    d: &'a Desired,
    out: Vec<Diagnostic>,
    /// Only the resource itself is known: skip checks against other resources.
    standalone: bool,
}

impl<'a> Validator<'a> {
    /// The most specific recorded location for a dotted path.
    fn loc(&self, path: &str) -> Option<SourceLoc> {
        let mut p = path;
        loop {
            if let Some(l) = self.d.locations.get(p) {
                return Some(l.clone());
            }
            p = &p[..p.rfind('.')?];
        }
    }

    fn error(&mut self, path: &str, summary: String, detail: Option<String>, hint: Option<String>) {
        let mut d = Diagnostic::error(summary).at(self.loc(path)).path(path);
        d.detail = detail;
        d.hint = hint;
        self.out.push(d);
    }

    /// Hosts on EC2 run `gpushare agent`, which joins the controller's agent API with
    /// the token and address its user data carries (it never reads the store): without
    /// `controller_address` a launched host could not join, its tasks would never start,
    /// and once the boot grace is over the planner would replace it as silent.
    /// `store` is a file path or an `etcd://` URL; a near miss says what was meant
    /// (issue 45 item 2).
    fn store_url(&mut self) {
        if let Some((summary, hint)) = self
            .d
            .settings
            .store
            .as_deref()
            .and_then(gpushare_core::model::store_url_issue)
        {
            self.error("gpushare.store", summary, None, Some(hint));
        }
    }

    fn controller_reachable_from_hosts(&mut self) {
        let settings = &self.d.settings;
        if settings.cloud == gpushare_core::model::CloudKind::Ec2
            && settings.controller_address.is_none()
        {
            self.out.push(
                Diagnostic::error("hosts on EC2 need the controller's address")
                    .path("gpushare.controller_address")
                    .detail(
                        "each launched host joins the controller's agent API with a single-use token from its \
                         user data and reads its tasks from it; without an address hosts can reach, their tasks \
                         would never start, and after the boot grace the planner would replace them as silent, \
                         again and again",
                    )
                    .hint("set controller_address = \"https://CONTROLLER:7443\" and serve it with `gpushare reconcile --agent-listen 0.0.0.0:7443` (docs/agent.md)"),
            );
        }
    }

    fn schema_rules(&mut self) {
        let mut found = vec![];
        for (addr, json) in self.d.resources() {
            let s = schema::schema(addr.kind);
            check::check_object(s, &json, &addr.to_string(), true, &mut found);
        }
        if let Ok(settings) = serde_json::to_value(&self.d.settings) {
            check::check_object(
                schema::settings_schema(),
                &settings,
                "gpushare",
                false,
                &mut found,
            );
        }
        for (path, msg) in found {
            let attr = path.rsplit('.').next().unwrap_or(&path).to_string();
            self.error(
                &path,
                format!("invalid value for `{attr}`"),
                Some(msg),
                None,
            );
        }
    }

    /// Tags against EC2's limits, before any launch fails on them: keys of 1 to 128
    /// and values of at most 256 characters, no `aws:` (AWS's) or `gpushare:`
    /// (gpushare's own) key prefix, and at most 50 tags on an instance, counting the
    /// default tags, the pool's, the pinned host's and gpushare's own.
    fn tags(&mut self) {
        use std::collections::BTreeMap;
        type Tags = BTreeMap<String, String>;
        /// gpushare's own tags on every instance (cluster, pool, host id, launch
        /// token, managed-by, store id), and `Name` unless the user sets it.
        const OWN: usize = 6;
        const MAX: usize = 50;
        let d = self.d;
        let defaults = &d.settings.default_tags;
        let mut sets: Vec<(String, &Tags)> = vec![("gpushare.default_tags".into(), defaults)];
        sets.extend(
            self.d
                .capacity_providers
                .iter()
                .map(|(n, cp)| (format!("capacity_provider.{n}.tags"), &cp.tags)),
        );
        sets.extend(
            self.d
                .gpu_instances
                .iter()
                .map(|(n, gi)| (format!("gpu_instance.{n}.tags"), &gi.tags)),
        );
        for (path, tags) in &sets {
            for (k, v) in tags.iter() {
                let at = format!("{path}.{k}");
                let lower = k.to_ascii_lowercase();
                let problem = if k.is_empty() || k.chars().count() > 128 {
                    Some(format!(
                        "tag key {k:?} has {} characters; EC2 takes 1 to 128",
                        k.chars().count()
                    ))
                } else if v.chars().count() > 256 {
                    Some(format!(
                        "the value of tag {k:?} has {} characters; EC2 takes at most 256",
                        v.chars().count()
                    ))
                } else if lower.starts_with("aws:") {
                    Some(format!(
                        "tag key {k:?} uses the prefix `aws:`, reserved for AWS"
                    ))
                } else if lower.starts_with("gpushare:") {
                    Some(format!("tag key {k:?} uses the prefix `gpushare:`, reserved for the tags gpushare sets itself"))
                } else {
                    None
                };
                if let Some(p) = problem {
                    self.error(
                        &at,
                        format!("invalid tag in {path}"),
                        Some(p),
                        Some("rename the tag or shorten it".into()),
                    );
                }
            }
        }
        let mut count = |path: String, layers: &[&Tags]| {
            let mut all: Tags = Tags::new();
            for l in layers {
                all.extend(l.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            let total = all.len() + OWN + usize::from(!all.contains_key("Name"));
            if total > MAX {
                self.error(
                    &path,
                    format!("too many tags for an EC2 instance in {path}: {total}, at most {MAX}"),
                    Some(format!(
                        "{} of yours (default_tags and this resource's) and {} of gpushare's own",
                        all.len(),
                        total - all.len()
                    )),
                    Some(format!("drop at least {} tags", total - MAX)),
                );
            }
        };
        for (n, cp) in &d.capacity_providers {
            count(format!("capacity_provider.{n}.tags"), &[defaults, &cp.tags]);
        }
        for (n, gi) in &d.gpu_instances {
            let pool = d
                .capacity_providers
                .get(&gi.capacity_provider)
                .map(|cp| &cp.tags);
            let empty = Tags::new();
            count(
                format!("gpu_instance.{n}.tags"),
                &[defaults, pool.unwrap_or(&empty), &gi.tags],
            );
        }
    }

    fn instance_type(&mut self, path: &str, name: &str) -> Option<&'static InstanceType> {
        let close = match catalog::require(name) {
            Ok(t) => return Some(t),
            Err(e) => e.close,
        };
        self.error(
            path,
            format!("unknown instance type `{name}`"),
            Some(format!("close matches: {}", close.join(", "))),
            Some(format!(
                "use an EC2 NVIDIA GPU instance type from the built-in catalogue, e.g. `{}`",
                close.first().copied().unwrap_or("g6.xlarge")
            )),
        );
        None
    }

    fn capacity_providers(&mut self) {
        for (name, cp) in &self.d.capacity_providers {
            let addr = format!("capacity_provider.{name}");
            self.port_range(&addr, cp);
            if cp.is_registered() {
                self.registered_pool(&addr, cp);
            } else {
                self.launched_pool(&addr, cp);
                self.launch_options(&addr, cp);
            }
            for (attr, dir) in [
                ("pipe_directory", &cp.mps.pipe_directory),
                ("log_directory", &cp.mps.log_directory),
            ] {
                if let Some(why) = gpushare_core::pool::mps_dir_issue(dir) {
                    self.error(
                        &format!("{addr}.mps.{attr}"),
                        format!("the MPS {attr} of {addr} is not a safe directory"),
                        Some(why),
                        Some("use a directory such as /run/gpushare-mps/pipe (the default)".into()),
                    );
                }
            }
            if let Some(issue) =
                gpushare_core::pool::size_issue(cp.min_size.into(), cp.max_size.into())
            {
                self.error(
                    &format!("{addr}.min_size"),
                    format!("{addr}: {issue}"),
                    Some("a pool's size stays between min_size and max_size".into()),
                    Some(format!(
                        "raise max_size to at least {} or lower min_size",
                        cp.min_size
                    )),
                );
            }
        }
    }

    /// `instance_types` (each known; fallbacks of the same GPUs), `market`, `max_price`.
    fn launch_options(&mut self, addr: &str, cp: &gpushare_core::model::CapacityProvider) {
        for t in &cp.instance_types {
            self.instance_type(&format!("{addr}.instance_types"), t);
        }
        for i in gpushare_core::pool::launch_option_issues(
            addr,
            &cp.instance_type,
            &cp.instance_types,
            cp.market,
            cp.max_price.as_deref(),
        ) {
            self.error(
                &format!("{addr}.{}", i.attribute),
                i.summary,
                Some(i.detail),
                Some(i.hint),
            );
        }
    }

    fn gpu_instances(&mut self) {
        for (name, gi) in &self.d.gpu_instances {
            let addr = format!("gpu_instance.{name}");
            if !self.standalone
                && !self
                    .d
                    .capacity_providers
                    .contains_key(&gi.capacity_provider)
            {
                self.missing(
                    &format!("{addr}.capacity_provider"),
                    "capacity_provider",
                    &gi.capacity_provider,
                    &addr,
                );
            }
            if let Some(t) = &gi.instance_type {
                self.instance_type(&format!("{addr}.instance_type"), t);
            }
        }
    }

    fn missing(&mut self, path: &str, kind: &str, name: &str, from: &str) {
        let names: Vec<&str> = match kind {
            "capacity_provider" => self
                .d
                .capacity_providers
                .keys()
                .map(String::as_str)
                .collect(),
            _ => self.d.task_definitions.keys().map(String::as_str).collect(),
        };
        let hint = suggest(name, names.iter().copied())
            .unwrap_or_else(|| format!("declare {kind} \"{name}\" {{ ... }}"));
        let detail = if names.is_empty() {
            format!("no {kind} is declared")
        } else {
            format!("declared: {}", names.join(", "))
        };
        self.error(
            path,
            format!("bad reference in {from}: no {kind} named \"{name}\""),
            Some(detail),
            Some(hint),
        );
    }

    fn task_definitions(&mut self) {
        for (name, td) in &self.d.task_definitions {
            let addr = format!("task_definition.{name}");
            let mut names = BTreeSet::new();
            let mut both_in_one = false;
            for c in &td.containers {
                let cpath = format!("{addr}.container.{}", c.name);
                if !names.insert(c.name.as_str()) {
                    self.error(
                        &cpath,
                        format!("duplicate container \"{}\" in {addr}", c.name),
                        None,
                        Some("every container needs a distinct name".into()),
                    );
                }
                for k in c.secret_env.keys().filter(|k| c.env.contains_key(*k)) {
                    self.error(
                        &format!("{cpath}.secret_env"),
                        format!("`{k}` is set in both env and secret_env of container {} in {addr}", c.name),
                        Some("the container would get one of the two values, and a plan could show the secret one".into()),
                        Some(format!("keep `{k}` in secret_env only if it is secret, else in env only")),
                    );
                }
                if let Some(g) = &c.gpu {
                    match (g.count, &g.mps) {
                        (Some(_), Some(_)) => {
                            both_in_one = true;
                            self.error(
                            &format!("{cpath}.gpu"),
                            format!("container {} of {addr} asks for both whole GPUs and an MPS share", c.name),
                            Some("a gpu block holds either `count` (whole GPUs) or an `mps` block".into()),
                            Some("keep `count` for dedicated GPUs, or `mps { memory = ... }` to share one".into()),
                        )
                        }
                        (None, None) => self.error(
                            &format!("{cpath}.gpu"),
                            format!("the gpu block of container {} in {addr} is empty", c.name),
                            Some("a gpu block needs `count` (whole GPUs) or an `mps` block".into()),
                            Some("write `gpu { count = 1 }` or `gpu { mps { memory = 4096 } }`, or remove the block".into()),
                        ),
                        _ => {}
                    }
                }
            }
            match td.shape() {
                Err(ShapeError::MixedGpuModes) if !both_in_one => self.error(
                    &format!("{addr}.container"),
                    format!("{addr} mixes whole GPUs and MPS shares"),
                    Some("a task cannot mix whole GPUs (gpu { count }) and MPS shares (gpu { mps }): its MPS containers share one GPU in MPS mode, and a dedicated GPU takes no MPS clients".into()),
                    Some("split the containers into two task definitions, or use one mode for all".into()),
                ),
                Err(ShapeError::ComputeOver100 { total }) => self.error(
                    &format!("{addr}.container"),
                    format!("the MPS containers of {addr} ask for {total}% of one GPU's compute"),
                    Some("all MPS containers of a task share one GPU: their max_compute_percent must add up to 100 or less".into()),
                    Some("lower the max_compute_percent values".into()),
                ),
                Ok(_) | Err(ShapeError::MixedGpuModes) => {}
            }
            self.serving(&addr, td);
        }
    }

    /// Every service: its references, then (for a launched pool) whether its
    /// tasks fit the instance types they may land on.
    fn services(&mut self) {
        let mut groups: BTreeMap<&str, &str> = BTreeMap::new();
        for (name, svc) in &self.d.services {
            self.deployment_bounds(name, svc);
            self.auto_scaling(name, svc);
            self.load_balancers(name, svc, &mut groups);
            let Some(p) = self.service_refs(name, svc) else {
                continue;
            };
            let Some(largest) = self.service_instance_types(&p) else {
                continue;
            };
            self.containers_fit(&p, &largest);
            let Ok(shape) = p.td.shape() else { continue };
            self.task_gpus_fit(&p, &largest, &shape);
            self.task_host_fits(&p, &largest, &shape);
            if p.svc.distinct_host {
                self.distinct_hosts_fit(&p);
            }
        }
    }

    /// A deployment must be able to replace a task: with `min_healthy_percent = 100`
    /// and `max_surge_percent = 0` it could neither stop an old task first nor start
    /// a new one beside it (ECS refuses the same pair).
    fn deployment_bounds(&mut self, name: &str, svc: &Service) {
        let dep = &svc.deployment;
        if svc.desired_count > 0
            && dep.max_running(svc.desired_count) <= dep.min_healthy(svc.desired_count)
        {
            let path = format!("service.{name}.deployment.max_surge_percent");
            self.error(
                &path,
                format!("service.{name}: this deployment could never replace a task"),
                Some(format!(
                    "min_healthy_percent = {} keeps {} of {} tasks healthy and max_surge_percent = {} allows no more than {} running, so no old task may stop and no new one may start",
                    dep.min_healthy_percent,
                    dep.min_healthy(svc.desired_count),
                    svc.desired_count,
                    dep.max_surge_percent,
                    dep.max_running(svc.desired_count),
                )),
                Some("raise max_surge_percent (ECS's maximumPercent is 100 + it) or lower min_healthy_percent".to_string()),
            );
        }
    }

    /// `auto_scaling`: a metric gpushare tracks, a target above 0, and
    /// `min_count <= desired_count <= max_count` with `min_count >= 1`.
    fn auto_scaling(&mut self, name: &str, svc: &Service) {
        let Some(a) = &svc.auto_scaling else { return };
        if let Some((attr, message)) = a.problem(svc.desired_count) {
            let path = format!("service.{name}.auto_scaling.{attr}");
            let hint = match attr {
                "target.metric" => "set metric = \"gpu_sm_percent\", \"gpu_memory_percent\" or a Prometheus metric name with port",
                "target.port" => "name the port_mapping that serves the metric (port = \"http\"), and only for a Prometheus metric",
                "target.path" => "write the path as \"/metrics\"",
                "min_count" | "max_count" => "keep 1 <= min_count <= desired_count <= max_count",
                _ => "set value to the level the metric should stay at, e.g. 70",
            };
            self.error(
                &path,
                format!("service.{name}: auto_scaling.{attr}: {message}"),
                None,
                Some(hint.to_string()),
            );
            return;
        }
        self.scaling_port(name, svc, a);
    }
}

mod fit;
mod jobs;
mod registered;
mod serving;
pub(crate) use registered::missing_for_launched;
#[cfg(test)]
mod tests;

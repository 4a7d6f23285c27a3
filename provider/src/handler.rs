//! The protocol-free provider: one method per RPC, on decoded values.
//!
//! The store's applied resources are the desired set. Applying one Terraform
//! resource loads that set from the store, puts (or removes) the resource, and
//! runs the same engine pass as `gpushare apply` (`Reconciler::prepare` then
//! `execute`: journalled; a run interrupted by StopProvider or a crash is finished
//! by the next one). PlanResourceChange checks a change with the same `prepare`. One engine pass runs at a time in a
//! process; the changes Terraform applies in parallel meanwhile are carried out
//! together by the next pass ([`crate::group_commit`]); a pass is retried when
//! another process moved the state on.

use crate::bridge::{open_error, put, read_from_state, Engine};
use crate::cty::Value;
use crate::data_sources::{placements, read_instance_type};
use crate::diag::{attr_path, has_errors, AttrPath, Diag, PathStep};
use crate::group_commit::GroupCommit;
use crate::plan_scope::FleetWarnings;
use crate::resource::{self, addr_of, canonical, computed, model_json, with_attrs};
use crate::schema;
use gpushare_core::model::{Desired, ResourceAddr, ResourceKind, Settings, StoreState};
use gpushare_core::schema::{self as core_schema, BlockLike};
use gpushare_engine::apply::Hooks;
use gpushare_engine::reconcile::Reconciler;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

mod join_token;
mod plan;
mod refresh;

/// Default state directory, relative to Terraform's working directory.
pub const DEFAULT_STATE_DIR: &str = gpushare_backends::STATE_DIR;

/// How often a change is planned again when another process moved the state on
/// (Terraform applies resources in parallel; several providers may share a store).
const STALE_RETRIES: u32 = 4;

/// Result of PlanResourceChange.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub planned: Value,
    pub requires_replace: Vec<AttrPath>,
    pub diags: Vec<Diag>,
}

#[derive(Default)]
pub struct Handler {
    backend: RwLock<Option<Arc<Engine>>>,
    /// The engine passes that carry out ApplyResourceChange (one at a time, the
    /// changes that wait carried out together).
    commits: GroupCommit,
    /// Set by StopProvider: in-flight applies stop between steps.
    cancel: Arc<AtomicBool>,
    /// Test hooks handed to the engine (set by the binary from the environment).
    hooks: Hooks,
    /// The clock the engine observes with (tests move time on).
    clock: Option<fn() -> u64>,
    /// What this provider process (one `terraform plan` or `apply`) planned for each
    /// resource, so a resource planned later in the same run (Terraform plans a
    /// service after the task definition and pool it references) is checked against
    /// them, not only against what the store has.
    planned_run: std::sync::Mutex<Desired>,
    /// What this provider process planned to destroy (`plan_destroy`), so a later
    /// resource's check counts without them.
    removed_run: std::sync::Mutex<BTreeSet<ResourceAddr>>,
    /// Held by each plan-time check from its scope to its warning: Terraform plans
    /// independent resources in parallel, and a check that ran beside another would
    /// count neither's change in the other; one at a time, the run's last check
    /// counts every change it planned (its figures are `gpushare plan`'s).
    plan_checks: tokio::sync::Mutex<()>,
    /// The fleet-change warnings this process gave (one per new fact, not per resource).
    fleet_warnings: FleetWarnings,
}

/// Why the plan-time check does not plan: the diagnostics found before planning
/// (none when the check is left to apply).
#[derive(Debug)]
struct NotPlanned(Vec<Diag>);

impl std::fmt::Display for NotPlanned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not planned at plan time ({} diagnostics)", self.0.len())
    }
}

impl std::error::Error for NotPlanned {}

fn unknown_kind(type_name: &str) -> Diag {
    Diag::error(
        "Unknown resource type",
        format!("this provider has no resource type {type_name:?}"),
    )
}

impl Handler {
    pub fn new() -> Handler {
        Handler::default()
    }

    /// With test hooks (failpoints, step delays) for the engine.
    pub fn with_hooks(mut self, hooks: Hooks) -> Handler {
        self.hooks = hooks;
        self
    }

    /// With a clock other than the system's (tests).
    pub fn with_clock(mut self, clock: fn() -> u64) -> Handler {
        self.clock = Some(clock);
        self
    }

    /// How many engine passes this process has run for ApplyResourceChange (fewer
    /// than the changes when Terraform applied some in parallel: group commit).
    pub fn engine_passes(&self) -> u64 {
        self.commits.passes()
    }

    fn backend(&self) -> Result<Arc<Engine>, Diag> {
        self.backend
            .read()
            .ok()
            .and_then(|b| b.clone())
            .ok_or_else(|| {
                Diag::error(
                    "Provider not configured",
                    "the gpushare provider was used before ConfigureProvider succeeded",
                )
            })
    }

    // -----------------------------------------------------------------------
    // Provider
    // -----------------------------------------------------------------------

    pub fn validate_provider_config(&self, config: &Value) -> Vec<Diag> {
        let mut out = Vec::new();
        resource::validate_block(schema::provider_schema(), config, &mut Vec::new(), &mut out);
        #[cfg(not(feature = "ec2"))]
        if config.attr("cloud").and_then(Value::as_str) == Some("ec2") {
            out.push(
                Diag::error(
                    "EC2 is not available in this provider build",
                    "terraform-provider-gpushare was built without the `ec2` feature; use cloud = \"local\"",
                )
                .at(attr_path(&["cloud"])),
            );
        }
        if let Some(Value::Map(endpoints)) = config.attr("endpoints") {
            for (service, url) in endpoints {
                if service != "ec2" {
                    out.push(
                        Diag::error(
                            "Unknown endpoint",
                            format!(
                                "no service {service:?} takes an endpoint; the only one is \"ec2\""
                            ),
                        )
                        .at(attr_path(&["endpoints"])),
                    );
                } else if let Some(url) = url
                    .as_str()
                    .filter(|u| !(u.starts_with("http://") || u.starts_with("https://")))
                {
                    out.push(
                        Diag::error(
                            "Invalid endpoint",
                            format!("endpoints.ec2 = {url:?}: expected an http:// or https:// URL"),
                        )
                        .at(attr_path(&["endpoints"])),
                    );
                }
            }
        }
        // An unknown address (computed elsewhere) is checked when it is known.
        let no_controller = config
            .attr("controller_address")
            .is_none_or(|v| matches!(v, Value::Null));
        if config.attr("cloud").and_then(Value::as_str) == Some("ec2") && no_controller {
            out.push(
                Diag::error(
                    "Hosts on EC2 need the controller's address",
                    "each launched host joins the controller's agent API with a single-use token from its \
                     user data: set controller_address = \"https://CONTROLLER:7443\" and serve it with \
                     `gpushare reconcile --agent-listen 0.0.0.0:7443` (docs/agent.md)",
                )
                .at(attr_path(&["controller_address"])),
            );
        }
        if let Some(store) = config.attr("store").and_then(Value::as_str) {
            if let Some((scheme, _)) = store
                .split_once("://")
                .filter(|(s, _)| *s != "file" && *s != "etcd")
            {
                out.push(
                    Diag::error(
                        "Unsupported store",
                        format!("the {scheme:?} store is not available; use etcd://HOST:PORT/PREFIX, file://DIR or state_dir"),
                    )
                    .at(attr_path(&["store"])),
                );
            }
        }
        out
    }

    pub async fn configure(&self, config: &Value) -> Vec<Diag> {
        let diags = self.validate_provider_config(config);
        if has_errors(&diags) {
            return diags;
        }
        let j = match model_json(schema::provider_schema(), config, false) {
            Ok(j) => j,
            Err(path) => {
                return vec![Diag::error(
                    "Provider configuration not known",
                    "the provider configuration depends on values known only after apply",
                )
                .at(path.into_iter().map(PathStep::Attr).collect())]
            }
        };
        let obj = match j {
            serde_json::Value::Object(o) => o,
            _ => serde_json::Map::new(),
        };
        let settings = match Settings::from_provider_block(obj) {
            Ok(s) => s,
            Err(e) => return vec![Diag::error("Invalid provider configuration", e.to_string())],
        };
        // `state_dir` is `store = "file://DIR"` (Settings::from_provider_block), relative
        // to Terraform's working directory.
        let backends = match gpushare_backends::open(&settings, Path::new("")).await {
            Ok(b) => b,
            Err(e) => return vec![open_error(e)],
        };
        let dir = backends
            .state_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
        let mut reconciler = Reconciler::new(backends, "terraform-provider-gpushare")
            .with_hooks(self.hooks)
            .with_stale_retries(STALE_RETRIES);
        if let Some(clock) = self.clock {
            reconciler = reconciler.with_clock(clock);
        }
        tracing::info!(state_dir = %dir.display(), cluster = %settings.cluster, cloud = ?settings.cloud, "configured");
        if let Ok(mut b) = self.backend.write() {
            *b = Some(Arc::new(Engine {
                settings,
                state_dir: dir,
                reconciler,
                prices: Default::default(),
            }));
        }
        diags
    }

    /// StopProvider: in-flight applies stop after their current step.
    pub fn stop(&self) {
        tracing::info!("StopProvider: cancelling in-flight work");
        self.cancel.store(true, Ordering::SeqCst);
    }

    // -----------------------------------------------------------------------
    // Managed resources
    // -----------------------------------------------------------------------

    pub fn validate_resource(&self, type_name: &str, config: &Value) -> Vec<Diag> {
        if type_name == schema::JOIN_TOKEN {
            return self.join_token_validate(config);
        }
        match schema::resource_kind(type_name) {
            Some(kind) => resource::validate(kind, config),
            None => vec![unknown_kind(type_name)],
        }
    }

    /// State written by an earlier provider version (JSON) as a value of today's schema.
    pub fn upgrade_state(
        &self,
        type_name: &str,
        version: i64,
        json: &[u8],
    ) -> Result<Value, Vec<Diag>> {
        let ty = schema::managed_type(type_name).ok_or_else(|| vec![unknown_kind(type_name)])?;
        if version > 0 {
            return Err(vec![Diag::error(
                "Unsupported state version",
                format!("state schema version {version} is newer than this provider's (0)"),
            )]);
        }
        let j: serde_json::Value = serde_json::from_slice(json).map_err(|e| {
            vec![Diag::error(
                "Unreadable state",
                format!("the stored state of this {type_name} is not JSON: {e}"),
            )]
        })?;
        Value::from_json(&j, ty).map_err(|e| vec![Diag::error("Unreadable state", e.to_string())])
    }

    pub async fn apply_resource_change(
        &self,
        type_name: &str,
        prior: &Value,
        planned: &Value,
    ) -> (Value, Vec<Diag>) {
        if type_name == schema::JOIN_TOKEN {
            return self.join_token_apply(prior, planned).await;
        }
        let Some(kind) = schema::resource_kind(type_name) else {
            return (prior.clone(), vec![unknown_kind(type_name)]);
        };
        let backend = match self.backend() {
            Ok(b) => b,
            Err(d) => return (prior.clone(), vec![d]),
        };
        let s = core_schema::schema(kind);
        if planned.is_null() {
            let Some(addr) = addr_of(kind, prior) else {
                return (Value::Null, vec![]);
            };
            let target = addr.clone();
            return match self
                .mutate(&backend, &addr, move |d| {
                    d.remove(&target);
                    Ok(())
                })
                .await
            {
                Ok((_, diags)) => (Value::Null, diags),
                Err(d) => (prior.clone(), d),
            };
        }
        let Some(addr) = addr_of(kind, planned) else {
            return (
                prior.clone(),
                vec![Diag::error("Missing name", "the resource has no name")
                    .at(attr_path(&["name"]))],
            );
        };
        let attrs = match model_json(s, planned, true) {
            Ok(j) => j,
            Err(path) => {
                return (
                    prior.clone(),
                    vec![Diag::error(
                        "Value not known",
                        format!("{} is still unknown at apply", path.join(".")),
                    )],
                )
            }
        };
        let Some(attrs) = canonical(kind, &attrs) else {
            return (
                prior.clone(),
                vec![Diag::error(
                    "Invalid resource",
                    format!("{addr} does not fit gpushare's model"),
                )],
            );
        };
        let old = if prior.is_null() {
            None
        } else {
            addr_of(kind, prior).filter(|a| *a != addr)
        };
        let target = addr.clone();
        let result = self
            .mutate(&backend, &addr, move |d| {
                if let Some(o) = &old {
                    d.remove(o);
                }
                put(d, &target, &attrs)
            })
            .await;
        match result {
            Ok((state, diags)) => (
                with_attrs(
                    planned.clone(),
                    computed(
                        kind,
                        &addr.name,
                        &state,
                        backend.hourly_prices().book().as_ref(),
                    ),
                ),
                diags,
            ),
            // Whatever was done is in the store; the prior state stays until a re-run converges.
            Err(d) => (prior.clone(), d),
        }
    }

    pub async fn read_resource(&self, type_name: &str, current: &Value) -> (Value, Vec<Diag>) {
        if type_name == schema::JOIN_TOKEN {
            return self.join_token_read(current).await;
        }
        let Some(kind) = schema::resource_kind(type_name) else {
            return (current.clone(), vec![unknown_kind(type_name)]);
        };
        let backend = match self.backend() {
            Ok(b) => b,
            Err(d) => return (current.clone(), vec![d]),
        };
        let state = match backend.store().load_shared().await {
            Ok(s) => s,
            Err(e) => {
                return (
                    current.clone(),
                    vec![Diag::from_error("Cannot read the store", &e)],
                )
            }
        };
        let Some(addr) = addr_of(kind, current) else {
            return (current.clone(), vec![]);
        };
        let prices = if kind == ResourceKind::CapacityProvider {
            backend.known_prices(&state).await
        } else {
            backend.hourly_prices()
        };
        (
            read_from_state(kind, &addr, current, &state, &prices),
            vec![],
        )
    }

    pub async fn import(&self, type_name: &str, id: &str) -> (Value, Vec<Diag>) {
        if type_name == schema::JOIN_TOKEN {
            return self.join_token_import(id);
        }
        let Some(kind) = schema::resource_kind(type_name) else {
            return (Value::Null, vec![unknown_kind(type_name)]);
        };
        let backend = match self.backend() {
            Ok(b) => b,
            Err(d) => return (Value::Null, vec![d]),
        };
        let state = match backend.store().load_shared().await {
            Ok(s) => s,
            Err(e) => {
                return (
                    Value::Null,
                    vec![Diag::from_error("Cannot read the store", &e)],
                )
            }
        };
        let addr = ResourceAddr::new(kind, id);
        let v = read_from_state(kind, &addr, &Value::Null, &state, &backend.hourly_prices());
        if v.is_null() {
            let known: Vec<&str> = state
                .resources
                .keys()
                .filter(|a| a.kind == kind)
                .map(|a| a.name.as_str())
                .collect();
            return (
                Value::Null,
                vec![Diag::error(
                    "Cannot import non-existent remote object",
                    format!(
                        "there is no {type_name} named {id:?} in the store {}; known: {}",
                        backend.state_dir.display(),
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    ),
                )],
            );
        }
        (v, vec![])
    }

    // -----------------------------------------------------------------------
    // Data sources
    // -----------------------------------------------------------------------

    pub fn validate_data_source(&self, type_name: &str, config: &Value) -> Vec<Diag> {
        match schema::data_source_schema(type_name) {
            Some(s) => {
                let mut out = Vec::new();
                resource::validate_block(s, config, &mut Vec::new(), &mut out);
                out
            }
            None => vec![Diag::error(
                "Unknown data source",
                format!("this provider has no data source {type_name:?}"),
            )],
        }
    }

    pub async fn read_data_source(&self, type_name: &str, config: &Value) -> (Value, Vec<Diag>) {
        match type_name {
            schema::INSTANCE_TYPE_DATA => read_instance_type(config),
            schema::PLACEMENTS_DATA => {
                let backend = match self.backend() {
                    Ok(b) => b,
                    Err(d) => return (Value::Null, vec![d]),
                };
                match backend.store().load_shared().await {
                    Ok(state) => (placements(config, &state), vec![]),
                    Err(e) => (
                        Value::Null,
                        vec![Diag::from_error("Cannot read the store", &e)],
                    ),
                }
            }
            _ => (
                Value::Null,
                vec![Diag::error(
                    "Unknown data source",
                    format!("this provider has no data source {type_name:?}"),
                )],
            ),
        }
    }

    // -----------------------------------------------------------------------
    // The engine
    // -----------------------------------------------------------------------

    /// Changes the desired set as `f` says (about resource `addr`) and carries it out
    /// with the engine, together with the changes waiting for it (group commit).
    /// Returns the store state afterwards and warnings (tasks that could not be placed).
    /// The stores and the local fleet do their file I/O on tokio's blocking threads,
    /// so the runtime's workers stay free to answer StopProvider meanwhile.
    async fn mutate(
        &self,
        backend: &Arc<Engine>,
        addr: &ResourceAddr,
        f: impl Fn(&mut Desired) -> Result<(), Diag> + Send + Sync + 'static,
    ) -> Result<(Arc<StoreState>, Vec<Diag>), Vec<Diag>> {
        let service = (addr.kind == ResourceKind::Service).then(|| addr.name.clone());
        self.commits
            .carry_out(backend.clone(), self.cancel.clone(), service, Box::new(f))
            .await
    }
}

/// Whether any argument (non-computed-only attribute or block) differs.
fn arguments_differ(s: &dyn BlockLike, prior: &Value, proposed: &Value) -> bool {
    s.attributes()
        .iter()
        .filter(|a| !a.is_computed_only())
        .any(|a| prior.attr(&a.name) != proposed.attr(&a.name))
        || s.blocks()
            .iter()
            .any(|b| prior.attr(&b.name) != proposed.attr(&b.name))
}

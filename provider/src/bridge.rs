//! The provider's bridge to the engine: the configured backends, one engine pass
//! over a changed desired set (the reconcile pass the CLI runs, its errors as
//! diagnostics), and the desired set as the store holds it.

use crate::cty::Value;
use crate::diag::{attr_path, Diag};
use crate::resource::{canonical, computed, model_json, state_from_model, with_attrs};
use gpushare_backends::OpenError;
use gpushare_core::model::{Desired, Live, ResourceAddr, ResourceKind, Settings, StoreState};
use gpushare_core::schema as core_schema;
use gpushare_engine::apply::ApplyError;
use gpushare_engine::cloud::OpenCloudError;
use gpushare_engine::pass::{Prepare, ScopeError, Scoped};
use gpushare_engine::reconcile::{ReconcileError, Reconciler, Run};
use gpushare_engine::store::Store;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// The provider's engine once configured: the settings, the state directory and the
/// engine's reconciler over the configured backends (as the CLI runs it).
pub struct Engine {
    pub settings: Settings,
    pub state_dir: PathBuf,
    pub reconciler: Reconciler,
    /// The prices of the last plan this process made ([`Engine::learn_prices`]).
    pub prices: std::sync::Mutex<HourlyPrices>,
}

/// The prices a pool's `hourly_cost` is counted at: those the engine's plans use
/// (the fleet's region's, [`gpushare_core::plan::Cost::prices`]), once this process
/// has planned or gathered them ([`Engine::known_prices`]); the built-in table where
/// the cloud has none (the local fleet).
#[derive(Debug, Clone, Default)]
pub enum HourlyPrices {
    /// Neither planned nor gathered yet in this process.
    #[default]
    NotYet,
    Known(Option<gpushare_core::catalog::PriceBook>),
}

impl HourlyPrices {
    /// The book to price with (`None`: the built-in table), once known.
    pub fn book(&self) -> Option<gpushare_core::catalog::PriceBook> {
        match self {
            HourlyPrices::NotYet => None,
            HourlyPrices::Known(b) => b.clone(),
        }
    }
}

impl Engine {
    /// Remember the prices a plan used, for the pools' `hourly_cost`.
    pub fn learn_prices(&self, plan: &gpushare_core::plan::Plan) {
        *gpushare_core::util::lock(&self.prices) = HourlyPrices::Known(plan.cost.prices.clone());
    }

    /// The prices known so far ([`HourlyPrices`]).
    pub fn hourly_prices(&self) -> HourlyPrices {
        gpushare_core::util::lock(&self.prices).clone()
    }

    /// The prices the plans use, gathered from the cloud beside the pools of `state`
    /// when this process has not planned yet (a refresh comes before any plan): the
    /// same book, so a read gives the `hourly_cost` an apply gave. A cloud that
    /// cannot gather now leaves the built-in table for this read.
    pub async fn known_prices(&self, state: &StoreState) -> HourlyPrices {
        let now = self.hourly_prices();
        if !matches!(now, HourlyPrices::NotYet) {
            return now;
        }
        let Ok(desired) = desired_from_state(state, &self.settings) else {
            return now;
        };
        let cloud = &self.reconciler.backends().cloud;
        match cloud.gather(&desired.capacity_providers).await {
            Ok(facts) => {
                let known = HourlyPrices::Known(facts.prices);
                *gpushare_core::util::lock(&self.prices) = known.clone();
                known
            }
            Err(e) => {
                tracing::debug!(error = %e, "prices not gathered; the built-in table prices this read");
                now
            }
        }
    }

    pub fn store(&self) -> &dyn Store {
        self.reconciler.store()
    }
}

/// A diagnostic carried through the engine's pass as an error.
#[derive(Debug)]
struct DiagError(Diag);

impl std::fmt::Display for DiagError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.0.summary, self.0.detail)
    }
}

impl std::error::Error for DiagError {}

/// A warning of an engine pass, with the service it is about (if any).
pub(crate) struct EngineWarning {
    pub service: Option<String>,
    pub diag: Diag,
}

pub(crate) async fn run_engine(
    backend: &Engine,
    cancel: &AtomicBool,
    f: impl Fn(&mut Desired) -> Result<(), Diag> + Sync,
) -> Result<(Arc<StoreState>, Vec<EngineWarning>), Vec<Diag>> {
    let settings = &backend.settings;
    let r = &backend.reconciler;
    let run = Run {
        cancel: Some(cancel),
        progress: None,
    };
    // The store's applied resources with this change, as observed in the pass.
    let scope = |given: &Desired, live: &mut Live| -> Result<Scoped, ScopeError> {
        let mut desired = desired_from_state(&live.state, &given.settings).map_err(DiagError)?;
        f(&mut desired).map_err(DiagError)?;
        Ok(Scoped {
            desired,
            notes: vec![],
        })
    };
    let given = Desired {
        settings: settings.clone(),
        ..Desired::default()
    };
    let passed = match r
        .prepare(&given, Prepare::to_apply(&scope).with_run(run))
        .await
    {
        Ok(prepared) => r.execute(prepared, r.policy(), run).await,
        Err(e) => Err(e),
    };
    let outcome = match passed {
        Ok(o) => o,
        Err(ReconcileError::Desired(e)) => {
            return Err(vec![match e.downcast::<DiagError>() {
                Ok(d) => d.0,
                Err(e) => Diag::from_error("gpushare cannot build the desired set", &*e),
            }])
        }
        Err(ReconcileError::Cancelled) => {
            return Err(vec![Diag::error(
                "Interrupted",
                "Terraform asked the provider to stop; run apply again to finish",
            )])
        }
        Err(ReconcileError::Apply(e @ ApplyError::Cancelled { .. })) => {
            return Err(vec![Diag::from_error("Interrupted", &e)]);
        }
        Err(ReconcileError::Plan(e)) => {
            return Err(vec![Diag::from_error(
                "gpushare cannot plan this change",
                &e,
            )])
        }
        Err(ReconcileError::Observe(e)) => {
            return Err(vec![Diag::from_error("Cannot observe the fleet", &e)])
        }
        Err(e) => return Err(vec![Diag::from_error("gpushare apply failed", &e)]),
    };
    backend.learn_prices(&outcome.plan);
    let mut warnings: Vec<EngineWarning> = outcome
        .plan
        .unplaced
        .iter()
        .map(|u| EngineWarning {
            service: Some(u.service.clone()),
            diag: Diag::warning(
                "Task not placed",
                format!("{} of service {}: {}", u.key, u.service, u.reason),
            ),
        })
        .collect();
    // The local fleet's agents started what was placed (the pass's round after apply).
    if let Some(e) = &outcome.agents {
        warnings.push(EngineWarning {
            service: None,
            diag: Diag::from_error("Host agents did not report", e),
        });
    }
    let state = r
        .store()
        .load_shared()
        .await
        .map_err(|e| vec![Diag::from_error("Cannot read the store", &e)])?;
    Ok((state, warnings))
}

/// The backends factory's errors as diagnostics.
pub(crate) fn open_error(e: OpenError) -> Diag {
    match e {
        OpenError::Cloud(OpenCloudError::Local { dir, source }) => Diag::from_error(
            format!("Cannot open the local fleet in {}", dir.display()),
            &source,
        ),
        OpenError::Cloud(OpenCloudError::Ec2(source)) => {
            Diag::from_error("Cannot set up the ec2 cloud", &*source).at(attr_path(&["cloud"]))
        }
        OpenError::Cloud(OpenCloudError::Ec2NotBuilt) => Diag::error(
            "EC2 is not available in this provider build",
            "terraform-provider-gpushare was built without the `ec2` feature; use cloud = \"local\"",
        )
        .at(attr_path(&["cloud"])),
        OpenError::FileStore { dir, source } => Diag::from_error(
            format!("Cannot open the file store in {}", dir.display()),
            &source,
        ),
        OpenError::Etcd(source) => {
            Diag::from_error("Cannot open the etcd store", &source).at(attr_path(&["store"]))
        }
        e @ (OpenError::UnsupportedStore { .. }
        | OpenError::EmptyPath { .. }
        | OpenError::BadStoreUrl { .. }) => {
            Diag::error("Unsupported store", e.to_string()).at(attr_path(&["store"]))
        }
    }
}

/// The value of `addr` from the store: the current value's arguments when they still
/// mean the same as the store's (so defaults left null stay null), the store's otherwise;
/// computed attributes from the store. Null when the store no longer has it.
pub(crate) fn read_from_state(
    kind: ResourceKind,
    addr: &ResourceAddr,
    current: &Value,
    state: &StoreState,
    prices: &HourlyPrices,
) -> Value {
    let Some(applied) = state.resources.get(addr) else {
        return Value::Null;
    };
    let s = core_schema::schema(kind);
    let stored = canonical(kind, &applied.attrs);
    let same = !current.is_null()
        && model_json(s, current, true)
            .ok()
            .and_then(|j| canonical(kind, &j))
            == stored
        && stored.is_some();
    let base = if same {
        current.clone()
    } else {
        state_from_model(s, &addr.name, &applied.attrs)
    };
    with_attrs(
        base,
        computed(kind, &addr.name, state, prices.book().as_ref()),
    )
}

/// The desired set as the store has it (its applied resources), with these settings.
pub fn desired_from_state(state: &StoreState, settings: &Settings) -> Result<Desired, Diag> {
    let mut d = Desired {
        settings: settings.clone(),
        ..Desired::default()
    };
    for (addr, r) in &state.resources {
        put(&mut d, addr, &r.attrs)?;
    }
    Ok(d)
}

/// Put `addr` into `d` from its attributes as the store (or this run) has them.
pub(crate) fn put(
    d: &mut Desired,
    addr: &ResourceAddr,
    attrs: &serde_json::Value,
) -> Result<(), Diag> {
    d.put(addr, attrs)
        .map_err(|e| Diag::error("Unreadable resource", format!("{addr} in the store: {e}")))
}

/// Puts every resource of `from` into `d` (settings and locations stay `d`'s).
pub(crate) fn overlay(d: &mut Desired, from: &Desired) {
    for addr in from.addresses() {
        d.put_from(from, &addr);
    }
}

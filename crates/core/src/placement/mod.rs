//! The placement engine: which GPU of which host each task goes to, and how many
//! hosts each pool needs. Pure and deterministic for a seed.
//!
//! The planner calls [`place`]; the benchmark (`gpushare-bench`) drives the same
//! scoring code through [`Cluster`] one pod at a time, its baselines behind the
//! [`Scorer`] trait.
//!
//! The modules, each using only those before it: `input` and `outcome` (what
//! the engine is given and gives back); `need` (requests compiled against a
//! cluster's names; the typical shapes); `fill` (bounded subset-sum); `sharing`
//! (the planned sharing patterns); `fgd` (the fragmentation measure); `expect`
//! (the expected shapes as the scores use them); `state` (the cluster and its
//! load); `score` (choosing a host under a [`Scorer`]); `policies` (the
//! engine's own scorers); `explain` (why a task was not placed); `batch`
//! ([`place`]).

mod batch;
mod expect;
mod explain;
mod fgd;
mod fill;
mod input;
mod need;
mod outcome;
mod policies;
mod remaining;
mod score;
mod sharing;
mod state;

pub use fgd::GpuView;
pub use input::{GpuLoad, HostLoad, InstanceShape, PlacementInput, PoolSpec, Request};
pub use need::{GpuNeed, Need, Typical};
pub use outcome::{Assignment, HostRef, PlacementOutcome, Unplaced};
pub use policies::Policy;
pub use score::{Candidate, Pick, Placed, Scorer};
pub use state::{Cluster, ClusterHost, GpuState};

/// Place every request. Existing load is kept (nothing running is moved here);
/// new hosts are opened only when no existing or already-opened host fits.
///
/// Batch mode: the whole set is known, so the hardest tasks go first (whole-GPU
/// tasks by GPU count, then MPS tasks by GPU memory, then CPU-only tasks), and a
/// GPU opened for an MPS task under `binpack` is completed with the subset of the
/// remaining MPS tasks that fills it best. Assignments come back in request order.
pub fn place(input: &PlacementInput) -> PlacementOutcome {
    batch::place(input)
}

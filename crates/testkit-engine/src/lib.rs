//! gpushare's engine-level test support: what the tests of the engine and of the
//! crates above it share but `gpushare-testkit` cannot hold, because it needs a
//! workspace crate other than `gpushare-core`. A dev-dependency only: no crate's
//! shipped code depends on it (tests/architecture.rs, rule 3), so the cycles it
//! closes (the engine's tests use it, it uses the engine) are dev-only, and no test
//! includes support source by `#[path]`.
//!
//! - [`agent`]: host, task and revision fixtures written into a file store, the
//!   stand-in MPS control program, the locally built busybox image.
//! - [`etcd`]: a real etcd (and a three-member cluster) on loopback.
//! - [`file_store`]: the file store read through the engine's own `FileStore`.
//! - [`conformance`]: the store conformance suite every store runs
//!   ([`store_conformance_suite!`]).
//! - `ec2` (feature `ec2`): the moto server harness and fault proxy of the EC2 backend.

pub mod agent;
pub mod conformance;
#[cfg(feature = "ec2")]
pub mod ec2;
pub mod etcd;
pub mod file_store;

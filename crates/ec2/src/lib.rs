//! The `ec2` cloud backend of gpushare: [`Ec2Cloud`] implements
//! [`gpushare_engine::cloud::Cloud`] with its own small EC2 Query API client ([`api`]).
//!
//! - Configuration ([`Ec2Options`]): the standard AWS credential chain and region, the
//!   endpoint override (`AWS_ENDPOINT_URL_EC2` / `AWS_ENDPOINT_URL`, or the settings'
//!   `ec2_endpoint`, which wins), retries with jittered exponential backoff ([`retry`]),
//!   and a semaphore bounding concurrent API calls.
//! - Catalogue: DescribeInstanceTypes (GPU model, count, MiB per GPU) merged with the
//!   built-in catalogue's prices ([`merge_instance_type`]).
//! - Launch: one RunInstances per planned host, of exactly the type, image, subnet and
//!   zone the plan fixed, idempotent by a launch-token tag looked up first and a
//!   deterministic client token; a capacity error (InsufficientInstanceCapacity) is
//!   recorded so the next plan launches elsewhere; quota errors stop with a clear message.
//! - Bootstrap: [`render_user_data`] (EXCLUSIVE_PROCESS, the MPS control daemon unit, the
//!   agent unit), under 16 KB, checked.
//! - Observe and retire: DescribeInstances by cluster tag (paginated), EC2 states mapped
//!   onto [`HostState`](gpushare_core::model::HostState); TerminateInstances confirmed by describe.

pub mod api;
mod cloud;
pub mod elbv2;
mod error;
pub mod iam;
mod options;
pub mod partition;
pub mod pricing;
pub mod retry;
pub mod tags;
mod user_data;

pub use cloud::{client_token, host_state, merge_instance_type, Ec2Cloud, DEFAULT_IMAGE_NAME};
pub use elbv2::Elbv2;
pub use error::Ec2Error;
pub use options::Ec2Options;
pub use user_data::{render_user_data, UserDataError, UserDataInput, USER_DATA_LIMIT};

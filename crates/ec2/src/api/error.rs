//! What can go wrong with one EC2 call (defined in the crate's `error` module, so that
//! [`crate::retry`] can name them without importing `api`).

pub use crate::error::{ApiError, ServiceError};

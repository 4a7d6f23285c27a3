//! Retry classification on top of the SDK's standard mode.
//!
//! EC2 answers InsufficientInstanceCapacity with HTTP 500, which the SDK's status-code
//! classifier would retry in the same subnet. Capacity and quota errors are decisions
//! for the launcher (next subnet, or stop), so they are never retried here.

use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::operation::run_instances::RunInstancesError;
use aws_smithy_runtime_api::client::interceptors::context::InterceptorContext;
use aws_smithy_runtime_api::client::retries::classifiers::{
    ClassifyRetry, RetryAction, RetryClassifierPriority,
};

/// Codes meaning "this subnet or zone has no room for this type now": try the next one.
pub const CAPACITY_CODES: &[&str] = &[
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientFreeAddressesInSubnet",
    "Unsupported",
];

/// Codes meaning "the account may not run more": stop and tell the user.
pub const QUOTA_CODES: &[&str] = &[
    "InstanceLimitExceeded",
    "VcpuLimitExceeded",
    "MaxSpotInstanceCountExceeded",
];

#[derive(Debug, Default)]
pub struct NoRetryOnCapacity;

impl ClassifyRetry for NoRetryOnCapacity {
    fn classify_retry(&self, ctx: &InterceptorContext) -> RetryAction {
        let Some(Err(err)) = ctx.output_or_error() else {
            return RetryAction::NoActionIndicated;
        };
        let code = err
            .as_operation_error()
            .and_then(|e| e.downcast_ref::<RunInstancesError>())
            .and_then(|e| e.code());
        match code {
            Some(c) if CAPACITY_CODES.contains(&c) || QUOTA_CODES.contains(&c) => {
                RetryAction::RetryForbidden
            }
            _ => RetryAction::NoActionIndicated,
        }
    }

    fn name(&self) -> &'static str {
        "gpushare: no retry on capacity or quota errors"
    }

    fn priority(&self) -> RetryClassifierPriority {
        RetryClassifierPriority::run_after(RetryClassifierPriority::transient_error_classifier())
    }
}

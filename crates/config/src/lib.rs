//! HCL configuration loading.

//! EC2 cloud backend.

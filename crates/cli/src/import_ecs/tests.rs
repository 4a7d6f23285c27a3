//! Unit tests of the ECS mapping.

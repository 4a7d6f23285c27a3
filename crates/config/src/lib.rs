//! gpushare-config: loads gpushare HCL (and the `gpushare_*` resources of
//! Terraform `.tf` files) into a [`Desired`](gpushare_core::Desired), with located diagnostics.
//!
//! - [`load_dir`] / [`load_sources`]: parse, evaluate (variables, locals,
//!   references, functions) and check every value against the schemas in
//!   `schemas/` (types, ranges, enums, patterns, required attributes).
//! - [`validate`]: semantic checks across resources (the GPU catalogue, sizes,
//!   MPS rules, references), also used by the Terraform provider;
//!   [`validate_resource`]: the checks one resource allows on its own.
//!
//! `.tf` files contribute their `resource "gpushare_*"` blocks (`name` is an
//! attribute, nested labelled blocks such as `container` take `name` as an
//! attribute), `variable` and `locals` blocks and `data "gpushare_instance_type"`
//! lookups; references `gpushare_KIND.LABEL.name` / `.id` resolve to the name.
//! Every other block is ignored, as are `depends_on` and `lifecycle`.
//! - [`format_source`]: the canonical formatting of `gpushare fmt`.
//!
//! Every diagnostic carries `file:line:col` where the input has one, what was
//! expected and a hint.
//!
//! Hostile input is bounded ([`limits`]): nesting depth and operator chains are
//! checked before parsing, invalid string escapes are refused, arithmetic is
//! checked (division by zero is an error), and every evaluated value and the
//! evaluation work of one load are limited; each ends with a located error.
//!
//! Locations: `Desired::locations` holds each resource's block under
//! `kind.name` (e.g. `service.embedder`) and each attribute under its dotted
//! path below that (`task_definition.llm.container.server.gpu.mps.memory`,
//! `gpushare.cluster`).

mod check;
mod diag;
mod fmt;
mod funcs;
pub mod limits;
mod load;
mod validate;

pub use check::check_validation;
pub use diag::{Diagnostic, Diagnostics, Severity};
pub use fmt::format_source;
pub use load::{auto_var_files, load_dir, load_sources};
pub use validate::{validate, validate_resource};

/// Options of a load.
///
/// Where a variable's value comes from, lowest precedence first: its default,
/// `GPUSHARE_VAR_<name>` (with `read_env`), `terraform.tfvars`,
/// `terraform.tfvars.json`, `*.auto.tfvars(.json)` in lexical order (with
/// `auto_var_files`, from the directory of [`load_dir`]), each of `var_files`, each
/// of `vars`. A later value wins.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// `-var name=value` overrides, in command-line order (a later one wins).
    pub vars: Vec<(String, String)>,
    /// Read `GPUSHARE_VAR_<name>` environment variables.
    pub read_env: bool,
    /// `-var-file` files (`*.tfvars` HCL, `*.tfvars.json` JSON), in command-line order
    /// (a later one wins); below `vars`.
    pub var_files: Vec<std::path::PathBuf>,
    /// Read `terraform.tfvars`, `terraform.tfvars.json` and `*.auto.tfvars(.json)` of the
    /// configuration directory, as Terraform does ([`load_dir`] only).
    pub auto_var_files: bool,
}

/// One configuration text and the name it is shown under in diagnostics.
/// A name ending in `.tf` is read as Terraform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub name: String,
    pub text: String,
}

/// The result of [`load_dir`].
#[derive(Debug, Clone)]
pub struct Loaded {
    pub desired: gpushare_core::Desired,
    /// The files read, sorted.
    pub files: Vec<std::path::PathBuf>,
    /// Warnings (the load succeeded).
    pub warnings: Vec<Diagnostic>,
}

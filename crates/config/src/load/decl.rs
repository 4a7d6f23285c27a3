//! Declarations as collected from the files, the loader state, and the
//! diagnostic for a second declaration.

use super::parse::File;
use crate::diag::Diagnostic;
use crate::LoadOptions;
use gpushare_core::{ResourceKind, SourceLoc};
use hcl::edit::expr::Expression;
use hcl::edit::structure::{Block, Body};
use std::collections::BTreeMap;

pub(super) const TOP_BLOCKS: [&str; 8] = [
    "gpushare",
    "variable",
    "locals",
    "capacity_provider",
    "gpu_instance",
    "task_definition",
    "service",
    "job",
];

/// A resource block as declared.
pub(super) struct Decl<'a> {
    pub(super) kind: ResourceKind,
    /// HCL: the label (= name). Terraform: the resource label.
    pub(super) label: String,
    pub(super) file: usize,
    pub(super) block: &'a Block,
    pub(super) loc: Option<SourceLoc>,
    /// The `name` attribute of a Terraform resource.
    pub(super) name_expr: Option<&'a Expression>,
}

pub(super) struct VarDecl<'a> {
    pub(super) file: usize,
    pub(super) block: &'a Block,
    pub(super) loc: Option<SourceLoc>,
}

/// `data "gpushare_instance_type" "LABEL" { name = ... }` in a .tf file: a catalogue lookup.
#[derive(Clone, Copy)]
pub(super) struct DataDecl<'a> {
    pub(super) file: usize,
    pub(super) label: &'a str,
    pub(super) name_expr: &'a Expression,
}

pub(super) const INSTANCE_TYPE_DATA: &str = "gpushare_instance_type";

/// Terraform meta-arguments with no meaning for gpushare plan: skipped in .tf resources.
pub(super) const TF_IGNORED_ARGS: [&str; 2] = ["depends_on", "provider"];
pub(super) const TF_IGNORED_BLOCKS: [&str; 4] =
    ["lifecycle", "provisioner", "connection", "timeouts"];
/// Meta-arguments that would change what is declared: refused.
pub(super) const TF_UNSUPPORTED_ARGS: [&str; 2] = ["count", "for_each"];

pub(super) struct LocalDecl<'a> {
    pub(super) file: usize,
    pub(super) expr: &'a Expression,
    pub(super) loc: Option<SourceLoc>,
}

/// The settings block (`gpushare { }` or a .tf `provider "gpushare"`): its file,
/// the block and where it starts.
pub(super) type SettingsDecl<'a> = (usize, &'a Block, Option<SourceLoc>);

/// What the top-level blocks of every file declare.
#[derive(Default)]
pub(super) struct Collected<'a> {
    pub(super) decls: Vec<Decl<'a>>,
    pub(super) vars: BTreeMap<String, VarDecl<'a>>,
    pub(super) locals: BTreeMap<String, LocalDecl<'a>>,
    pub(super) settings: Option<SettingsDecl<'a>>,
}

pub(super) struct Loader<'a> {
    pub(super) files: &'a [(File, Body)],
    pub(super) diags: Vec<Diagnostic>,
    pub(super) opts: &'a LoadOptions,
    /// Values from variable definition files, lowest precedence first.
    pub(super) assigned: Vec<super::tfvars::Assigned>,
    pub(super) data: Vec<DataDecl<'a>>,
    /// Evaluation work done so far (bounded by `limits::MAX_EVAL_WORK`).
    pub(super) work: super::eval::Work,
}

impl<'a> Loader<'a> {
    pub(super) fn err(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    pub(super) fn file(&self, i: usize) -> &'a File {
        &self.files[i].0
    }
}

/// `duplicate WHAT` at `at`, the second declaration, saying where the first one stands.
pub(super) fn declared_again(
    what: &str,
    at: Option<SourceLoc>,
    first: Option<&SourceLoc>,
) -> Diagnostic {
    let first = first.map_or_else(|| "elsewhere".to_string(), ToString::to_string);
    Diagnostic::error(format!("duplicate {what}"))
        .at(at)
        .detail(format!("{what} is also declared at {first}"))
}

//! Collecting declarations: top-level blocks of every file, the settings
//! block (`gpushare { }` or a .tf `provider "gpushare"`).

use super::decl::{
    declared_again, DataDecl, Decl, Loader, LocalDecl, VarDecl, INSTANCE_TYPE_DATA, TOP_BLOCKS,
};
use crate::diag::{suggest, Diagnostic};
use gpushare_core::{ResourceKind, SourceLoc};
use hcl::edit::structure::{Block, Structure};
use hcl::edit::Span;
use std::collections::BTreeMap;

impl<'a> Loader<'a> {
    /// Record the settings block (`gpushare { }`, or a .tf file's `provider
    /// "gpushare"`); a second one names the first.
    pub(super) fn settings_block(
        &mut self,
        fi: usize,
        b: &'a Block,
        loc: Option<SourceLoc>,
        settings: &mut Option<(usize, &'a Block, Option<SourceLoc>)>,
    ) {
        match settings {
            Some((_, _, first)) => self.err(
                declared_again("gpushare block", loc, first.as_ref())
                    .hint("keep one gpushare block (or provider \"gpushare\" block)"),
            ),
            None => *settings = Some((fi, b, loc)),
        }
    }

    pub(super) fn collect(
        &mut self,
        fi: usize,
        b: &'a Block,
        decls: &mut Vec<Decl<'a>>,
        vars: &mut BTreeMap<String, VarDecl<'a>>,
        locals: &mut BTreeMap<String, LocalDecl<'a>>,
        settings: &mut Option<(usize, &'a Block, Option<SourceLoc>)>,
    ) {
        let file = self.file(fi);
        let ident = b.ident.as_str();
        let loc = file.loc(b.ident.span());
        let labels: Vec<&str> = b.labels.iter().map(|l| l.as_str()).collect();
        match ident {
            "variable" => {
                let [name] = labels[..] else {
                    self.err(
                        Diagnostic::error("a variable block needs exactly one label, its name")
                            .at(loc)
                            .hint("write `variable \"NAME\" { default = ... }`"),
                    );
                    return;
                };
                if let Some(first) = vars.get(name) {
                    self.err(
                        declared_again(&format!("variable \"{name}\""), loc, first.loc.as_ref())
                            .hint("remove one of the two declarations"),
                    );
                    return;
                }
                vars.insert(
                    name.to_string(),
                    VarDecl {
                        file: fi,
                        block: b,
                        loc,
                    },
                );
            }
            "locals" => {
                if !labels.is_empty() {
                    self.err(
                        Diagnostic::error("a locals block takes no labels")
                            .at(loc.clone())
                            .hint("write `locals { name = value }`"),
                    );
                }
                for st in b.body.iter() {
                    match st {
                        Structure::Attribute(a) => {
                            let name = a.key.as_str();
                            let aloc = file.loc(a.key.span());
                            if let Some(first) = locals.get(name) {
                                self.err(
                                    declared_again(
                                        &format!("local value \"{name}\""),
                                        aloc,
                                        first.loc.as_ref(),
                                    )
                                    .hint("remove one of the two definitions"),
                                );
                                continue;
                            }
                            locals.insert(
                                name.to_string(),
                                LocalDecl {
                                    file: fi,
                                    expr: &a.value,
                                    loc: aloc,
                                },
                            );
                        }
                        Structure::Block(inner) => self.err(
                            Diagnostic::error(format!(
                                "unexpected block `{}` in locals",
                                inner.ident.as_str()
                            ))
                            .at(file.loc(inner.ident.span()))
                            .hint("a locals block holds only attributes: `name = value`"),
                        ),
                    }
                }
            }
            "resource" if file.tf => {
                let [ty, label] = labels[..] else {
                    return; // not a well-formed resource block; Terraform reports it
                };
                let Some(kind_str) = ty.strip_prefix("gpushare_") else {
                    return;
                };
                if kind_str == "join_token" {
                    // Terraform's alone (a pool token for your own servers; gpushare
                    // mints them with `token create`): not a resource of the model.
                    return;
                }
                let Some(kind) = ResourceKind::parse(kind_str) else {
                    let known: Vec<String> = ResourceKind::ALL
                        .iter()
                        .map(|k| k.terraform_type())
                        .collect();
                    self.err(
                        Diagnostic::error(format!("unknown resource type `{ty}`"))
                            .at(file.loc(b.labels.first().and_then(Span::span)))
                            .detail(format!("gpushare provides {}", known.join(", ")))
                            .maybe_hint(suggest(ty, known.iter().map(String::as_str))),
                    );
                    return;
                };
                if decls
                    .iter()
                    .any(|d| d.kind == kind && d.label == label && self.file(d.file).tf)
                {
                    self.err(
                        Diagnostic::error(format!("duplicate resource {ty}.{label}"))
                            .at(loc)
                            .hint("every resource label must be unique within its type"),
                    );
                    return;
                }
                let name_expr = b.body.get_attribute("name").map(|a| &a.value);
                if name_expr.is_none() {
                    self.err(
                        Diagnostic::error(format!(
                            "missing required attribute `name` in {ty}.{label}"
                        ))
                        .at(loc)
                        .hint(format!("add `name = \"{label}\"`")),
                    );
                    return;
                }
                decls.push(Decl {
                    kind,
                    label: label.to_string(),
                    file: fi,
                    block: b,
                    loc,
                    name_expr,
                });
            }
            "data" if file.tf => {
                if let [INSTANCE_TYPE_DATA, label] = labels[..] {
                    match b.body.get_attribute("name") {
                        Some(a) => self.data.push(DataDecl { file: fi, label, name_expr: &a.value }),
                        None => self.err(
                            Diagnostic::error(format!("missing required attribute `name` in data.{INSTANCE_TYPE_DATA}.{label}"))
                                .at(loc)
                                .hint("add `name = \"g6.xlarge\"` (an instance type)"),
                        ),
                    }
                }
            }
            // Terraform's `provider "gpushare"` block holds the same settings.
            "provider" if file.tf && labels[..] == ["gpushare"] => {
                self.settings_block(fi, b, loc, settings)
            }
            _ if file.tf => {} // terraform, output, other providers, their resources and data
            "gpushare" => {
                if !labels.is_empty() {
                    self.err(
                        Diagnostic::error("the gpushare block takes no labels")
                            .at(loc)
                            .hint("write `gpushare { cluster = \"...\" }`"),
                    );
                    return;
                }
                self.settings_block(fi, b, loc, settings)
            }
            other => {
                let Some(kind) = ResourceKind::parse(other) else {
                    self.err(
                        Diagnostic::error(format!("unknown block type `{other}`"))
                            .at(loc)
                            .detail(format!("expected one of: {}", TOP_BLOCKS.join(", ")))
                            .maybe_hint(suggest(other, TOP_BLOCKS)),
                    );
                    return;
                };
                let [label] = labels[..] else {
                    self.err(
                        Diagnostic::error(format!(
                            "a {other} block needs exactly one label, its name"
                        ))
                        .at(loc)
                        .detail(format!("found {} labels", labels.len()))
                        .hint(format!("write `{other} \"NAME\" {{ ... }}`")),
                    );
                    return;
                };
                decls.push(Decl {
                    kind,
                    label: label.to_string(),
                    file: fi,
                    block: b,
                    loc,
                    name_expr: None,
                });
            }
        }
    }
}

//! Collecting declarations: top-level blocks of every file, the settings
//! block (`gpushare { }` or a .tf `provider "gpushare"`).

use super::decl::{
    declared_again, Collected, DataDecl, Decl, Loader, LocalDecl, SettingsDecl, VarDecl,
    INSTANCE_TYPE_DATA, TOP_BLOCKS,
};
use crate::diag::{suggest, Diagnostic};
use gpushare_core::{ResourceKind, SourceLoc};
use hcl::edit::structure::{Block, Structure};
use hcl::edit::Span;

impl<'a> Loader<'a> {
    /// Collects the top-level blocks of every file, in file order; a top-level
    /// attribute is refused in gpushare HCL (Terraform's are left alone).
    pub(super) fn collect_files(&mut self) -> Collected<'a> {
        let mut c = Collected::default();
        let files = self.files;
        for (fi, (file, body)) in files.iter().enumerate() {
            for st in body.iter() {
                match st {
                    Structure::Attribute(a) => {
                        if !file.tf {
                            self.err(
                                Diagnostic::error(format!("unexpected attribute `{}` at the top level", a.key.as_str()))
                                    .at(file.loc(a.key.span()))
                                    .detail("the top level holds only blocks: gpushare, variable, locals, capacity_provider, gpu_instance, task_definition, service, job")
                                    .hint("put the attribute inside a block, or use a `locals { }` block"),
                            );
                        }
                    }
                    Structure::Block(b) => self.collect(fi, b, &mut c),
                }
            }
        }
        c
    }

    /// Record the settings block (`gpushare { }`, or a .tf file's `provider
    /// "gpushare"`); a second one names the first.
    pub(super) fn settings_block(
        &mut self,
        fi: usize,
        b: &'a Block,
        loc: Option<SourceLoc>,
        settings: &mut Option<SettingsDecl<'a>>,
    ) {
        match settings {
            Some((_, _, first)) => self.err(
                declared_again("gpushare block", loc, first.as_ref())
                    .hint("keep one gpushare block (or provider \"gpushare\" block)"),
            ),
            None => *settings = Some((fi, b, loc)),
        }
    }

    /// Collects one top-level block of file `fi` by its type.
    pub(super) fn collect(&mut self, fi: usize, b: &'a Block, c: &mut Collected<'a>) {
        let file = self.file(fi);
        let ident = b.ident.as_str();
        let loc = file.loc(b.ident.span());
        let labels: Vec<&str> = b.labels.iter().map(|l| l.as_str()).collect();
        match ident {
            "variable" => self.collect_variable(fi, b, loc, &labels, c),
            "locals" => self.collect_locals(fi, b, loc, &labels, c),
            "resource" if file.tf => self.collect_tf_resource(fi, b, loc, &labels, c),
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
                self.settings_block(fi, b, loc, &mut c.settings)
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
                self.settings_block(fi, b, loc, &mut c.settings)
            }
            _ => self.collect_resource(fi, b, loc, &labels, c),
        }
    }

    /// `variable "NAME" { ... }`: one label, declared once.
    fn collect_variable(
        &mut self,
        fi: usize,
        b: &'a Block,
        loc: Option<SourceLoc>,
        labels: &[&str],
        c: &mut Collected<'a>,
    ) {
        let [name] = labels[..] else {
            self.err(
                Diagnostic::error("a variable block needs exactly one label, its name")
                    .at(loc)
                    .hint("write `variable \"NAME\" { default = ... }`"),
            );
            return;
        };
        if let Some(first) = c.vars.get(name) {
            self.err(
                declared_again(&format!("variable \"{name}\""), loc, first.loc.as_ref())
                    .hint("remove one of the two declarations"),
            );
            return;
        }
        c.vars.insert(
            name.to_string(),
            VarDecl {
                file: fi,
                block: b,
                loc,
            },
        );
    }

    /// `locals { name = value }`: no labels, only attributes, each local defined once.
    fn collect_locals(
        &mut self,
        fi: usize,
        b: &'a Block,
        loc: Option<SourceLoc>,
        labels: &[&str],
        c: &mut Collected<'a>,
    ) {
        let file = self.file(fi);
        if !labels.is_empty() {
            self.err(
                Diagnostic::error("a locals block takes no labels")
                    .at(loc)
                    .hint("write `locals { name = value }`"),
            );
        }
        for st in b.body.iter() {
            match st {
                Structure::Attribute(a) => {
                    let name = a.key.as_str();
                    let aloc = file.loc(a.key.span());
                    if let Some(first) = c.locals.get(name) {
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
                    c.locals.insert(
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

    /// A .tf `resource "gpushare_KIND" "LABEL" { name = ... }`; other resource
    /// types (and `gpushare_join_token`) are Terraform's.
    fn collect_tf_resource(
        &mut self,
        fi: usize,
        b: &'a Block,
        loc: Option<SourceLoc>,
        labels: &[&str],
        c: &mut Collected<'a>,
    ) {
        let file = self.file(fi);
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
        if c.decls
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
                Diagnostic::error(format!("missing required attribute `name` in {ty}.{label}"))
                    .at(loc)
                    .hint(format!("add `name = \"{label}\"`")),
            );
            return;
        }
        c.decls.push(Decl {
            kind,
            label: label.to_string(),
            file: fi,
            block: b,
            loc,
            name_expr,
        });
    }

    /// A gpushare HCL resource block, `KIND "NAME" { ... }`; any other block
    /// type is unknown.
    fn collect_resource(
        &mut self,
        fi: usize,
        b: &'a Block,
        loc: Option<SourceLoc>,
        labels: &[&str],
        c: &mut Collected<'a>,
    ) {
        let other = b.ident.as_str();
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
                Diagnostic::error(format!("a {other} block needs exactly one label, its name"))
                    .at(loc)
                    .detail(format!("found {} labels", labels.len()))
                    .hint(format!("write `{other} \"NAME\" {{ ... }}`")),
            );
            return;
        };
        c.decls.push(Decl {
            kind,
            label: label.to_string(),
            file: fi,
            block: b,
            loc,
            name_expr: None,
        });
    }
}

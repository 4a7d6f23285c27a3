//! The load pass: collect, evaluate, build each resource and deserialise it
//! into the typed model.

use super::build::Site;
use super::decl::{declared_again, Collected, Decl, Loader, SettingsDecl};
use super::scope::Scope;
use crate::check;
use crate::diag::Diagnostic;
use gpushare_core::schema::{self, BlockLike};
use gpushare_core::{Desired, ResourceKind, Settings, SourceLoc};
use hcl::edit::Span;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

impl<'a> Loader<'a> {
    /// The pass over all files: collect the declarations, evaluate variables,
    /// locals and names, then (where no error was found so far) build the
    /// settings and every resource into the typed model.
    pub(super) fn run(&mut self) -> Desired {
        let mut desired = Desired::default();
        let c = self.collect_files();
        let mut scope = self.declared_scope(&c);
        self.mark_sensitive(&c.vars, &c.locals, &mut scope);
        self.eval_variables(&c.vars, &mut scope);
        self.eval_locals_and_tf_names(&c.locals, &c.decls, &mut scope);
        let resolved = self.resolve_names(&c.decls, &scope);
        if self.diags.iter().any(Diagnostic::is_error) {
            return desired;
        }
        if let Some(settings) = c.settings {
            self.build_settings(settings, &scope, &mut desired);
        }
        for (d, name) in resolved {
            self.build_resource(d, name, &scope, &mut desired);
        }
        desired
    }

    /// The scope before evaluation: the names declared (variables, locals, data
    /// labels, HCL resource names and Terraform resource labels).
    fn declared_scope(&self, c: &Collected<'a>) -> Scope {
        let mut scope = Scope {
            declared_vars: c.vars.keys().cloned().collect(),
            declared_locals: c.locals.keys().cloned().collect(),
            data_labels: self.data.iter().map(|d| d.label.to_string()).collect(),
            ..Default::default()
        };
        for d in &c.decls {
            if self.file(d.file).tf {
                scope
                    .tf_labels
                    .entry(d.kind)
                    .or_default()
                    .insert(d.label.clone());
            } else {
                scope
                    .names
                    .entry(d.kind)
                    .or_default()
                    .insert(d.label.clone());
            }
        }
        scope
    }

    /// Each declaration with its name (a Terraform resource's as evaluated);
    /// duplicates by (kind, name) across both formats are reported and left out.
    fn resolve_names<'d>(
        &mut self,
        decls: &'d [Decl<'a>],
        scope: &Scope,
    ) -> Vec<(&'d Decl<'a>, String)> {
        let mut seen: BTreeMap<(ResourceKind, String), Option<SourceLoc>> = BTreeMap::new();
        let mut resolved: Vec<(&Decl<'a>, String)> = vec![];
        for d in decls {
            let name = if self.file(d.file).tf {
                match scope.tf_names.get(&d.kind).and_then(|m| m.get(&d.label)) {
                    Some(n) => n.clone(),
                    None => continue, // its name failed to evaluate (already reported)
                }
            } else {
                d.label.clone()
            };
            if let Some(first) = seen.get(&(d.kind, name.clone())) {
                self.err(
                    declared_again(
                        &format!("{} \"{name}\"", d.kind.as_str()),
                        d.loc.clone(),
                        first.as_ref(),
                    )
                    .hint("rename one of them, or remove the duplicate"),
                );
                continue;
            }
            seen.insert((d.kind, name.clone()), d.loc.clone());
            resolved.push((d, name));
        }
        resolved
    }

    /// The settings block (`gpushare { }` over the defaults, or a .tf
    /// `provider "gpushare"`) into `desired.settings`.
    fn build_settings(
        &mut self,
        (fi, block, loc): SettingsDecl<'a>,
        scope: &Scope,
        desired: &mut Desired,
    ) {
        let provider = block.ident.as_str() == "provider";
        let (s, what) = if provider {
            (schema::provider_schema(), "provider.gpushare")
        } else {
            (schema::settings_schema(), "gpushare")
        };
        let site = Site {
            fi,
            path: what,
            top: false,
            scope,
            block_loc: loc.clone(),
            label: None,
        };
        let obj = self.build(&block.body, s, &site, &mut desired.locations);
        let settings = if provider {
            Settings::from_provider_block(obj)
        } else {
            let mut base = match serde_json::to_value(Settings::default()) {
                Ok(Value::Object(m)) => m,
                _ => Map::new(),
            };
            base.extend(obj);
            serde_json::from_value::<Settings>(Value::Object(base))
        };
        match settings {
            Ok(v) => desired.settings = v,
            Err(e) => self.err(
                Diagnostic::error(format!("invalid {what} block"))
                    .at(loc.clone())
                    .detail(e.to_string()),
            ),
        }
        if let Some(loc) = loc {
            desired.locations.insert("gpushare".into(), loc);
        }
    }

    /// One resource: its name checked, its body built and inserted into `desired`.
    fn build_resource(&mut self, d: &Decl<'a>, name: String, scope: &Scope, desired: &mut Desired) {
        let tf = self.file(d.file).tf;
        let s = schema::schema(d.kind);
        let addr = format!("{}.{name}", d.kind.as_str());
        // HCL: the label is the name; Terraform: the `name` attribute. Check it alike.
        if let Some(a) = s.attribute("name") {
            if let Err(e) = check::check_attribute(a, &Value::String(name.clone())) {
                let span = match d.name_expr {
                    Some(e) if tf => e.span(),
                    _ => d.block.labels.first().and_then(Span::span),
                };
                let loc = self.file(d.file).loc(span);
                self.err(
                    Diagnostic::error(format!("invalid {} name", d.kind.as_str()))
                        .at(loc)
                        .path(addr.clone())
                        .detail(e)
                        .hint("names start with a letter or digit and hold letters, digits, `_` and `-` (at most 63)"),
                );
            }
        }
        let site = Site {
            fi: d.file,
            path: &addr,
            top: true,
            scope,
            block_loc: d.loc.clone(),
            label: None,
        };
        let obj = self.build(&d.block.body, s, &site, &mut desired.locations);
        if let Some(loc) = &d.loc {
            desired.locations.insert(addr.clone(), loc.clone());
        }
        let res = check::insert_resource(desired, d.kind, &name, Value::Object(obj));
        if let Err(e) = res {
            // Only reached when an earlier check already failed (missing required values).
            if !self.diags.iter().any(Diagnostic::is_error) {
                self.err(
                    Diagnostic::error(format!("invalid {addr}"))
                        .at(d.loc.clone())
                        .detail(e.to_string()),
                );
            }
        }
    }
}

//! The load pass: collect, evaluate, build each resource and deserialise it
//! into the typed model.

use super::decl::{declared_again, Decl, Loader, LocalDecl, VarDecl};
use super::scope::Scope;
use crate::check;
use crate::diag::Diagnostic;
use gpushare_core::schema::{self, BlockLike};
use gpushare_core::{Desired, ResourceKind, Settings, SourceLoc};
use hcl::edit::structure::{Block, Structure};
use hcl::edit::Span;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

impl<'a> Loader<'a> {
    pub(super) fn run(&mut self) -> Desired {
        let mut desired = Desired::default();
        let mut decls: Vec<Decl<'a>> = vec![];
        let mut vars: BTreeMap<String, VarDecl<'a>> = BTreeMap::new();
        let mut locals: BTreeMap<String, LocalDecl<'a>> = BTreeMap::new();
        let mut settings: Option<(usize, &'a Block, Option<SourceLoc>)> = None;

        let files = self.files;
        for (fi, (file, body)) in files.iter().enumerate() {
            for st in body.iter() {
                match st {
                    Structure::Attribute(a) => {
                        if !file.tf {
                            self.err(
                                Diagnostic::error(format!("unexpected attribute `{}` at the top level", a.key.as_str()))
                                    .at(file.loc(a.key.span()))
                                    .detail("the top level holds only blocks: gpushare, variable, locals, capacity_provider, gpu_instance, task_definition, service")
                                    .hint("put the attribute inside a block, or use a `locals { }` block"),
                            );
                        }
                    }
                    Structure::Block(b) => {
                        self.collect(fi, b, &mut decls, &mut vars, &mut locals, &mut settings)
                    }
                }
            }
        }

        let mut scope = Scope {
            declared_vars: vars.keys().cloned().collect(),
            declared_locals: locals.keys().cloned().collect(),
            data_labels: self.data.iter().map(|d| d.label.to_string()).collect(),
            ..Default::default()
        };
        for d in &decls {
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

        self.eval_variables(&vars, &mut scope);
        self.eval_locals_and_tf_names(&locals, &decls, &mut scope);
        self.mark_sensitive(&vars, &locals, &mut scope);

        // Duplicates: by (kind, name) across both formats.
        let mut seen: BTreeMap<(ResourceKind, String), Option<SourceLoc>> = BTreeMap::new();
        let mut resolved: Vec<(&Decl<'a>, String)> = vec![];
        for d in &decls {
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
        if self.diags.iter().any(Diagnostic::is_error) {
            return desired;
        }

        if let Some((fi, block, loc)) = settings {
            let provider = block.ident.as_str() == "provider";
            let (s, what) = if provider {
                (schema::provider_schema(), "provider.gpushare")
            } else {
                (schema::settings_schema(), "gpushare")
            };
            let obj = self.build(
                fi,
                &block.body,
                s,
                what,
                false,
                &scope,
                loc.clone(),
                &mut desired.locations,
                None,
            );
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

        for (d, name) in resolved {
            let tf = self.file(d.file).tf;
            let s = schema::schema(d.kind);
            let addr = format!("{}.{name}", d.kind.as_str());
            {
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
            }
            let obj = self.build(
                d.file,
                &d.block.body,
                s,
                &addr,
                true,
                &scope,
                d.loc.clone(),
                &mut desired.locations,
                None,
            );
            if let Some(loc) = &d.loc {
                desired.locations.insert(addr.clone(), loc.clone());
            }
            let res = check::insert_resource(&mut desired, d.kind, &name, Value::Object(obj));
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
        desired
    }
}

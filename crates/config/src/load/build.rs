//! Building one block body as JSON checked against its schema level, and the
//! diagnostics for unknown attributes and blocks.

use super::decl::{Loader, TF_IGNORED_ARGS, TF_IGNORED_BLOCKS, TF_UNSUPPORTED_ARGS};
use super::scope::Scope;
use crate::check;
use crate::diag::{nearest, suggest, Diagnostic};
use gpushare_core::schema::{AttrType, BlockLike, Nesting};
use gpushare_core::SourceLoc;
use hcl::edit::structure::{Body, Structure};
use hcl::edit::Span;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

fn placeholder(ty: &AttrType) -> &'static str {
    match ty {
        AttrType::String => "\"...\"",
        AttrType::Number => "<number>",
        AttrType::Bool => "true",
        AttrType::List(_) => "[...]",
        AttrType::Map(_) => "{ ... }",
    }
}

impl<'a> Loader<'a> {
    /// Builds one block body as a JSON object checked against `level`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn build(
        &mut self,
        fi: usize,
        body: &Body,
        level: &dyn BlockLike,
        path: &str,
        top: bool,
        scope: &Scope,
        block_loc: Option<SourceLoc>,
        locations: &mut BTreeMap<String, SourceLoc>,
        label: Option<(&str, &str)>,
    ) -> Map<String, Value> {
        let file = self.file(fi);
        let mut out = Map::new();
        if let Some((attr, l)) = label {
            out.insert(attr.to_string(), Value::String(l.to_string()));
        }
        let mut seen: BTreeMap<String, Option<SourceLoc>> = BTreeMap::new();
        // Names suggested for misspelt keys: their "missing" errors would only repeat the typo.
        let mut suggested: BTreeSet<String> = BTreeSet::new();
        let what = path.split('.').next().unwrap_or(path).to_string();
        for st in body.iter() {
            match st {
                Structure::Attribute(a) => {
                    let key = a.key.as_str();
                    let loc = file.loc(a.key.span());
                    if top && file.tf && TF_IGNORED_ARGS.contains(&key) {
                        continue;
                    }
                    if top && file.tf && TF_UNSUPPORTED_ARGS.contains(&key) {
                        self.err(
                            Diagnostic::error(format!("`{key}` is not supported on gpushare resources"))
                                .at(loc)
                                .path(format!("{path}.{key}"))
                                .detail("gpushare reads each gpushare_* resource once; count and for_each would need Terraform's expansion")
                                .hint("declare the resources one by one, or scale a service with desired_count"),
                        );
                        continue;
                    }
                    if top && key == "name" {
                        if !file.tf {
                            self.err(
                                Diagnostic::error(format!("unexpected attribute `name` in {path}"))
                                    .at(loc)
                                    .detail("in gpushare HCL the name is the block label")
                                    .hint(format!(
                                        "write `{what} \"NAME\" {{ ... }}` and remove `name`"
                                    )),
                            );
                        }
                        continue;
                    }
                    if label.is_some_and(|(attr, _)| attr == key) {
                        self.err(
                            Diagnostic::error(format!(
                                "`{key}` is set both by the block label and as an attribute"
                            ))
                            .at(loc)
                            .path(format!("{path}.{key}"))
                            .hint(format!(
                                "remove the `{key}` attribute; in gpushare HCL the label sets it"
                            )),
                        );
                        continue;
                    }
                    let Some(attr) = level.attribute(key) else {
                        if level.block(key).is_some() {
                            self.err(
                                Diagnostic::error(format!("`{key}` is a block, not an attribute"))
                                    .at(loc)
                                    .path(format!("{path}.{key}"))
                                    .hint(format!("write `{key} {{ ... }}`")),
                            );
                        } else {
                            let names = level.argument_names();
                            if let Some(n) = nearest(key, names) {
                                suggested.insert(n.to_string());
                            }
                            self.unknown(&loc, path, key, level, "attribute", top && !file.tf);
                        }
                        continue;
                    };
                    if attr.is_computed_only() {
                        self.err(
                            Diagnostic::error(format!(
                                "`{key}` is computed by gpushare and cannot be set"
                            ))
                            .at(loc)
                            .path(format!("{path}.{key}"))
                            .hint(format!("remove `{key}`; it is read-only")),
                        );
                        continue;
                    }
                    if let Some(first) = seen.get(key) {
                        let first = first.as_ref().map_or_else(String::new, ToString::to_string);
                        self.err(
                            Diagnostic::error(format!("attribute `{key}` is set twice"))
                                .at(loc)
                                .path(format!("{path}.{key}"))
                                .detail(format!("first set at {first}"))
                                .hint("remove one of the two"),
                        );
                        continue;
                    }
                    seen.insert(key.to_string(), loc.clone());
                    if !self.check_sensitive(fi, key, &a.value, path, scope) {
                        continue;
                    }
                    let before = self.diags.len();
                    if !self.check_refs(fi, &a.value, scope) {
                        for d in &mut self.diags[before..] {
                            d.path.get_or_insert_with(|| format!("{path}.{key}"));
                        }
                        continue;
                    }
                    let Some(v) = self.eval(fi, &a.value, scope) else {
                        continue;
                    };
                    if v.is_null() {
                        continue;
                    }
                    let vloc = file.loc(a.value.span()).or_else(|| loc.clone());
                    match check::check_attribute(attr, &v) {
                        Ok(v) => {
                            out.insert(key.to_string(), v);
                            if let Some(l) = loc {
                                locations.insert(format!("{path}.{key}"), l);
                            }
                        }
                        Err(e) => self.err(
                            Diagnostic::error(format!("invalid value for `{key}`"))
                                .at(vloc)
                                .path(format!("{path}.{key}"))
                                .detail(e)
                                .hint(format!("{key}: {}", attr.description)),
                        ),
                    }
                }
                Structure::Block(b)
                    if top && file.tf && TF_IGNORED_BLOCKS.contains(&b.ident.as_str()) => {}
                Structure::Block(b) => {
                    let ident = b.ident.as_str();
                    let loc = file.loc(b.ident.span());
                    let Some(sb) = level.block(ident) else {
                        if level.attribute(ident).is_some_and(|a| a.is_argument()) {
                            self.err(
                                Diagnostic::error(format!(
                                    "`{ident}` is an attribute, not a block"
                                ))
                                .at(loc)
                                .path(format!("{path}.{ident}"))
                                .hint(format!("write `{ident} = ...`")),
                            );
                        } else {
                            self.unknown(&loc, path, ident, level, "block", top && !file.tf);
                        }
                        continue;
                    };
                    let labels: Vec<&str> = b.labels.iter().map(|l| l.as_str()).collect();
                    let label_attr = if file.tf { None } else { sb.label.as_deref() };
                    let label = match (label_attr, &labels[..]) {
                        (Some(_), [l]) => Some(l.to_string()),
                        (None, []) => None,
                        (Some(attr), _) => {
                            self.err(
                                Diagnostic::error(format!(
                                    "a `{ident}` block needs exactly one label, its {attr}"
                                ))
                                .at(loc)
                                .path(format!("{path}.{ident}"))
                                .detail(format!("found {} labels", labels.len()))
                                .hint(format!("write `{ident} \"NAME\" {{ ... }}`")),
                            );
                            continue;
                        }
                        (None, _) => {
                            let hint = match &sb.label {
                                Some(attr) => {
                                    format!("in a .tf file write `{ident} {{ {attr} = \"...\" }}`")
                                }
                                None => format!("write `{ident} {{ ... }}`"),
                            };
                            self.err(
                                Diagnostic::error(format!("a `{ident}` block takes no labels"))
                                    .at(loc)
                                    .path(format!("{path}.{ident}"))
                                    .hint(hint),
                            );
                            continue;
                        }
                    };
                    let index = match sb.nesting {
                        Nesting::Single => None,
                        _ => Some(out.get(ident).and_then(Value::as_array).map_or(0, Vec::len)),
                    };
                    let sub_path = match (&label, index) {
                        (Some(l), _) => format!("{path}.{ident}.{l}"),
                        (None, Some(i)) => format!("{path}.{ident}.{i}"),
                        (None, None) => format!("{path}.{ident}"),
                    };
                    if let (Some(attr), Some(l)) = (label_attr, &label) {
                        if let Some(a) = sb.attribute(attr) {
                            if let Err(e) = check::check_attribute(a, &Value::String(l.clone())) {
                                self.err(
                                    Diagnostic::error(format!("invalid {ident} {attr}"))
                                        .at(file.loc(b.labels.first().and_then(Span::span)))
                                        .path(sub_path.clone())
                                        .detail(e),
                                );
                            }
                        }
                    }
                    let preset = label_attr.zip(label.as_deref());
                    let obj = self.build(
                        fi,
                        &b.body,
                        sb,
                        &sub_path,
                        false,
                        scope,
                        loc.clone(),
                        locations,
                        preset,
                    );
                    if let Some(l) = &loc {
                        locations.insert(sub_path.clone(), l.clone());
                    }
                    match sb.nesting {
                        Nesting::Single => {
                            if out.contains_key(ident) {
                                let first = locations
                                    .get(&sub_path)
                                    .map_or_else(String::new, ToString::to_string);
                                self.err(
                                    Diagnostic::error(format!(
                                        "only one `{ident}` block is allowed here"
                                    ))
                                    .at(loc)
                                    .path(sub_path)
                                    .detail(format!("another `{ident}` block is at {first}"))
                                    .hint("merge the two blocks"),
                                );
                                continue;
                            }
                            out.insert(ident.to_string(), Value::Object(obj));
                        }
                        Nesting::List | Nesting::Set => {
                            if let (Some(l), Some(arr)) =
                                (&label, out.get(ident).and_then(Value::as_array))
                            {
                                let attr = sb.label.as_deref().unwrap_or("name");
                                if arr.iter().any(|o| {
                                    o.get(attr).and_then(Value::as_str) == Some(l.as_str())
                                }) {
                                    self.err(
                                        Diagnostic::error(format!("duplicate {ident} \"{l}\""))
                                            .at(loc)
                                            .path(sub_path)
                                            .hint(format!("every {ident} needs a distinct {attr}")),
                                    );
                                    continue;
                                }
                            }
                            if let Value::Array(arr) = out
                                .entry(ident.to_string())
                                .or_insert_with(|| Value::Array(vec![]))
                            {
                                arr.push(Value::Object(obj));
                            }
                        }
                        Nesting::Map => {
                            let key = label.unwrap_or_default();
                            if let Value::Object(m) = out
                                .entry(ident.to_string())
                                .or_insert_with(|| Value::Object(Map::new()))
                            {
                                m.insert(key, Value::Object(obj));
                            }
                        }
                    }
                }
            }
        }
        for a in level
            .attributes()
            .iter()
            .filter(|a| a.required && !(top && a.name == "name"))
        {
            if !out.contains_key(&a.name)
                && !seen.contains_key(&a.name)
                && !suggested.contains(&a.name)
            {
                self.err(
                    Diagnostic::error(format!("missing required attribute `{}` in {path}", a.name))
                        .at(block_loc.clone())
                        .path(format!("{path}.{}", a.name))
                        .detail(format!("{}: {}", a.name, a.description))
                        .hint(format!("add `{} = {}`", a.name, placeholder(&a.ty))),
                );
            }
        }
        if top && path.starts_with("capacity_provider.") {
            for a in crate::validate::missing_for_launched(&out) {
                if !seen.contains_key(a) && !suggested.contains(a) {
                    self.err(
                        Diagnostic::error(format!("missing required attribute `{a}` in {path}"))
                            .at(block_loc.clone())
                            .path(format!("{path}.{a}"))
                            .detail(format!("a launched pool needs `{a}`; a registered pool (hosts = \"registered\") goes without"))
                            .hint(format!("add `{a} = ...`, or set hosts = \"registered\"")),
                    );
                }
            }
        }
        for b in level.blocks().iter().filter(|b| b.min_items > 0) {
            let n = match out.get(&b.name) {
                Some(Value::Array(a)) => a.len(),
                Some(_) => 1,
                None => 0,
            };
            if (n as u32) < b.min_items {
                let example = match &b.label {
                    Some(_) if !file.tf => format!("{} \"NAME\" {{ ... }}", b.name),
                    _ => format!("{} {{ ... }}", b.name),
                };
                self.err(
                    Diagnostic::error(format!(
                        "{path} needs at least {} `{}` block(s)",
                        b.min_items, b.name
                    ))
                    .at(block_loc.clone())
                    .path(format!("{path}.{}", b.name))
                    .detail(b.description.clone())
                    .hint(format!("add `{example}`")),
                );
            }
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn unknown(
        &mut self,
        loc: &Option<SourceLoc>,
        path: &str,
        key: &str,
        level: &dyn BlockLike,
        what: &str,
        hide_name: bool,
    ) {
        let names = level.argument_names();
        let names: Vec<&str> = names
            .into_iter()
            .filter(|n| !(hide_name && *n == "name"))
            .collect();
        self.err(
            Diagnostic::error(format!("unknown {what} `{key}` in {path}"))
                .at(loc.clone())
                .path(format!("{path}.{key}"))
                .detail(format!("expected one of: {}", names.join(", ")))
                .maybe_hint(suggest(key, names.iter().copied())),
        );
    }
}

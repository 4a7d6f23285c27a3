//! Building one block body as JSON checked against its schema level, and the
//! diagnostics for unknown attributes and blocks.

use super::decl::{Loader, TF_IGNORED_ARGS, TF_IGNORED_BLOCKS, TF_UNSUPPORTED_ARGS};
use super::scope::Scope;
use crate::check;
use crate::diag::{nearest, suggest, Diagnostic};
use gpushare_core::schema::{self, AttrType, BlockLike, Nesting};
use gpushare_core::SourceLoc;
use hcl::edit::structure::{Attribute, Block, Body, Structure};
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

/// Where one block body is built: its file, its path and what the enclosing
/// block knows of it.
pub(super) struct Site<'s> {
    /// The file's index in `Loader::files`.
    pub(super) fi: usize,
    /// The body's dotted path (`service.web`, `task_definition.t.container.c`).
    pub(super) path: &'s str,
    /// A resource's own body (not a nested block, nor the settings block).
    pub(super) top: bool,
    pub(super) scope: &'s Scope,
    /// Where the block starts: the diagnostics for what it lacks point there.
    pub(super) block_loc: Option<SourceLoc>,
    /// The attribute the block's label sets, and the label (`container "server"`).
    pub(super) label: Option<(&'s str, &'s str)>,
}

/// What building one body has found so far.
struct Built {
    out: Map<String, Value>,
    /// The attributes set (valid or not), at their first setting.
    seen: BTreeMap<String, Option<SourceLoc>>,
    /// Names suggested for misspelt keys: their "missing" errors would only repeat the typo.
    suggested: BTreeSet<String>,
}

/// A nested block built, to be placed in its parent by its nesting.
struct Nested {
    label: Option<String>,
    loc: Option<SourceLoc>,
    path: String,
    obj: Map<String, Value>,
}

impl<'a> Loader<'a> {
    /// Builds one block body as a JSON object checked against `level`; the
    /// location of every attribute and block set goes into `locations`.
    pub(super) fn build(
        &mut self,
        body: &Body,
        level: &dyn BlockLike,
        site: &Site<'_>,
        locations: &mut BTreeMap<String, SourceLoc>,
    ) -> Map<String, Value> {
        let file = self.file(site.fi);
        let mut built = Built {
            out: Map::new(),
            seen: BTreeMap::new(),
            suggested: BTreeSet::new(),
        };
        if let Some((attr, l)) = site.label {
            built
                .out
                .insert(attr.to_string(), Value::String(l.to_string()));
        }
        for st in body.iter() {
            match st {
                Structure::Attribute(a) => {
                    self.build_attribute(a, level, site, &mut built, locations)
                }
                Structure::Block(b)
                    if site.top && file.tf && TF_IGNORED_BLOCKS.contains(&b.ident.as_str()) => {}
                Structure::Block(b) => self.build_block(b, level, site, &mut built, locations),
            }
        }
        self.missing_attributes(level, site, &built);
        self.missing_blocks(level, site, &built.out);
        built.out
    }

    /// One attribute: admitted, checked for sensitive values and references,
    /// evaluated, and checked against its schema attribute.
    fn build_attribute(
        &mut self,
        a: &Attribute,
        level: &dyn BlockLike,
        site: &Site<'_>,
        built: &mut Built,
        locations: &mut BTreeMap<String, SourceLoc>,
    ) {
        let file = self.file(site.fi);
        let path = site.path;
        let key = a.key.as_str();
        let loc = file.loc(a.key.span());
        if self.meta_attribute(key, &loc, site) {
            return;
        }
        let Some(attr) = self.schema_attribute(key, &loc, level, site, built) else {
            return;
        };
        built.seen.insert(key.to_string(), loc.clone());
        if !self.check_sensitive(site.fi, key, &a.value, path, site.scope) {
            return;
        }
        let before = self.diags.len();
        if !self.check_refs(site.fi, &a.value, site.scope) {
            for d in &mut self.diags[before..] {
                d.path.get_or_insert_with(|| format!("{path}.{key}"));
            }
            return;
        }
        let Some(v) = self.eval(site.fi, &a.value, site.scope) else {
            return;
        };
        if v.is_null() {
            return;
        }
        let vloc = file.loc(a.value.span()).or_else(|| loc.clone());
        match check::check_attribute(attr, &v) {
            Ok(v) => {
                built.out.insert(key.to_string(), v);
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

    /// Keys that are not schema attributes here: Terraform meta-arguments, a
    /// resource's `name` and the attribute its block label sets. `true`: the key
    /// is dealt with (skipped or reported).
    fn meta_attribute(&mut self, key: &str, loc: &Option<SourceLoc>, site: &Site<'_>) -> bool {
        let file = self.file(site.fi);
        let path = site.path;
        if site.top && file.tf && TF_IGNORED_ARGS.contains(&key) {
            return true;
        }
        if site.top && file.tf && TF_UNSUPPORTED_ARGS.contains(&key) {
            self.err(
                Diagnostic::error(format!("`{key}` is not supported on gpushare resources"))
                    .at(loc.clone())
                    .path(format!("{path}.{key}"))
                    .detail("gpushare reads each gpushare_* resource once; count and for_each would need Terraform's expansion")
                    .hint("declare the resources one by one, or scale a service with desired_count"),
            );
            return true;
        }
        if site.top && key == "name" {
            if !file.tf {
                let what = path.split('.').next().unwrap_or(path);
                self.err(
                    Diagnostic::error(format!("unexpected attribute `name` in {path}"))
                        .at(loc.clone())
                        .detail("in gpushare HCL the name is the block label")
                        .hint(format!(
                            "write `{what} \"NAME\" {{ ... }}` and remove `name`"
                        )),
                );
            }
            return true;
        }
        if site.label.is_some_and(|(attr, _)| attr == key) {
            self.err(
                Diagnostic::error(format!(
                    "`{key}` is set both by the block label and as an attribute"
                ))
                .at(loc.clone())
                .path(format!("{path}.{key}"))
                .hint(format!(
                    "remove the `{key}` attribute; in gpushare HCL the label sets it"
                )),
            );
            return true;
        }
        false
    }

    /// The schema attribute `key` names, if it may be set here (known, not
    /// computed, not set before); reports why not otherwise.
    fn schema_attribute<'l>(
        &mut self,
        key: &str,
        loc: &Option<SourceLoc>,
        level: &'l dyn BlockLike,
        site: &Site<'_>,
        built: &mut Built,
    ) -> Option<&'l schema::Attribute> {
        let file = self.file(site.fi);
        let path = site.path;
        let Some(attr) = level.attribute(key) else {
            if level.block(key).is_some() {
                self.err(
                    Diagnostic::error(format!("`{key}` is a block, not an attribute"))
                        .at(loc.clone())
                        .path(format!("{path}.{key}"))
                        .hint(format!("write `{key} {{ ... }}`")),
                );
            } else {
                let names = level.argument_names();
                if let Some(n) = nearest(key, names) {
                    built.suggested.insert(n.to_string());
                }
                self.unknown(loc, path, key, level, "attribute", site.top && !file.tf);
            }
            return None;
        };
        if attr.is_computed_only() {
            self.err(
                Diagnostic::error(format!("`{key}` is computed by gpushare and cannot be set"))
                    .at(loc.clone())
                    .path(format!("{path}.{key}"))
                    .hint(format!("remove `{key}`; it is read-only")),
            );
            return None;
        }
        if let Some(first) = built.seen.get(key) {
            let first = first.as_ref().map_or_else(String::new, ToString::to_string);
            self.err(
                Diagnostic::error(format!("attribute `{key}` is set twice"))
                    .at(loc.clone())
                    .path(format!("{path}.{key}"))
                    .detail(format!("first set at {first}"))
                    .hint("remove one of the two"),
            );
            return None;
        }
        Some(attr)
    }

    /// One nested block: its label checked, its body built, the result placed
    /// by the block's nesting.
    fn build_block(
        &mut self,
        b: &Block,
        level: &dyn BlockLike,
        site: &Site<'_>,
        built: &mut Built,
        locations: &mut BTreeMap<String, SourceLoc>,
    ) {
        let file = self.file(site.fi);
        let path = site.path;
        let ident = b.ident.as_str();
        let loc = file.loc(b.ident.span());
        let Some(sb) = level.block(ident) else {
            if level.attribute(ident).is_some_and(|a| a.is_argument()) {
                self.err(
                    Diagnostic::error(format!("`{ident}` is an attribute, not a block"))
                        .at(loc)
                        .path(format!("{path}.{ident}"))
                        .hint(format!("write `{ident} = ...`")),
                );
            } else {
                self.unknown(&loc, path, ident, level, "block", site.top && !file.tf);
            }
            return;
        };
        let label_attr = if file.tf { None } else { sb.label.as_deref() };
        let Some(label) = self.block_label(b, sb, label_attr, &loc, path) else {
            return;
        };
        let index = match sb.nesting {
            Nesting::Single => None,
            _ => Some(
                built
                    .out
                    .get(ident)
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len),
            ),
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
        let sub = Site {
            fi: site.fi,
            path: &sub_path,
            top: false,
            scope: site.scope,
            block_loc: loc.clone(),
            label: label_attr.zip(label.as_deref()),
        };
        let obj = self.build(&b.body, sb, &sub, locations);
        if let Some(l) = &loc {
            locations.insert(sub_path.clone(), l.clone());
        }
        let nested = Nested {
            label,
            loc,
            path: sub_path,
            obj,
        };
        self.place_block(sb, nested, &mut built.out, locations);
    }

    /// The label of nested block `b`: `Some(label)` where it has the labels its
    /// schema block `sb` takes (`label_attr`: the attribute one label sets),
    /// `None` (reported) otherwise.
    fn block_label(
        &mut self,
        b: &Block,
        sb: &schema::Block,
        label_attr: Option<&str>,
        loc: &Option<SourceLoc>,
        path: &str,
    ) -> Option<Option<String>> {
        let ident = b.ident.as_str();
        let labels: Vec<&str> = b.labels.iter().map(|l| l.as_str()).collect();
        match (label_attr, &labels[..]) {
            (Some(_), [l]) => Some(Some(l.to_string())),
            (None, []) => Some(None),
            (Some(attr), _) => {
                self.err(
                    Diagnostic::error(format!(
                        "a `{ident}` block needs exactly one label, its {attr}"
                    ))
                    .at(loc.clone())
                    .path(format!("{path}.{ident}"))
                    .detail(format!("found {} labels", labels.len()))
                    .hint(format!("write `{ident} \"NAME\" {{ ... }}`")),
                );
                None
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
                        .at(loc.clone())
                        .path(format!("{path}.{ident}"))
                        .hint(hint),
                );
                None
            }
        }
    }

    /// Places a built nested block in `out` by its nesting: one object, a list
    /// (labels distinct) or a map by label; a second single block is reported.
    fn place_block(
        &mut self,
        sb: &schema::Block,
        nested: Nested,
        out: &mut Map<String, Value>,
        locations: &BTreeMap<String, SourceLoc>,
    ) {
        let ident = sb.name.as_str();
        let Nested {
            label,
            loc,
            path: sub_path,
            obj,
        } = nested;
        match sb.nesting {
            Nesting::Single => {
                if out.contains_key(ident) {
                    let first = locations
                        .get(&sub_path)
                        .map_or_else(String::new, ToString::to_string);
                    self.err(
                        Diagnostic::error(format!("only one `{ident}` block is allowed here"))
                            .at(loc)
                            .path(sub_path)
                            .detail(format!("another `{ident}` block is at {first}"))
                            .hint("merge the two blocks"),
                    );
                    return;
                }
                out.insert(ident.to_string(), Value::Object(obj));
            }
            Nesting::List | Nesting::Set => {
                if let (Some(l), Some(arr)) = (&label, out.get(ident).and_then(Value::as_array)) {
                    let attr = sb.label.as_deref().unwrap_or("name");
                    if arr
                        .iter()
                        .any(|o| o.get(attr).and_then(Value::as_str) == Some(l.as_str()))
                    {
                        self.err(
                            Diagnostic::error(format!("duplicate {ident} \"{l}\""))
                                .at(loc)
                                .path(sub_path)
                                .hint(format!("every {ident} needs a distinct {attr}")),
                        );
                        return;
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

    /// Required attributes the body lacks (not those set invalidly or misspelt),
    /// and for a launched pool the attributes only it requires.
    fn missing_attributes(&mut self, level: &dyn BlockLike, site: &Site<'_>, built: &Built) {
        let path = site.path;
        let (out, seen, suggested) = (&built.out, &built.seen, &built.suggested);
        for a in level
            .attributes()
            .iter()
            .filter(|a| a.required && !(site.top && a.name == "name"))
        {
            if !out.contains_key(&a.name)
                && !seen.contains_key(&a.name)
                && !suggested.contains(&a.name)
            {
                self.err(
                    Diagnostic::error(format!("missing required attribute `{}` in {path}", a.name))
                        .at(site.block_loc.clone())
                        .path(format!("{path}.{}", a.name))
                        .detail(format!("{}: {}", a.name, a.description))
                        .hint(format!("add `{} = {}`", a.name, placeholder(&a.ty))),
                );
            }
        }
        if site.top && path.starts_with("capacity_provider.") {
            for a in crate::validate::missing_for_launched(out) {
                if !seen.contains_key(a) && !suggested.contains(a) {
                    self.err(
                        Diagnostic::error(format!("missing required attribute `{a}` in {path}"))
                            .at(site.block_loc.clone())
                            .path(format!("{path}.{a}"))
                            .detail(format!("a launched pool needs `{a}`; a registered pool (hosts = \"registered\") goes without"))
                            .hint(format!("add `{a} = ...`, or set hosts = \"registered\"")),
                    );
                }
            }
        }
    }

    /// Nested blocks the body has fewer of than its schema's `min_items`.
    fn missing_blocks(&mut self, level: &dyn BlockLike, site: &Site<'_>, out: &Map<String, Value>) {
        let file = self.file(site.fi);
        let path = site.path;
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
                    .at(site.block_loc.clone())
                    .path(format!("{path}.{}", b.name))
                    .detail(b.description.clone())
                    .hint(format!("add `{example}`")),
                );
            }
        }
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

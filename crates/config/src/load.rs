//! Loading: parse every file (hcl-edit, which keeps spans), collect the
//! declarations, evaluate variables, locals and references, then build each
//! resource as JSON checked against its schema and deserialise it into the
//! typed model.

use crate::check;
use crate::diag::{nearest, suggest, Diagnostic, Diagnostics, LineIndex};
use crate::funcs;
use crate::{LoadOptions, Loaded, Source};
use gpushare_core::catalog;
use gpushare_core::schema::{self, AttrType, BlockLike, Nesting};
use gpushare_core::{Desired, ResourceKind, Settings, SourceLoc};
use hcl::edit::expr::{Expression, Traversal, TraversalOperator};
use hcl::edit::structure::{Block, Body, Structure};
use hcl::edit::visit::{self, Visit};
use hcl::edit::Span;
use hcl::eval::{Context, Evaluate};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Loads every `*.hcl` and `*.tf` file of `dir` (not recursive), in file-name order.
pub fn load_dir(dir: &Path, opts: &LoadOptions) -> Result<Loaded, Diagnostics> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        Diagnostics(vec![Diagnostic::error(format!(
            "cannot read the configuration directory {}",
            dir.display()
        ))
        .detail(e.to_string())
        .hint("pass the directory holding your *.hcl files")])
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            // Like Terraform: editor and hidden files (`.x.hcl`, `#x.hcl#`, `x.hcl~`) are skipped.
            let hidden = p
                .file_name()
                .and_then(|n| n.to_str())
                .is_none_or(|n| n.starts_with(['.', '#']));
            p.is_file()
                && !hidden
                && matches!(p.extension().and_then(|e| e.to_str()), Some("hcl" | "tf"))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Diagnostics(vec![Diagnostic::error(format!(
            "no configuration files in {}",
            dir.display()
        ))
        .detail("expected at least one *.hcl (or *.tf) file")
        .hint(
            "run gpushare in the directory holding your configuration, or pass it as DIR",
        )]));
    }
    let mut sources = Vec::with_capacity(files.len());
    let mut diags = vec![];
    for f in &files {
        match std::fs::read_to_string(f) {
            Ok(text) => sources.push(Source {
                name: f.display().to_string(),
                // A UTF-8 byte-order mark (some Windows editors write one) is not HCL.
                text: text
                    .strip_prefix('\u{feff}')
                    .map_or(text.clone(), str::to_string),
            }),
            Err(e) => diags.push(
                Diagnostic::error(format!("cannot read {}", f.display())).detail(e.to_string()),
            ),
        }
    }
    if !diags.is_empty() {
        return Err(Diagnostics(diags));
    }
    let (desired, warnings) = load_inner(&sources, opts)?;
    tracing::debug!(files = files.len(), "configuration loaded");
    Ok(Loaded {
        desired,
        files,
        warnings,
    })
}

/// Loads configuration texts (a name ending in `.tf` is read as Terraform).
pub fn load_sources(sources: &[Source], opts: &LoadOptions) -> Result<Desired, Diagnostics> {
    load_inner(sources, opts).map(|(d, _)| d)
}

fn load_inner(
    sources: &[Source],
    opts: &LoadOptions,
) -> Result<(Desired, Vec<Diagnostic>), Diagnostics> {
    let mut files = Vec::with_capacity(sources.len());
    let mut diags = vec![];
    for s in sources {
        let file = File {
            name: s.name.clone(),
            text: s.text.clone(),
            lines: LineIndex::new(&s.text),
            tf: s.name.ends_with(".tf"),
        };
        match hcl::edit::parser::parse_body(&s.text) {
            Ok(body) => files.push((file, body)),
            Err(e) => {
                let loc = SourceLoc {
                    file: s.name.clone(),
                    line: e.location().line() as u32,
                    col: e.location().column() as u32,
                };
                diags.push(
                    Diagnostic::error("syntax error")
                        .at(Some(loc))
                        .detail(format!("{}\n{}", e.message(), e.line().trim_end()))
                        .hint(syntax_hint(e.message(), &s.text)),
                );
            }
        }
    }
    if !diags.is_empty() {
        return Err(Diagnostics(diags));
    }
    let mut l = Loader {
        files: &files,
        diags: vec![],
        data: vec![],
        opts,
    };
    let desired = l.run();
    if l.diags.iter().any(Diagnostic::is_error) {
        return Err(Diagnostics(l.diags));
    }
    Ok((desired, l.diags))
}

fn syntax_hint(message: &str, text: &str) -> String {
    if message.contains("`}`") {
        match unclosed_brace(text) {
            Some(off) => {
                let (line, _) = LineIndex::new(text).locate(text, off);
                let opener = text[..off].rsplit('\n').next().unwrap_or("").trim();
                format!("the block opened on line {line} (`{opener} {{`) has no matching `}}`")
            }
            None => "check that every `{` has a matching `}`".into(),
        }
    } else if message.contains("expected") {
        "attributes are written `name = value`, blocks `type \"label\" { ... }`".into()
    } else {
        "see the HCL syntax: attributes `name = value`, blocks `type \"label\" { ... }`".into()
    }
}

/// The byte offset of the `{` most likely left unclosed: the innermost open block
/// when a new block starts at column 1 (top-level blocks start there), else the
/// outermost one still open at the end. Skips strings and comments (not heredocs).
fn unclosed_brace(text: &str) -> Option<usize> {
    let b = text.as_bytes();
    let mut stack: Vec<usize> = vec![];
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' && b[i] != b'\n' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 1;
            }
            b'{' => stack.push(i),
            b'}' => {
                stack.pop();
            }
            c if c.is_ascii_alphabetic() && (i == 0 || b[i - 1] == b'\n') && !stack.is_empty() => {
                return stack.last().copied();
            }
            _ => {}
        }
        i += 1;
    }
    stack.first().copied()
}

struct File {
    name: String,
    text: String,
    lines: LineIndex,
    tf: bool,
}

impl File {
    fn loc(&self, span: Option<Range<usize>>) -> Option<SourceLoc> {
        let span = span?;
        let (line, col) = self.lines.locate(&self.text, span.start);
        Some(SourceLoc {
            file: self.name.clone(),
            line,
            col,
        })
    }
}

const TOP_BLOCKS: [&str; 7] = [
    "gpushare",
    "variable",
    "locals",
    "capacity_provider",
    "gpu_instance",
    "task_definition",
    "service",
];

/// A resource block as declared.
struct Decl<'a> {
    kind: ResourceKind,
    /// HCL: the label (= name). Terraform: the resource label.
    label: String,
    file: usize,
    block: &'a Block,
    loc: Option<SourceLoc>,
    /// The `name` attribute of a Terraform resource.
    name_expr: Option<&'a Expression>,
}

struct VarDecl<'a> {
    file: usize,
    block: &'a Block,
    loc: Option<SourceLoc>,
}

/// `data "gpushare_instance_type" "LABEL" { name = ... }` in a .tf file: a catalogue lookup.
#[derive(Clone, Copy)]
struct DataDecl<'a> {
    file: usize,
    label: &'a str,
    name_expr: &'a Expression,
}

const INSTANCE_TYPE_DATA: &str = "gpushare_instance_type";

/// Terraform meta-arguments with no meaning for gpushare plan: skipped in .tf resources.
const TF_IGNORED_ARGS: [&str; 2] = ["depends_on", "provider"];
const TF_IGNORED_BLOCKS: [&str; 4] = ["lifecycle", "provisioner", "connection", "timeouts"];
/// Meta-arguments that would change what is declared: refused.
const TF_UNSUPPORTED_ARGS: [&str; 2] = ["count", "for_each"];

struct LocalDecl<'a> {
    file: usize,
    expr: &'a Expression,
    loc: Option<SourceLoc>,
}

struct Loader<'a> {
    files: &'a [(File, Body)],
    diags: Vec<Diagnostic>,
    opts: &'a LoadOptions,
    data: Vec<DataDecl<'a>>,
}

/// Values known so far, from which evaluation contexts are built.
#[derive(Default)]
struct Scope {
    vars: BTreeMap<String, Value>,
    locals: BTreeMap<String, Value>,
    /// Resource names by kind (HCL `kind.NAME` resolves to NAME).
    names: BTreeMap<ResourceKind, BTreeSet<String>>,
    /// Terraform `gpushare_kind.LABEL` -> name.
    tf_names: BTreeMap<ResourceKind, BTreeMap<String, String>>,
    declared_vars: BTreeSet<String>,
    declared_locals: BTreeSet<String>,
    tf_labels: BTreeMap<ResourceKind, BTreeSet<String>>,
    /// `data.gpushare_instance_type.LABEL` -> the catalogue entry's attributes.
    data_instance_types: BTreeMap<String, Value>,
    data_labels: BTreeSet<String>,
}

impl Scope {
    fn context(&self) -> Context<'static> {
        let mut ctx = Context::new();
        funcs::declare(&mut ctx);
        ctx.declare_var(
            "var",
            to_hcl(&Value::Object(self.vars.clone().into_iter().collect())),
        );
        ctx.declare_var(
            "local",
            to_hcl(&Value::Object(self.locals.clone().into_iter().collect())),
        );
        let data: Map<String, Value> = self.data_instance_types.clone().into_iter().collect();
        ctx.declare_var(
            "data",
            to_hcl(&serde_json::json!({ INSTANCE_TYPE_DATA: data })),
        );
        for k in ResourceKind::ALL {
            let names: Map<String, Value> = self
                .names
                .get(&k)
                .into_iter()
                .flatten()
                .map(|n| (n.clone(), Value::String(n.clone())))
                .collect();
            ctx.declare_var(k.as_str(), to_hcl(&Value::Object(names)));
            let mut tf: Map<String, Value> = Map::new();
            // HCL resources are reachable from .tf files by name too.
            for n in self.names.get(&k).into_iter().flatten() {
                tf.insert(n.clone(), serde_json::json!({ "name": n, "id": n }));
            }
            for (label, n) in self.tf_names.get(&k).into_iter().flatten() {
                tf.insert(label.clone(), serde_json::json!({ "name": n, "id": n }));
            }
            ctx.declare_var(k.terraform_type(), to_hcl(&Value::Object(tf)));
        }
        ctx
    }
}

fn to_hcl(v: &Value) -> hcl::Value {
    hcl::to_value(v).unwrap_or(hcl::Value::Null)
}

fn from_hcl(v: &hcl::Value) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// A reference found in an expression: root variable and the attribute names after it.
struct Ref {
    root: String,
    attrs: Vec<String>,
    span: Option<Range<usize>>,
}

#[derive(Default)]
struct RefCollector {
    refs: Vec<Ref>,
}

impl Visit for RefCollector {
    fn visit_traversal(&mut self, node: &Traversal) {
        if let Expression::Variable(v) = &node.expr {
            let mut attrs = vec![];
            for op in &node.operators {
                match &**op {
                    TraversalOperator::GetAttr(a) => attrs.push(a.as_str().to_string()),
                    _ => break,
                }
            }
            self.refs.push(Ref {
                root: v.as_str().to_string(),
                attrs,
                span: node.span(),
            });
        }
        visit::visit_traversal(self, node);
    }
}

/// The value of a plain reference (`task_definition.x`, `var.x.y`, `local.x`,
/// `gpushare_service.x.name`) looked up directly: hcl's evaluator copies the whole
/// root object per lookup, quadratic in large configurations. `None`: not a plain
/// reference, or not found (evaluation then reports it).
fn direct_reference(expr: &Expression, scope: &Scope) -> Option<Value> {
    let Expression::Traversal(t) = expr else {
        return None;
    };
    let Expression::Variable(root) = &t.expr else {
        return None;
    };
    let mut attrs = Vec::with_capacity(t.operators.len());
    for op in &t.operators {
        match &**op {
            TraversalOperator::GetAttr(a) => attrs.push(a.as_str()),
            _ => return None,
        }
    }
    let root = root.as_str();
    let (first, rest) = attrs.split_first()?;
    let descend = |v: &Value| rest.iter().try_fold(v.clone(), |v, a| v.get(a).cloned());
    match root {
        "var" => scope.vars.get(*first).and_then(descend),
        "local" => scope.locals.get(*first).and_then(descend),
        _ => {
            if let Some(kind) = ResourceKind::parse(root) {
                let known = scope.names.get(&kind).is_some_and(|n| n.contains(*first));
                return (known && rest.is_empty()).then(|| Value::String(first.to_string()));
            }
            let kind = root
                .strip_prefix("gpushare_")
                .and_then(ResourceKind::parse)?;
            let [attr] = rest else { return None };
            if *attr != "name" && *attr != "id" {
                return None;
            }
            match scope.tf_names.get(&kind).and_then(|m| m.get(*first)) {
                Some(n) => Some(Value::String(n.clone())),
                None => scope
                    .names
                    .get(&kind)
                    .filter(|n| n.contains(*first))
                    .map(|_| Value::String(first.to_string())),
            }
        }
    }
}

fn refs_of(expr: &Expression) -> Vec<Ref> {
    let mut c = RefCollector::default();
    c.visit_expr(expr);
    c.refs
}

impl<'a> Loader<'a> {
    fn err(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    fn file(&self, i: usize) -> &'a File {
        &self.files[i].0
    }

    fn run(&mut self) -> Desired {
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

        let ctx = scope.context();
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
                &ctx,
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
                &ctx,
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

    /// Record the settings block (`gpushare { }`, or a .tf file's `provider
    /// "gpushare"`); a second one names the first.
    fn settings_block(
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

    fn collect(
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

    fn eval_variables(&mut self, vars: &BTreeMap<String, VarDecl<'a>>, scope: &mut Scope) {
        let mut overrides: BTreeMap<&str, &str> = BTreeMap::new();
        for (k, v) in &self.opts.vars {
            if !vars.contains_key(k.as_str()) {
                self.err(
                    Diagnostic::error(format!("-var sets an undeclared variable `{k}`"))
                        .path(format!("-var {k}"))
                        .detail("a -var value needs a `variable` block of the same name")
                        .maybe_hint(suggest(k, vars.keys().map(String::as_str)))
                        .hint(format!("declare it: variable \"{k}\" {{}}")),
                );
                continue;
            }
            overrides.insert(k, v);
        }
        let ctx = scope.context();
        for (name, decl) in vars {
            let file = self.file(decl.file);
            let mut default: Option<&Expression> = None;
            let mut ty: Option<AttrType> = None;
            for st in decl.block.body.iter() {
                match st {
                    Structure::Attribute(a) => match a.key.as_str() {
                        "default" => default = Some(&a.value),
                        "type" => {
                            let text = a
                                .value
                                .span()
                                .and_then(|s| file.text.get(s))
                                .unwrap_or("")
                                .trim();
                            if text == "any" {
                                continue;
                            }
                            // set(T) holds what list(T) holds once converted.
                            let text = text
                                .strip_prefix("set(")
                                .map_or_else(|| text.to_string(), |r| format!("list({r}"));
                            match AttrType::parse(&text) {
                                Some(t) => ty = Some(t),
                                // Terraform's object and tuple types: taken as `any` in .tf files.
                                None if file.tf => {}
                                None => self.err(
                                    Diagnostic::error(format!("unsupported type `{text}` for variable \"{name}\""))
                                        .at(file.loc(a.value.span()))
                                        .hint("use string, number, bool, list(string), map(string) or any"),
                                ),
                            }
                        }
                        "description" | "sensitive" | "nullable" => {}
                        other if !file.tf => self.err(
                            Diagnostic::error(format!(
                                "unknown attribute `{other}` in variable \"{name}\""
                            ))
                            .at(file.loc(a.key.span()))
                            .detail(
                                "a variable takes: default, type, description, sensitive, nullable",
                            )
                            .maybe_hint(suggest(
                                other,
                                ["default", "type", "description", "sensitive", "nullable"],
                            )),
                        ),
                        _ => {}
                    },
                    Structure::Block(b) if !file.tf => self.err(
                        Diagnostic::error(format!(
                            "unexpected block `{}` in variable \"{name}\"",
                            b.ident.as_str()
                        ))
                        .at(file.loc(b.ident.span()))
                        .hint("a variable takes the attributes default, type and description"),
                    ),
                    Structure::Block(_) => {}
                }
            }
            let complex = |t: &Option<AttrType>, d: Option<&Value>| match t {
                Some(AttrType::List(_) | AttrType::Map(_)) => true,
                Some(_) => false,
                None => matches!(d, Some(Value::Array(_) | Value::Object(_))),
            };
            let default_value = match default {
                Some(expr) => {
                    if let Some(r) = refs_of(expr).first() {
                        self.err(
                            Diagnostic::error(format!("the default of variable \"{name}\" refers to `{}`", r.root))
                                .at(file.loc(r.span.clone()))
                                .hint("a variable default must be a constant; use a `locals` value to compute from other values"),
                        );
                        continue;
                    }
                    match self.eval(decl.file, expr, &ctx) {
                        Some(v) => Some(v),
                        None => continue,
                    }
                }
                None => None,
            };
            let env_value = if self.opts.read_env {
                std::env::var(format!("GPUSHARE_VAR_{name}")).ok()
            } else {
                None
            };
            let (raw, origin) = match (overrides.get(name.as_str()), env_value) {
                (Some(v), _) => (Some(v.to_string()), format!("-var {name}")),
                (None, Some(v)) => (Some(v), format!("GPUSHARE_VAR_{name}")),
                (None, None) => (None, String::new()),
            };
            let value = match raw {
                Some(text) if complex(&ty, default_value.as_ref()) => {
                    match hcl::edit::parser::parse_expr(&text) {
                        Ok(e) => {
                            let e: hcl::Expression = e.into();
                            match e.evaluate(&ctx) {
                                Ok(v) => from_hcl(&v),
                                Err(err) => {
                                    self.err(
                                        Diagnostic::error(format!(
                                            "invalid value for variable \"{name}\""
                                        ))
                                        .path(origin)
                                        .detail(err.to_string()),
                                    );
                                    continue;
                                }
                            }
                        }
                        Err(err) => {
                            self.err(
                            Diagnostic::error(format!("invalid value for variable \"{name}\""))
                                .path(origin)
                                .detail(err.message().to_string())
                                .hint("a list or map value is written in HCL syntax, e.g. [\"a\", \"b\"] or {k = \"v\"}"),
                        );
                            continue;
                        }
                    }
                }
                Some(text) => Value::String(text),
                None => match default_value {
                    Some(v) => v,
                    None => {
                        self.err(
                            Diagnostic::error(format!("no value for variable \"{name}\""))
                                .at(decl.loc.clone())
                                .detail("the variable has no default and was not set")
                                .hint(format!("set it with -var {name}=VALUE or GPUSHARE_VAR_{name}, or give it a default")),
                        );
                        continue;
                    }
                },
            };
            let value = match &ty {
                Some(t) => match check::convert(&value, t) {
                    Ok(v) => v,
                    Err(e) => {
                        self.err(
                            Diagnostic::error(format!("invalid value for variable \"{name}\""))
                                .at(decl.loc.clone())
                                .detail(e)
                                .hint(format!("the variable is declared with type = {t}")),
                        );
                        continue;
                    }
                },
                None => value,
            };
            scope.vars.insert(name.clone(), value);
        }
    }

    /// Locals and the `name` of Terraform resources may depend on each other: evaluate
    /// in passes, each taking what has all its dependencies resolved.
    fn eval_locals_and_tf_names<'b>(
        &mut self,
        locals: &'b BTreeMap<String, LocalDecl<'a>>,
        decls: &'b [Decl<'a>],
        scope: &mut Scope,
    ) {
        enum Item<'b> {
            Local(&'b str),
            TfName(ResourceKind, &'b str),
            Data(&'b str),
        }
        struct Pending<'b> {
            item: Item<'b>,
            file: usize,
            expr: &'b Expression,
            deps: Vec<(String, String)>,
        }
        let deps_of = |expr: &Expression| -> Vec<(String, String)> {
            refs_of(expr)
                .into_iter()
                .filter_map(|r| r.attrs.first().map(|a| (r.root.clone(), a.clone())))
                .collect()
        };
        let mut pending: Vec<Pending<'b>> = vec![];
        for (name, l) in locals {
            pending.push(Pending {
                item: Item::Local(name),
                file: l.file,
                expr: l.expr,
                deps: deps_of(l.expr),
            });
        }
        for d in decls {
            if let Some(e) = d.name_expr {
                pending.push(Pending {
                    item: Item::TfName(d.kind, &d.label),
                    file: d.file,
                    expr: e,
                    deps: deps_of(e),
                });
            }
        }
        for d in self.data.clone() {
            pending.push(Pending {
                item: Item::Data(d.label),
                file: d.file,
                expr: d.name_expr,
                deps: deps_of(d.name_expr),
            });
        }
        let is_pending = |pending: &[Pending<'_>], root: &str, attr: &str| {
            pending.iter().any(|p| match p.item {
                Item::Local(n) => root == "local" && n == attr,
                Item::TfName(k, l) => root == k.terraform_type() && l == attr,
                Item::Data(_) => root == "data" && attr == INSTANCE_TYPE_DATA,
            })
        };
        loop {
            let ready: Vec<usize> = (0..pending.len())
                .filter(|&i| {
                    pending[i]
                        .deps
                        .iter()
                        .all(|(root, attr)| !is_pending(&pending, root, attr))
                })
                .collect();
            if ready.is_empty() {
                break;
            }
            let ctx = scope.context();
            let mut results = vec![];
            for &i in &ready {
                let p = &pending[i];
                if !self.check_refs(p.file, p.expr, scope) {
                    results.push((i, None));
                    continue;
                }
                results.push((i, self.eval(p.file, p.expr, &ctx)));
            }
            for (i, v) in results.iter().rev() {
                let p = pending.remove(*i);
                match (&p.item, v) {
                    (Item::Local(n), Some(v)) => {
                        scope.locals.insert(n.to_string(), v.clone());
                    }
                    (Item::TfName(k, label), Some(v)) => match v.as_str() {
                        Some(s) => {
                            scope
                                .tf_names
                                .entry(*k)
                                .or_default()
                                .insert(label.to_string(), s.to_string());
                            scope.names.entry(*k).or_default().insert(s.to_string());
                        }
                        None => self.err(
                            Diagnostic::error(format!(
                                "invalid value for `name` of {}.{label}",
                                k.terraform_type()
                            ))
                            .at(self.file(p.file).loc(p.expr.span()))
                            .detail(format!("expected a string, got {}", check::describe(v)))
                            .hint("the name is a string, e.g. name = \"embedder\""),
                        ),
                    },
                    // A failed evaluation was reported; mark it resolved so dependants report their own errors.
                    (Item::Local(n), None) => {
                        scope.locals.insert(n.to_string(), Value::Null);
                    }
                    (Item::Data(label), Some(v)) => match v.as_str().and_then(catalog::lookup) {
                        Some(t) => {
                            let mut attrs = serde_json::to_value(t).unwrap_or(Value::Null);
                            if let Value::Object(m) = &mut attrs {
                                m.insert("id".into(), Value::String(t.name.to_string()));
                            }
                            scope.data_instance_types.insert(label.to_string(), attrs);
                        }
                        None => {
                            let name = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                            let close = catalog::close_matches(&name, 3);
                            self.err(
                                Diagnostic::error(format!("unknown instance type `{name}`"))
                                    .at(self.file(p.file).loc(p.expr.span()))
                                    .path(format!("data.{INSTANCE_TYPE_DATA}.{label}.name"))
                                    .detail(format!("close matches: {}", close.join(", ")))
                                    .hint("use an EC2 NVIDIA GPU instance type from the built-in catalogue"),
                            );
                        }
                    },
                    (Item::TfName(..) | Item::Data(_), None) => {}
                }
            }
        }
        for p in pending {
            let what = match p.item {
                Item::Local(n) => format!("local.{n}"),
                Item::TfName(k, l) => format!("{}.{l}.name", k.terraform_type()),
                Item::Data(l) => format!("data.{INSTANCE_TYPE_DATA}.{l}.name"),
            };
            self.err(
                Diagnostic::error(format!("{what} depends on itself"))
                    .at(self.file(p.file).loc(p.expr.span()))
                    .detail("the values form a cycle of references")
                    .hint("break the cycle: compute one of the values from constants or variables"),
            );
        }
    }

    /// Checks the references of `expr` against what is declared; reports bad ones.
    fn check_refs(&mut self, fi: usize, expr: &Expression, scope: &Scope) -> bool {
        let file = self.file(fi);
        let mut ok = true;
        for r in refs_of(expr) {
            let loc = file.loc(r.span.clone());
            let first = r.attrs.first().map(String::as_str);
            if r.root == "data" {
                let ty = r.attrs.first().map(String::as_str).unwrap_or("");
                let label = r.attrs.get(1).map(String::as_str).unwrap_or("");
                if ty != INSTANCE_TYPE_DATA {
                    ok = false;
                    self.err(
                        Diagnostic::error(format!("data source `data.{ty}` cannot be read here"))
                            .at(loc)
                            .detail(format!("gpushare reads only data.{INSTANCE_TYPE_DATA} (the built-in catalogue) outside Terraform"))
                            .hint("use a literal or a variable instead"),
                    );
                } else if !scope.data_labels.contains(label) {
                    ok = false;
                    self.err(
                        Diagnostic::error(format!(
                            "bad reference `data.{ty}.{label}`: no such data block"
                        ))
                        .at(loc)
                        .maybe_hint(suggest(label, scope.data_labels.iter().map(String::as_str))),
                    );
                }
                continue;
            }
            // Sets of known names (borrowed: configurations can hold thousands).
            let empty = BTreeSet::new();
            let (what, known): (String, Vec<&BTreeSet<String>>) = match r.root.as_str() {
                "var" => ("variable".into(), vec![&scope.declared_vars]),
                "local" => ("local value".into(), vec![&scope.declared_locals]),
                root => {
                    if let Some(kind) = ResourceKind::parse(root) {
                        // Resolved Terraform names are in `names` too.
                        let names = vec![scope.names.get(&kind).unwrap_or(&empty)];
                        if let Some(extra) = r.attrs.get(1) {
                            ok = false;
                            self.err(
                                Diagnostic::error(format!("unsupported reference `{root}.{}.{extra}`", r.attrs[0]))
                                    .at(loc.clone())
                                    .detail(format!("`{root}.{}` evaluates to the resource's name; its attributes cannot be referenced", r.attrs[0]))
                                    .hint(format!("write `{root}.{}`", r.attrs[0])),
                            );
                            continue;
                        }
                        (kind.as_str().to_string(), names)
                    } else if let Some(kind) =
                        root.strip_prefix("gpushare_").and_then(ResourceKind::parse)
                    {
                        let labels = vec![
                            scope.tf_labels.get(&kind).unwrap_or(&empty),
                            scope.names.get(&kind).unwrap_or(&empty),
                        ];
                        if let (Some(_), Some(attr)) = (first, r.attrs.get(1)) {
                            if attr != "name" && attr != "id" {
                                ok = false;
                                self.err(
                                    Diagnostic::error(format!("unsupported reference `{root}.{}.{attr}`", r.attrs[0]))
                                        .at(loc.clone())
                                        .detail("only the `name` and `id` of a gpushare resource can be referenced in configuration")
                                        .hint(format!("use `{root}.{}.name`", r.attrs[0])),
                                );
                            }
                        }
                        (kind.terraform_type(), labels)
                    } else if root.starts_with("gpushare_") {
                        ok = false;
                        let known: Vec<String> = ResourceKind::ALL
                            .iter()
                            .map(|k| k.terraform_type())
                            .collect();
                        self.err(
                            Diagnostic::error(format!("unknown resource type `{root}`"))
                                .at(loc)
                                .maybe_hint(suggest(root, known.iter().map(String::as_str))),
                        );
                        continue;
                    } else {
                        let roots = [
                            "var",
                            "local",
                            "capacity_provider",
                            "gpu_instance",
                            "task_definition",
                            "service",
                        ];
                        if !r.attrs.is_empty() {
                            if let Some(n) = nearest(root, roots) {
                                ok = false;
                                self.err(
                                    Diagnostic::error(format!(
                                        "unknown reference `{root}.{}`",
                                        r.attrs.join(".")
                                    ))
                                    .at(loc)
                                    .detail(format!(
                                        "`{root}` is not a variable, local value or resource kind"
                                    ))
                                    .hint(format!("did you mean `{n}.{}`?", r.attrs.join("."))),
                                );
                            }
                        }
                        continue; // left to evaluation (e.g. for-expression variables)
                    }
                }
            };
            let Some(first) = first else {
                ok = false;
                self.err(
                    Diagnostic::error(format!("incomplete reference `{}`", r.root))
                        .at(loc)
                        .hint(format!("refer to one {what}: `{}.NAME`", r.root)),
                );
                continue;
            };
            if !known.iter().any(|set| set.contains(first)) {
                ok = false;
                let known: BTreeSet<&str> = known
                    .iter()
                    .flat_map(|set| set.iter().map(String::as_str))
                    .collect();
                let (summary, hint) = if r.root == "var" {
                    (
                        format!("undefined variable `var.{first}`"),
                        format!("declare it: variable \"{first}\" {{ default = ... }}"),
                    )
                } else if r.root == "local" {
                    (
                        format!("undefined local value `local.{first}`"),
                        format!("define it in a locals block: locals {{ {first} = ... }}"),
                    )
                } else {
                    (
                        format!(
                            "bad reference `{}.{first}`: no {what} named \"{first}\"",
                            r.root
                        ),
                        format!("declare {what} \"{first}\" or refer to an existing one"),
                    )
                };
                let detail = if known.is_empty() {
                    format!("no {what} is declared")
                } else {
                    let shown: Vec<&str> = known.iter().copied().take(12).collect();
                    let more = known.len() - shown.len();
                    let more = if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    };
                    format!("declared: {}{more}", shown.join(", "))
                };
                let h = suggest(first, known.iter().copied()).unwrap_or(hint);
                self.err(Diagnostic::error(summary).at(loc).detail(detail).hint(h));
            }
        }
        ok
    }

    /// Evaluates an expression; reports a failure at the expression.
    fn eval(&mut self, fi: usize, expr: &Expression, ctx: &Context<'_>) -> Option<Value> {
        let e: hcl::Expression = expr.clone().into();
        match e.evaluate(ctx) {
            Ok(v) => Some(from_hcl(&v)),
            Err(err) => {
                let file = self.file(fi);
                let msg = err.to_string();
                let hint = if msg.contains("undefined function") {
                    format!("available functions: {}", funcs::NAMES.join(", "))
                } else if let Expression::Variable(v) = expr {
                    let v = v.as_str();
                    format!("to write a string, quote it: \"{v}\"; to refer to a resource, write KIND.{v} (e.g. task_definition.{v})")
                } else if msg.contains("undefined variable") {
                    "refer to values as var.NAME, local.NAME or KIND.NAME (e.g. task_definition.embedder)".to_string()
                } else {
                    "check the expression's operands and types".to_string()
                };
                self.err(
                    Diagnostic::error("cannot evaluate expression")
                        .at(file.loc(expr.span()))
                        .detail(msg)
                        .hint(hint),
                );
                None
            }
        }
    }

    /// Builds one block body as a JSON object checked against `level`.
    #[allow(clippy::too_many_arguments)]
    fn build(
        &mut self,
        fi: usize,
        body: &Body,
        level: &dyn BlockLike,
        path: &str,
        top: bool,
        ctx: &Context<'_>,
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
                    let before = self.diags.len();
                    if !self.check_refs(fi, &a.value, scope) {
                        for d in &mut self.diags[before..] {
                            d.path.get_or_insert_with(|| format!("{path}.{key}"));
                        }
                        continue;
                    }
                    let v = match direct_reference(&a.value, scope) {
                        Some(v) => v,
                        None => match self.eval(fi, &a.value, ctx) {
                            Some(v) => v,
                            None => continue,
                        },
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
                        ctx,
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
    fn unknown(
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

fn placeholder(ty: &AttrType) -> &'static str {
    match ty {
        AttrType::String => "\"...\"",
        AttrType::Number => "<number>",
        AttrType::Bool => "true",
        AttrType::List(_) => "[...]",
        AttrType::Map(_) => "{ ... }",
    }
}

/// `duplicate WHAT` at `at`, the second declaration, saying where the first one stands.
fn declared_again(what: &str, at: Option<SourceLoc>, first: Option<&SourceLoc>) -> Diagnostic {
    let first = first.map_or_else(|| "elsewhere".to_string(), ToString::to_string);
    Diagnostic::error(format!("duplicate {what}"))
        .at(at)
        .detail(format!("{what} is also declared at {first}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unclosed_brace_finds_the_block_left_open() {
        let t = "a {\n  b = \"}\" # }\n  c {\n  }\n\nd {\n}\n";
        assert_eq!(
            unclosed_brace(t),
            Some(2),
            "a's brace, found when d starts at column 1"
        );
        let t = "a {\n}\nb {\n  c {\n";
        assert_eq!(unclosed_brace(t), Some(t.find("b {").map_or(0, |i| i + 2)));
        assert_eq!(unclosed_brace("a {\n /* { */ }\n"), None);
    }

    #[test]
    fn second_declarations_name_the_first() {
        let src = |name: &str, text: &str| Source {
            name: name.into(),
            text: text.into(),
        };
        let a = src(
            "a.hcl",
            "gpushare {\n}\nvariable \"v\" {\n  default = 1\n}\nlocals {\n  l = 1\n}\n",
        );
        let b = src(
            "b.hcl",
            "locals {\n  l = 2\n}\nvariable \"v\" {\n}\ngpushare {\n}\n",
        );
        let diags = load_sources(&[a, b], &LoadOptions::default()).expect_err("duplicates");
        let found = |summary: &str| {
            diags
                .0
                .iter()
                .find(|d| d.summary == summary)
                .unwrap_or_else(|| panic!("no {summary:?} in {diags}"))
                .clone()
        };
        for (summary, at, first) in [
            ("duplicate variable \"v\"", "b.hcl:4:1", "a.hcl:3:1"),
            ("duplicate local value \"l\"", "b.hcl:2:3", "a.hcl:7:3"),
            ("duplicate gpushare block", "b.hcl:6:1", "a.hcl:1:1"),
        ] {
            let d = found(summary);
            let what = summary.trim_start_matches("duplicate ");
            assert_eq!(
                d.loc.as_ref().map(|l| l.to_string()).as_deref(),
                Some(at),
                "{d:?}"
            );
            assert_eq!(
                d.detail.as_deref(),
                Some(format!("{what} is also declared at {first}").as_str()),
                "{d:?}"
            );
        }
    }
}

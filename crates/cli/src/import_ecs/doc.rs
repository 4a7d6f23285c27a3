//! The generated configuration as a small tree of blocks and attributes, written
//! either as gpushare HCL (`task_definition "NAME" { container "C" { ... } }`) or as
//! Terraform `gpushare_*` resources (`resource "gpushare_task_definition" "NAME" {
//! name = "NAME" container { name = "C" ... } }`), then put in canonical form by
//! `gpushare fmt`'s formatter.

use gpushare_config::{format_source, Source};
use std::fmt::Write;

/// The two output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// gpushare HCL (`*.hcl`).
    Hcl,
    /// Terraform `gpushare_*` resources (`*.tf`).
    Tf,
}

impl Format {
    pub fn extension(self) -> &'static str {
        match self {
            Format::Hcl => "hcl",
            Format::Tf => "tf",
        }
    }
}

/// A value of an attribute.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Str(String),
    Num(i64),
    Bool(bool),
    List(Vec<String>),
    /// An object whose values are strings or variable references, in this order.
    Map(Vec<(String, Val)>),
    /// A reference to a resource of the configuration by kind and name
    /// (`task_definition.NAME`; in Terraform `gpushare_task_definition.NAME.name`).
    Ref(&'static str, String),
    /// `var.NAME`.
    Var(String),
}

/// A line of a block's body.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Attr(&'static str, Val),
    Block(Block),
    Comment(String),
}

/// A block: `ident "label" { items }`. A labelled block is a resource at the top
/// and a named sub-block (container, volume) below it; in Terraform the label is
/// the `name` attribute.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    pub ident: &'static str,
    pub label: Option<String>,
    pub items: Vec<Item>,
}

impl Block {
    pub fn new(ident: &'static str, label: Option<String>) -> Self {
        Block {
            ident,
            label,
            items: vec![],
        }
    }

    pub fn attr(&mut self, name: &'static str, v: Val) {
        self.items.push(Item::Attr(name, v));
    }

    /// The attribute, when `v` is set.
    pub fn opt(&mut self, name: &'static str, v: Option<Val>) {
        if let Some(v) = v {
            self.attr(name, v);
        }
    }

    /// The attribute after the block's other attributes, before its sub-blocks.
    pub fn insert_attr(&mut self, name: &'static str, v: Val) {
        let at = self
            .items
            .iter()
            .position(|i| matches!(i, Item::Block(_)))
            .unwrap_or(self.items.len());
        self.items.insert(at, Item::Attr(name, v));
    }

    pub fn block(&mut self, b: Block) {
        self.items.push(Item::Block(b));
    }

    pub fn comment(&mut self, text: impl Into<String>) {
        self.items.push(Item::Comment(text.into()));
    }

    /// The attribute `name`, if set (tests and the pool sizing read it back).
    pub fn get(&self, name: &str) -> Option<&Val> {
        self.items.iter().find_map(|i| match i {
            Item::Attr(n, v) if *n == name => Some(v),
            _ => None,
        })
    }
}

/// A whole generated file: header comment lines, then top-level blocks (`variable`
/// blocks are the same in both formats; the others are resources).
#[derive(Debug, Default)]
pub struct Doc {
    pub header: Vec<String>,
    pub blocks: Vec<Block>,
}

/// Top-level blocks that are not resources (written as they are in both formats).
const PLAIN_TOP: &[&str] = &["variable"];

impl Doc {
    /// The file's text in `format`, canonically formatted.
    pub fn render(&self, format: Format, name: &str) -> String {
        let mut out = String::new();
        for line in &self.header {
            comment(line, "", &mut out);
        }
        for b in &self.blocks {
            out.push('\n');
            top_block(b, format, &mut out);
        }
        let src = Source {
            name: name.to_string(),
            text: out,
        };
        // The text is built here and always parses; were it ever not to, the
        // unformatted text is still valid to show (and `gpushare fmt` says why).
        match format_source(&src) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!("formatting the generated {name}: {e}");
                src.text
            }
        }
    }
}

fn top_block(b: &Block, format: Format, out: &mut String) {
    let label = b.label.clone().unwrap_or_default();
    if b.label.is_none() && format == Format::Hcl {
        // An unlabelled block (`gpushare { ... }`).
        let _ = writeln!(out, "{} {{", b.ident);
    } else if format == Format::Hcl || PLAIN_TOP.contains(&b.ident) {
        let _ = writeln!(out, "{} {} {{", b.ident, quote(&label));
    } else {
        let _ = writeln!(
            out,
            "resource \"gpushare_{}\" {} {{",
            b.ident,
            quote(&tf_label(&label))
        );
        let _ = writeln!(out, "  name = {}", quote(&label));
    }
    body(&b.items, format, 1, out);
    out.push_str("}\n");
}

fn body(items: &[Item], format: Format, depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    for item in items {
        match item {
            Item::Comment(c) => {
                for line in c.lines() {
                    comment(line, &pad, out);
                }
            }
            Item::Attr(name, v) => {
                let _ = writeln!(out, "{pad}{name} = {}", value(v, format));
            }
            Item::Block(b) => {
                match (&b.label, format) {
                    (Some(l), Format::Hcl) => {
                        let _ = writeln!(out, "{pad}{} {} {{", b.ident, quote(l));
                    }
                    (Some(l), Format::Tf) => {
                        let _ = writeln!(out, "{pad}{} {{", b.ident);
                        let _ = writeln!(out, "{pad}  name = {}", quote(l));
                    }
                    (None, _) => {
                        let _ = writeln!(out, "{pad}{} {{", b.ident);
                    }
                }
                body(&b.items, format, depth + 1, out);
                let _ = writeln!(out, "{pad}}}");
            }
        }
    }
}

/// One comment line (`#` alone for an empty one).
fn comment(line: &str, pad: &str, out: &mut String) {
    if line.is_empty() {
        let _ = writeln!(out, "{pad}#");
    } else {
        let _ = writeln!(out, "{pad}# {line}");
    }
}

fn value(v: &Val, format: Format) -> String {
    match v {
        Val::Str(s) => quote(s),
        Val::Num(n) => n.to_string(),
        Val::Bool(b) => b.to_string(),
        Val::List(items) => {
            let parts: Vec<String> = items.iter().map(|s| quote(s)).collect();
            format!("[{}]", parts.join(", "))
        }
        Val::Map(entries) if entries.is_empty() => "{}".to_string(),
        Val::Map(entries) => {
            let mut s = "{\n".to_string();
            for (k, v) in entries {
                let _ = writeln!(s, "{} = {}", map_key(k), value(v, format));
            }
            s.push('}');
            s
        }
        Val::Ref(kind, name) => match format {
            Format::Hcl => format!("{kind}.{name}"),
            Format::Tf => format!("gpushare_{kind}.{}.name", tf_label(name)),
        },
        Val::Var(name) => format!("var.{name}"),
    }
}

/// A map key: bare when it is an identifier, quoted otherwise (`"com.example/team"`).
fn map_key(k: &str) -> String {
    if is_identifier(k) {
        k.to_string()
    } else {
        quote(k)
    }
}

/// An HCL identifier: a letter or `_`, then letters, digits, `_` and `-`.
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A Terraform resource name: gpushare names may start with a digit, Terraform's may not.
pub fn tf_label(name: &str) -> String {
    if is_identifier(name) {
        name.to_string()
    } else {
        format!("_{name}")
    }
}

/// An HCL string literal: `"`, `\` and control characters escaped, and template
/// openers (`${`, `%{`) doubled so that they stay literal text.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '$' | '%' if chars.peek() == Some(&'{') => {
                out.push(c);
                out.push(c);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

//! A resource change as Terraform prints it: `+ create`, `~ update in-place`,
//! `-/+ replace`, each changed attribute (`old -> new`, multi-line values as HCL
//! blocks, sensitive values hidden).

use super::{Paint, BOLD, DIM, GREEN, RED, YELLOW};
use crate::model::{SENSITIVE, SENSITIVE_CHANGED};
use crate::plan::{Action, AttrChange, ResourceChange};
use crate::schema::{self, Block};
use serde_json::Value;
use std::fmt::Write as _;

pub(super) fn resource_change(out: &mut String, rc: &ResourceChange, pt: &Paint) {
    let (sym, color, verb) = match rc.action {
        Action::Create => ("  +", GREEN, "will be created"),
        Action::Update => ("  ~", YELLOW, "will be updated in place"),
        Action::Delete => ("  -", RED, "will be destroyed"),
        Action::Replace => ("-/+", RED, "must be replaced"),
    };
    let blocks = &schema::schema(rc.addr.kind).blocks;
    let _ = writeln!(out, "  {}", pt.p(BOLD, &format!("# {} {verb}", rc.addr)));
    let _ = writeln!(
        out,
        "{} {} {:?} {{",
        pt.p(color, sym),
        rc.addr.kind.as_str(),
        rc.addr.name
    );
    // Nulls are not shown on create and destroy (they are "not set"), nor a registered
    // pool's launch settings unless they change (its hosts join by themselves).
    let registered = rc.addr.kind == crate::model::ResourceKind::CapacityProvider
        && [&rc.before, &rc.after]
            .into_iter()
            .flatten()
            .any(crate::model::is_registered_attrs);
    let shown: Vec<&AttrChange> = rc
        .changes
        .iter()
        .filter(|c| {
            !matches!(
                (&c.before, &c.after),
                (None | Some(Value::Null), None | Some(Value::Null))
            )
        })
        .filter(|c| {
            !registered
                || !crate::model::LAUNCH_ONLY_ATTRIBUTES.contains(&c.name.as_str())
                || matches!((&c.before, &c.after), (Some(b), Some(a)) if a != b)
        })
        .collect();
    let width = shown
        .iter()
        .filter(|c| !is_multiline(c, blocks))
        .map(|c| c.name.len())
        .max()
        .unwrap_or(0);
    for c in shown {
        attr_change(out, c, blocks, width, pt);
    }
    let _ = writeln!(out, "    }}");
    let _ = writeln!(out);
}

/// Compact JSON for short values; `None` for values shown over several lines.
fn short(v: &Value) -> Option<String> {
    let s = inline(v);
    let simple = !matches!(v, Value::Array(_) | Value::Object(_)) || s.len() <= 48;
    (simple && !s.contains("\\n")).then_some(s)
}

/// A value on one line: JSON scalars, `["a", "b"]`, `{ "k" = "v" }`.
fn inline(v: &Value) -> String {
    match v {
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(inline).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) if m.is_empty() => "{}".to_string(),
        Value::Object(m) => {
            let kv: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{} = {}", Value::String(k.clone()), inline(v)))
                .collect();
            format!("{{ {} }}", kv.join(", "))
        }
        // Redacted secrets read as Terraform shows them: `(sensitive)`, unquoted.
        Value::String(s) if s == SENSITIVE || s == SENSITIVE_CHANGED => s.clone(),
        other => other.to_string(),
    }
}

fn is_multiline(c: &AttrChange, blocks: &[Block]) -> bool {
    blocks.iter().any(|b| b.name == c.name)
        || c.before.as_ref().is_some_and(|v| short(v).is_none())
        || c.after.as_ref().is_some_and(|v| short(v).is_none())
}

/// `name = value` lines, HCL-like: blocks (from the schema) as `name "label" { ... }`,
/// long lists and maps over several lines, nulls left out. Two spaces per level.
fn hcl_lines(out: &mut Vec<String>, name: &str, v: &Value, blocks: &[Block], indent: usize) {
    let pad = " ".repeat(indent);
    if v.is_null() {
        return;
    }
    if let Some(b) = blocks.iter().find(|b| b.name == name) {
        let items: Vec<&Value> = match v {
            Value::Array(items) => items.iter().collect(),
            other => vec![other],
        };
        for item in items {
            let label = b
                .label
                .as_ref()
                .and_then(|l| item.get(l))
                .map(|l| format!(" {l}"))
                .unwrap_or_default();
            out.push(format!("{pad}{name}{label} {{"));
            if let Value::Object(m) = item {
                let width = m
                    .iter()
                    .filter(|(k, v)| {
                        !v.is_null()
                            && Some(*k) != b.label.as_ref()
                            && !b.blocks.iter().any(|x| &x.name == *k)
                    })
                    .filter(|(_, v)| short(v).is_some())
                    .map(|(k, _)| k.len())
                    .max()
                    .unwrap_or(0);
                for (k, v) in m {
                    if Some(k) == b.label.as_ref() {
                        continue;
                    }
                    if short(v).is_some() && !b.blocks.iter().any(|x| &x.name == k) {
                        if !v.is_null() {
                            out.push(format!("{pad}  {k:<width$} = {}", inline(v)));
                        }
                    } else {
                        hcl_lines(out, k, v, &b.blocks, indent + 2);
                    }
                }
            }
            out.push(format!("{pad}}}"));
        }
        return;
    }
    match v {
        Value::Array(items) if short(v).is_none() => {
            out.push(format!("{pad}{name} = ["));
            for i in items {
                out.push(format!("{pad}  {},", inline(i)));
            }
            out.push(format!("{pad}]"));
        }
        Value::Object(m) if short(v).is_none() => {
            out.push(format!("{pad}{name} = {{"));
            for (k, v) in m {
                out.push(format!(
                    "{pad}  {} = {}",
                    Value::String(k.clone()),
                    inline(v)
                ));
            }
            out.push(format!("{pad}}}"));
        }
        _ => out.push(format!("{pad}{name} = {}", inline(v))),
    }
}

fn attr_change(out: &mut String, c: &AttrChange, blocks: &[Block], width: usize, pt: &Paint) {
    let forces = if c.forces_replacement {
        format!(" {}", pt.p(RED, "# forces replacement"))
    } else {
        String::new()
    };
    let (sym, color) = match (&c.before, &c.after) {
        (None, Some(_)) => ("+", GREEN),
        (Some(_), None) => ("-", RED),
        _ => ("~", YELLOW),
    };
    if !is_multiline(c, blocks) {
        let b = c
            .before
            .as_ref()
            .and_then(short)
            .unwrap_or_else(|| "null".into());
        let a = c
            .after
            .as_ref()
            .and_then(short)
            .unwrap_or_else(|| "null".into());
        let value = match (&c.before, &c.after) {
            (None, Some(_)) => a,
            (Some(_), None) => b,
            _ => format!("{b} -> {a}"),
        };
        let _ = writeln!(
            out,
            "      {} {:<width$} = {value}{forces}",
            pt.p(color, sym),
            c.name
        );
        return;
    }
    let lines = |v: &Option<Value>| {
        let mut l = vec![];
        if let Some(v) = v {
            hcl_lines(&mut l, &c.name, v, blocks, 0);
        }
        l
    };
    let (b, a) = (lines(&c.before), lines(&c.after));
    let (b, a): (Vec<&str>, Vec<&str>) = (
        b.iter().map(String::as_str).collect(),
        a.iter().map(String::as_str).collect(),
    );
    let diff = similar::TextDiff::configure().diff_slices(&b, &a);
    let mut forces = forces;
    let groups = diff.grouped_ops(3);
    for (i, group) in groups.iter().enumerate() {
        // "..." wherever unchanged lines are left out.
        let starts_at = group.first().map_or(0, |op| op.new_range().start);
        if i > 0 || starts_at > 0 {
            let _ = writeln!(out, "        {}", pt.p(DIM, "..."));
        }
        for op in group {
            for change in diff.iter_changes(op) {
                let line = change.value();
                let _ = match change.tag() {
                    similar::ChangeTag::Delete => writeln!(
                        out,
                        "      {} {line}{}",
                        pt.p(RED, "-"),
                        std::mem::take(&mut forces)
                    ),
                    similar::ChangeTag::Insert => writeln!(
                        out,
                        "      {} {line}{}",
                        pt.p(GREEN, "+"),
                        std::mem::take(&mut forces)
                    ),
                    // The unchanged header of a changed block reads `~ name {`.
                    similar::ChangeTag::Equal if change.old_index() == Some(0) => {
                        writeln!(out, "      {} {line}", pt.p(YELLOW, "~"))
                    }
                    similar::ChangeTag::Equal => writeln!(out, "        {line}"),
                };
            }
        }
    }
    let ends_at = groups
        .last()
        .and_then(|g| g.last())
        .map_or(0, |op| op.new_range().end);
    if !groups.is_empty() && ends_at < a.len() {
        let _ = writeln!(out, "        {}", pt.p(DIM, "..."));
    }
}

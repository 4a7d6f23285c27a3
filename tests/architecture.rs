//! The module structure of every crate in the workspace (issue 27, item 3): explicit
//! imports, and no circles between modules.
//!
//! 1. No glob re-exports (`pub use x::*`) and no `#[allow(unused_imports)]` outside
//!    test code: what clippy cannot see. Glob imports themselves are clippy's
//!    `wildcard_imports` (on for the workspace, Cargo.toml `[workspace.lints]`), which
//!    skips re-exports; an allowed rustc lint is invisible to it. Test code is a
//!    `#[cfg(test)] mod x { ... }` block or a file declared as `#[cfg(test)] mod x;`
//!    (with the modules below it). No exceptions.
//! 2. No import circles. Each file is a module; a `use` line or an inline `crate::` or
//!    `super::` path in non-test code is an edge to the longest module its path names.
//!    Edges between a module and its ancestors or descendants are structure (a parent
//!    re-exporting its child, a child using its parent) and are left out. No strongly
//!    connected group of two or more modules may remain, neither between files nor
//!    between top-level modules. A circle that has to stay for a while is listed in
//!    `KNOWN_CYCLES` (empty today), and the list must match what is found exactly, so
//!    it cannot go stale.
//! 3. Test support is crates, never source included by `#[path]` (issues 27 and 53):
//!    no crate depends on gpushare-tests (the end-to-end tests), neither as a
//!    dependency nor as a dev-dependency; gpushare-testkit (the support every crate's
//!    tests share) depends on no workspace crate but gpushare-core; and
//!    gpushare-testkit-engine (the support that needs the engine, the agent or the
//!    etcd store, and the store conformance suite) is only ever a dev-dependency (of
//!    any crate; gpushare-tests, itself only tests, may depend on it), so the cycles it
//!    closes are dev-only and no shipped code links test support. Read from every
//!    member's Cargo.toml.
//! 4. (Was: no function longer than 120 lines.) Clippy's `too_many_lines` with
//!    `too-many-lines-threshold = 120` (clippy.toml) checks it now, on every target;
//!    a test that is one long scenario says so with an `#[allow]` and its reason.
//!
//! The checker reads the source text with comments and literals blanked, not the
//! compiler's view; the self-tests at the end pin down what it sees and what it skips.

use gpushare_tests::workspace_root;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

/// The circles known today (none). The list must match the findings exactly: when one
/// of them is gone or changes, the whole-tree test fails and asks to update the list.
const KNOWN_CYCLES: &[KnownCycle] = &[];

struct KnownCycle {
    krate: &'static str,
    level: Level,
    modules: &'static [&'static str],
    why: &'static str,
}

/// A module: its path below the crate root, empty for the root (`lib.rs`, `main.rs`).
type Module = Vec<String>;
/// Edges between modules, each with one place that makes it: "file:line: text".
type Edges = BTreeMap<Module, BTreeMap<Module, String>>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    /// One module per file; edges between ancestors and descendants left out.
    File,
    /// Modules collapsed to their first path segment; the crate root left out.
    TopLevel,
}

#[derive(Debug)]
enum Finding {
    /// A glob re-export or an `allow(unused_imports)` in non-test code, at "file:line: text".
    Glob { krate: String, place: String },
    /// A strongly connected group of modules, with the edges between them.
    Cycle {
        krate: String,
        level: Level,
        modules: Vec<String>,
        edges: Vec<String>,
    },
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::Glob { krate, place } => write!(
                f,
                "{krate}: {place}\n  a glob re-export or allow(unused_imports) outside test \
                 code: re-export or import the items by name"
            ),
            Finding::Cycle {
                krate,
                level,
                modules,
                edges,
            } => {
                let modules = modules.join(", ");
                write!(
                    f,
                    "{krate}: import circle between {level:?} modules {{{modules}}}:"
                )?;
                edges.iter().try_for_each(|edge| write!(f, "\n  {edge}"))
            }
        }
    }
}

/// Checks one crate: `files` maps paths below its `src/` ("lib.rs", "model/live.rs") to
/// their source text. Returns every glob and every circle, known circles included.
fn check_crate(krate: &str, files: &BTreeMap<String, String>) -> Vec<Finding> {
    let sources = non_test_code(files);
    let mods: BTreeSet<Module> = sources.iter().map(|(_, m, _)| m.clone()).collect();
    let mut findings = Vec::new();
    let mut edges = Edges::new();
    for (path, user, code) in &sources {
        let place = |at: usize, text: &str| {
            format!("{path}:{}: {text}", code[..at].matches('\n').count() + 1)
        };
        let mut glob = |place: String| {
            findings.push(Finding::Glob {
                krate: krate.to_string(),
                place,
            });
        };
        let mut edge = |segs: &[&str], at: usize, text: &str| {
            if let Some(target) = resolve(user, segs, &mods).filter(|t| t != user) {
                let targets = edges.entry(user.clone()).or_default();
                targets.entry(target).or_insert_with(|| place(at, text));
            }
        };
        for (at, tree) in use_statements(code) {
            let text = format!("use {tree};");
            let line_start = code[..at].rfind('\n').map_or(0, |k| k + 1);
            let reexport = code[line_start..at].trim_start().starts_with("pub");
            for item in expand(&tree) {
                let segs: Vec<&str> = item.split("::").filter(|s| !s.is_empty()).collect();
                if reexport && segs.last() == Some(&"*") {
                    glob(place(at, &text));
                }
                edge(&segs, at, &text);
            }
        }
        for (at, text) in inline_paths(code) {
            edge(&text.split("::").collect::<Vec<_>>(), at, text);
        }
        for (n, line) in code.lines().enumerate() {
            let lint = line.contains("allow(") || line.contains("expect(");
            if lint && line.contains("unused_imports") {
                glob(format!("{path}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    for level in [Level::File, Level::TopLevel] {
        let graph = at_level(&edges, level);
        for group in strongly_connected(&graph) {
            let mut listed = Vec::new();
            for a in &group {
                for (b, place) in graph[a].iter().filter(|(b, _)| group.contains(b)) {
                    listed.push(format!("{} -> {}  ({place})", name(a), name(b)));
                }
            }
            let modules = group.iter().map(name).collect();
            let krate = krate.to_string();
            findings.push(Finding::Cycle {
                krate,
                level,
                modules,
                edges: listed,
            });
        }
    }
    findings
}

/// The problems in `findings`, given the known circles: each finding that is not a known
/// circle, and each known circle that no finding matches exactly.
fn judge(findings: &[Finding], known: &[KnownCycle]) -> Vec<String> {
    let fits = |k: &KnownCycle, f: &Finding| match f {
        Finding::Cycle {
            krate,
            level,
            modules,
            ..
        } => krate == k.krate && *level == k.level && modules.iter().eq(k.modules),
        Finding::Glob { .. } => false,
    };
    let new = findings
        .iter()
        .filter(|f| !known.iter().any(|k| fits(k, f)));
    let mut problems: Vec<String> = new.map(|f| f.to_string()).collect();
    for k in known
        .iter()
        .filter(|k| !findings.iter().any(|f| fits(k, f)))
    {
        problems.push(format!(
            "KNOWN_CYCLES lists {} {:?} modules {{{}}} ({}), but that circle is no longer \
             found exactly so: update KNOWN_CYCLES in tests/architecture.rs to what is found",
            k.krate,
            k.level,
            k.modules.join(", "),
            k.why
        ));
    }
    problems
}

/// Each file's non-test code (comments, literals and test blocks blanked) with its path
/// and module; files of `#[cfg(test)] mod x;` modules, and those below them, left out.
fn non_test_code(files: &BTreeMap<String, String>) -> Vec<(String, Module, String)> {
    let stripped: Vec<(&String, String)> = files.iter().map(|(p, s)| (p, strip_code(s))).collect();
    let mut test_mods = Vec::new();
    for (path, code) in &stripped {
        for item in cfg_test_items(code) {
            if let TestItem::File(name) = item {
                test_mods.push([module_of(path), vec![name]].concat());
            }
        }
    }
    let mut sources = Vec::new();
    for (path, mut code) in stripped {
        let module = module_of(path);
        if test_mods.iter().any(|t| module.starts_with(t)) {
            continue;
        }
        for item in cfg_test_items(&code).into_iter().rev() {
            if let TestItem::Block(start, end) = item {
                let blank: String = code[start..end].bytes().map(blank).collect();
                code.replace_range(start..end, &blank);
            }
        }
        sources.push((path.clone(), module, code));
    }
    sources
}

/// `a/b.rs` and `a/b/mod.rs` are `a::b`; `lib.rs` and `main.rs` are the crate root.
fn module_of(path: &str) -> Module {
    let mut module: Module = path
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(
        module.last().map(String::as_str),
        Some("lib" | "main" | "mod")
    ) {
        module.pop();
    }
    module
}

fn name(m: &Module) -> String {
    if m.is_empty() {
        "crate".to_string()
    } else {
        m.join("::")
    }
}

/// The longest known module a path names, seen from module `user`; `None` for a path
/// into another crate.
fn resolve(user: &Module, segs: &[&str], mods: &BTreeSet<Module>) -> Option<Module> {
    let (mut current, rest) = match *segs.first()? {
        "crate" => (Vec::new(), &segs[1..]),
        "self" => (user.clone(), &segs[1..]),
        "super" => {
            let ups = segs.iter().take_while(|s| **s == "super").count();
            (
                user[..user.len().saturating_sub(ups)].to_vec(),
                &segs[ups..],
            )
        }
        // A relative path is to a child module (`use reasons::Reason` in plan.rs).
        first if mods.contains(&[user.clone(), vec![first.to_string()]].concat()) => {
            (user.clone(), segs)
        }
        _ => return None,
    };
    let mut best = current.clone();
    for seg in rest {
        current.push(seg.to_string());
        if !mods.contains(&current) {
            break;
        }
        best = current.clone();
    }
    Some(best)
}

/// The graph at `level`, from the edges between file modules.
fn at_level(edges: &Edges, level: Level) -> Edges {
    let mut graph = Edges::new();
    for (a, targets) in edges {
        for (b, place) in targets {
            let (a, b) = match level {
                Level::File if !a.starts_with(b) && !b.starts_with(a) => (a.clone(), b.clone()),
                Level::TopLevel if !a.is_empty() && !b.is_empty() && a[0] != b[0] => {
                    (a[..1].to_vec(), b[..1].to_vec())
                }
                _ => continue,
            };
            graph
                .entry(a)
                .or_default()
                .entry(b)
                .or_insert_with(|| place.clone());
        }
    }
    graph
}

/// The strongly connected groups of two or more modules, each sorted: by definition,
/// the modules that reach each other (the graphs are small, so plain search will do).
fn strongly_connected(graph: &Edges) -> Vec<Vec<Module>> {
    fn reach<'g>(graph: &'g Edges, from: &'g Module) -> BTreeSet<&'g Module> {
        let (mut seen, mut todo) = (BTreeSet::new(), vec![from]);
        while let Some(m) = todo.pop() {
            for next in graph.get(m).into_iter().flat_map(|targets| targets.keys()) {
                if seen.insert(next) {
                    todo.push(next);
                }
            }
        }
        seen
    }
    let reached: BTreeMap<&Module, BTreeSet<&Module>> =
        graph.keys().map(|m| (m, reach(graph, m))).collect();
    let mut groups = BTreeSet::new();
    for (m, seen) in &reached {
        let back = seen
            .iter()
            .filter(|o| reached.get(**o).is_some_and(|r| r.contains(m)));
        let group: Vec<Module> = back.map(|o| o.to_vec()).collect();
        if group.len() > 1 {
            groups.insert(group);
        }
    }
    groups.into_iter().collect()
}

fn blank(b: u8) -> char {
    if b == b'\n' {
        '\n'
    } else {
        ' '
    }
}

/// `src` with comments and string and char literals blanked to spaces, byte for byte
/// (so offsets and line numbers stay). Lifetimes are left alone.
fn strip_code(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < src.len() {
        match literal_end(src, i) {
            Some(end) => {
                out.extend(src[i..end].bytes().map(blank));
                i = end;
            }
            None => {
                let c = src[i..].chars().next().expect("i is below the length");
                out.push(c);
                i += c.len_utf8();
            }
        }
    }
    out
}

/// Where the comment or literal that starts at byte `i` ends, if one starts there.
fn literal_end(src: &str, i: usize) -> Option<usize> {
    let rest = &src[i..];
    let after = |from: usize, pat: &str| {
        rest[from..]
            .find(pat)
            .map_or(src.len(), |k| i + from + k + pat.len())
    };
    if rest.starts_with("//") {
        return Some(after(0, "\n"));
    }
    if rest.starts_with("/*") {
        let (b, mut depth, mut k) = (rest.as_bytes(), 0, 0);
        while k < b.len() {
            if b[k..].starts_with(b"/*") {
                depth += 1;
                k += 2;
            } else if b[k..].starts_with(b"*/") {
                depth -= 1;
                k += 2;
                if depth == 0 {
                    return Some(i + k);
                }
            } else {
                k += 1;
            }
        }
        return Some(src.len());
    }
    let ident_before = src[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_');
    let raw = rest.strip_prefix("br").or_else(|| rest.strip_prefix('r'));
    if let Some(raw) = raw.filter(|_| !ident_before) {
        let hashes = raw.len() - raw.trim_start_matches('#').len();
        if raw[hashes..].starts_with('"') {
            let open = rest.len() - raw.len() + hashes + 1;
            return Some(after(open, &format!("\"{}", "#".repeat(hashes))));
        }
    }
    if rest.starts_with('"') {
        let mut escaped = false;
        for (k, c) in rest.char_indices().skip(1) {
            match c {
                '"' if !escaped => return Some(i + k + 1),
                '\\' => escaped = !escaped,
                _ => escaped = false,
            }
        }
        return Some(src.len());
    }
    // A char literal: '\n', '\'', '\u{7f}', 'x'; not a lifetime ('a).
    let mut chars = rest.chars();
    match (chars.next(), chars.next(), chars.next()) {
        (Some('\''), Some('\\'), _) => rest.get(3..)?.find('\'').map(|k| i + 3 + k + 1),
        (Some('\''), Some(c), Some('\'')) if c != '\'' => Some(i + 2 + c.len_utf8()),
        _ => None,
    }
}

enum TestItem {
    /// `#[cfg(test)] mod x { ... }`: the byte range from the `#` past the closing brace.
    Block(usize, usize),
    /// `#[cfg(test)] mod x;`: the module's name.
    File(String),
}

/// The `#[cfg(test)]` modules in stripped code (other attributes and a visibility may
/// stand between the attribute and `mod`).
fn cfg_test_items(code: &str) -> Vec<TestItem> {
    let mut items = Vec::new();
    for (start, attr) in code.match_indices("#[cfg(test)]") {
        let mut rest = code[start + attr.len()..].trim_start();
        loop {
            if rest.starts_with("#[") {
                rest = rest[closing(rest, 1).map_or(rest.len(), |k| k + 1)..].trim_start();
            } else if let Some(r) = rest.strip_prefix("pub") {
                let r = r.trim_start();
                let vis = if r.starts_with('(') {
                    r.find(')').map_or(r.len(), |k| k + 1)
                } else {
                    0
                };
                rest = r[vis..].trim_start();
            } else {
                break;
            }
        }
        let Some(rest) = rest
            .strip_prefix("mod")
            .filter(|r| r.starts_with(char::is_whitespace))
        else {
            continue;
        };
        let rest = rest.trim_start();
        let name_len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let after = rest[name_len..].trim_start();
        let open = code.len() - after.len();
        match after.chars().next() {
            Some('{') => items.push(TestItem::Block(
                start,
                closing(code, open).map_or(code.len(), |k| k + 1),
            )),
            Some(';') => items.push(TestItem::File(rest[..name_len].to_string())),
            _ => {}
        }
    }
    items
}

/// The byte index of the bracket closing the `{` or `[` at `open` (code stripped).
fn closing(code: &str, open: usize) -> Option<usize> {
    let (up, down) = if code[open..].starts_with('{') {
        (b'{', b'}')
    } else {
        (b'[', b']')
    };
    let mut depth = 0;
    for (k, b) in code.bytes().enumerate().skip(open) {
        depth += i32::from(b == up) - i32::from(b == down);
        if depth == 0 {
            return Some(k);
        }
    }
    None
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Each `use TREE;` in stripped code: where it starts, and its tree with whitespace
/// normalised (`crate::{a, b as c}`, however laid out, is `crate::{a,b as c}`).
fn use_statements(code: &str) -> Vec<(usize, String)> {
    let b = code.as_bytes();
    let mut found = Vec::new();
    for (at, _) in code.match_indices("use") {
        let word =
            (at == 0 || !is_ident(b[at - 1])) && b.get(at + 3).is_some_and(u8::is_ascii_whitespace);
        let Some(semi) = code[at..].find(';').filter(|_| word) else {
            continue;
        };
        let mut tree = code[at + 3..at + semi]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        for (from, to) in [
            (", ", ","),
            ("{ ", "{"),
            (" }", "}"),
            (" ::", "::"),
            (":: ", "::"),
        ] {
            tree = tree.replace(from, to);
        }
        found.push((at, tree));
    }
    found
}

/// The paths a use tree imports, braces expanded and renames (`as x`) dropped.
fn expand(tree: &str) -> Vec<String> {
    let Some(open) = tree.find('{') else {
        return vec![tree.split(" as ").next().unwrap_or(tree).to_string()];
    };
    let (head, body) = (
        &tree[..open],
        &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())],
    );
    let (mut parts, mut part, mut depth) = (Vec::new(), String::new(), 0);
    for c in body.chars() {
        depth += i32::from(c == '{') - i32::from(c == '}');
        if c == ',' && depth == 0 {
            parts.push(std::mem::take(&mut part));
        } else {
            part.push(c);
        }
    }
    parts.push(part);
    let parts = parts.iter().filter(|p| !p.is_empty());
    parts.flat_map(|p| expand(&format!("{head}{p}"))).collect()
}

/// The inline paths `crate::x::y` and `super::x` in stripped code: where and which.
fn inline_paths(code: &str) -> Vec<(usize, &str)> {
    let b = code.as_bytes();
    let mut found = Vec::new();
    for keyword in ["crate", "super"] {
        for (at, _) in code.match_indices(keyword) {
            if at > 0 && (is_ident(b[at - 1]) || b[at - 1] == b':') {
                continue;
            }
            let mut end = at + keyword.len();
            while code[end..].starts_with("::") && b.get(end + 2).is_some_and(|c| is_ident(*c)) {
                end += 2;
                end += code[end..].bytes().take_while(|c| is_ident(*c)).count();
            }
            if end > at + keyword.len() {
                found.push((at, &code[at..end]));
            }
        }
    }
    found
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// Each workspace member: its directory below the root ("crates/core"), its package
/// name and its Cargo.toml.
fn workspace_members() -> Vec<(String, String, String)> {
    let root = workspace_root();
    let manifest = read(&root.join("Cargo.toml"));
    let members = manifest
        .split("members = [")
        .nth(1)
        .and_then(|m| m.split(']').next());
    let members = members.expect("the workspace Cargo.toml has a members list");
    let mut out = Vec::new();
    for member in members
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
    {
        let package = read(&root.join(member).join("Cargo.toml"));
        let name = package.lines().find_map(|l| l.strip_prefix("name = "));
        let name = name.unwrap_or_else(|| panic!("{member}/Cargo.toml has no package name"));
        out.push((
            member.to_string(),
            name.trim_matches('"').to_string(),
            package,
        ));
    }
    out
}

/// Each workspace member with a `src/`: its package name, and every `.rs` file below
/// `src/` keyed by its path there ("model/live.rs").
fn workspace_crates() -> Vec<(String, BTreeMap<String, String>)> {
    let root = workspace_root();
    let mut crates = Vec::new();
    for (member, name, _) in workspace_members() {
        let src = root.join(member).join("src");
        if !src.is_dir() {
            continue;
        }
        let mut files = BTreeMap::new();
        let mut dirs = vec![src.clone()];
        while let Some(dir) = dirs.pop() {
            let entries = std::fs::read_dir(&dir);
            for entry in entries.unwrap_or_else(|e| panic!("listing {}: {e}", dir.display())) {
                let path = entry
                    .unwrap_or_else(|e| panic!("in {}: {e}", dir.display()))
                    .path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let rel = path.strip_prefix(&src).expect("a file below src/");
                    files.insert(rel.to_string_lossy().replace('\\', "/"), read(&path));
                }
            }
        }
        crates.push((name, files));
    }
    crates
}

#[test]
fn every_crate_has_explicit_imports_and_no_module_circles() {
    let crates = workspace_crates();
    assert!(
        crates.len() >= 10,
        "only {} crates with a src/ found",
        crates.len()
    );
    let mut findings = Vec::new();
    for (krate, files) in &crates {
        assert!(!files.is_empty(), "{krate}: no .rs files below src/");
        findings.extend(check_crate(krate, files));
    }
    let problems = judge(&findings, KNOWN_CYCLES);
    assert!(
        problems.is_empty(),
        "module structure (issue 27):\n\n{}",
        problems.join("\n\n")
    );
}

/// The packages a manifest depends on, in any dependency table (normal, dev, build,
/// target-specific; `[dependencies.x]` tables too), by package name (`package = "..."`
/// when renamed).
fn dependencies(manifest: &str) -> BTreeSet<String> {
    dependencies_in(manifest, |_| true)
}

/// The packages a manifest depends on outside its dev-dependency tables: what its
/// shipped code (or build script) links.
fn shipped_dependencies(manifest: &str) -> BTreeSet<String> {
    dependencies_in(manifest, |header| !header.contains("dev-dependencies"))
}

/// The packages of the dependency tables whose header `keep` accepts.
fn dependencies_in(manifest: &str, keep: impl Fn(&str) -> bool) -> BTreeSet<String> {
    let mut deps = BTreeSet::new();
    // In a dependency table: `Some(None)`; in a `[dependencies.x]` table: `Some(Some(x))`.
    let mut table: Option<Option<String>> = None;
    for line in manifest.lines().map(str::trim) {
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let header = header.trim();
            table = if !keep(header) {
                None
            } else if header.ends_with("dependencies") {
                Some(None)
            } else {
                header
                    .rsplit_once("dependencies.")
                    .filter(|(before, _)| before.is_empty() || before.ends_with(['-', '.']))
                    .map(|(_, name)| Some(name.trim_matches('"').to_string()))
            };
            if let Some(Some(name)) = &table {
                deps.insert(name.clone());
            }
            continue;
        }
        let Some(current) = &table else { continue };
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let renamed = value
            .split("package")
            .nth(1)
            .and_then(|v| v.trim_start().strip_prefix('='))
            .and_then(|v| v.split('"').nth(1));
        match current {
            Some(name) if key.trim() == "package" => {
                deps.remove(name);
                deps.insert(value.trim().trim_matches('"').to_string());
            }
            Some(_) => {}
            None => {
                let key = key.trim();
                let name = key.split('.').next().unwrap_or(key).trim_matches('"');
                let is_key = !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
                if is_key {
                    deps.insert(renamed.unwrap_or(name).to_string());
                }
            }
        }
    }
    deps
}

/// Rules 1 and 4 are clippy's now: the workspace turns the lints on, clippy.toml sets
/// the length limit, and every member takes the workspace's lints.
#[test]
fn every_crate_takes_the_workspace_lints() {
    let root = workspace_root();
    let manifest = read(&root.join("Cargo.toml"));
    for lint in ["wildcard_imports = \"warn\"", "too_many_lines = \"warn\""] {
        assert!(
            manifest.contains(lint),
            "Cargo.toml [workspace.lints.clippy] lacks {lint}"
        );
    }
    assert!(
        read(&root.join("clippy.toml")).contains("too-many-lines-threshold = 120"),
        "clippy.toml lacks too-many-lines-threshold = 120"
    );
    let mut missing = Vec::new();
    for (member, name, text) in workspace_members() {
        if !text.contains("[lints]\nworkspace = true") {
            missing.push(format!("{member}/Cargo.toml ({name})"));
        }
    }
    assert!(
        missing.is_empty(),
        "add `[lints]\\nworkspace = true` to: {}",
        missing.join(", ")
    );
}

/// Rule 3 on `manifests` (package name, Cargo.toml): what breaks it.
fn check_test_support(manifests: &[(String, String)]) -> Vec<String> {
    let workspace: BTreeSet<&str> = manifests.iter().map(|(n, _)| n.as_str()).collect();
    let mut problems = Vec::new();
    for (krate, text) in manifests {
        let deps = dependencies(text);
        let shipped = shipped_dependencies(text);
        if shipped.contains("gpushare-testkit-engine") && krate != "gpushare-tests" {
            problems.push(format!(
                "{krate} depends on gpushare-testkit-engine outside [dev-dependencies]: \
                 the engine-level test support is a dev-dependency only"
            ));
        }
        if deps.contains("gpushare-tests") {
            problems.push(format!(
                "{krate} depends on gpushare-tests, the end-to-end tests: use gpushare-testkit \
                 (or gpushare-testkit-engine for what needs the engine or the crates above)"
            ));
        }
        if krate == "gpushare-testkit" {
            for dep in deps
                .iter()
                .filter(|d| workspace.contains(d.as_str()) && *d != "gpushare-core")
            {
                problems.push(format!(
                    "gpushare-testkit depends on {dep}: it may depend on no workspace crate \
                     but gpushare-core (move what needs {dep} to gpushare-testkit-engine)"
                ));
            }
        }
    }
    problems
}

#[test]
fn test_support_sits_below_the_crates_it_serves() {
    let manifests: Vec<(String, String)> = workspace_members()
        .into_iter()
        .map(|(_, name, text)| (name, text))
        .collect();
    for needed in [
        "gpushare-tests",
        "gpushare-testkit",
        "gpushare-testkit-engine",
        "gpushare-core",
    ] {
        assert!(
            manifests.iter().any(|(n, _)| n == needed),
            "{needed} is not a workspace member"
        );
    }
    let problems = check_test_support(&manifests);
    assert!(
        problems.is_empty(),
        "test support (issue 27, item 5):\n\n{}",
        problems.join("\n\n")
    );
}

#[test]
fn test_support_rule_reads_every_kind_of_dependency() {
    let manifest = |name: &str, body: &str| (name.to_string(), body.to_string());
    let manifests = [
        manifest("gpushare-core", "[package]\nname = \"gpushare-core\"\n"),
        manifest("gpushare-engine", "[dependencies]\ngpushare-core.workspace = true\n"),
        // Fine: the end-to-end tests may depend on the engine-level test support.
        manifest(
            "gpushare-tests",
            "[dependencies]\ngpushare-engine.workspace = true\ngpushare-testkit-engine.workspace = true\n",
        ),
        // Fine: a dev-dependency on the testkit, and a features array over two lines.
        manifest(
            "fine",
            "[dependencies]\nserde = { version = \"1\", features = [\n  \"derive\",\n] }\n\
             [dev-dependencies]\ngpushare-testkit.workspace = true\n\
             gpushare-testkit-engine = { workspace = true, features = [\"ec2\"] }\n",
        ),
        manifest(
            "shipped",
            "[dependencies]\ngpushare-testkit-engine.workspace = true\n",
        ),
        manifest(
            "target",
            "[dev-dependencies]\nfoo = \"1\"\n[target.'cfg(unix)'.dependencies.gpushare-testkit-engine]\n\
             path = \"../testkit-engine\"\n",
        ),
        manifest(
            "dev",
            "[dev-dependencies]\n# gpushare-tests = { path = \"../../tests\" }\n\
             gpushare-tests = { path = \"../../tests\" }\n",
        ),
        manifest(
            "renamed",
            "[target.'cfg(unix)'.dev-dependencies]\nsupport = { package = \"gpushare-tests\", path = \"x\" }\n",
        ),
        manifest(
            "table",
            "[build-dependencies.gpushare-tests]\npath = \"../../tests\"\n",
        ),
        manifest(
            "gpushare-testkit",
            "[package]\nname = \"gpushare-testkit\"\n[dependencies]\n\
             gpushare-core.workspace = true\nserde_json.workspace = true\n\
             [dev-dependencies]\ngpushare-engine = { path = \"../engine\" }\n",
        ),
    ];
    let problems = check_test_support(&manifests);
    let firsts: Vec<&str> = problems
        .iter()
        .map(|p| p.split(':').next().unwrap_or(p))
        .collect();
    assert_eq!(
        firsts,
        [
            "shipped depends on gpushare-testkit-engine outside [dev-dependencies]",
            "target depends on gpushare-testkit-engine outside [dev-dependencies]",
            "dev depends on gpushare-tests, the end-to-end tests",
            "renamed depends on gpushare-tests, the end-to-end tests",
            "table depends on gpushare-tests, the end-to-end tests",
            "gpushare-testkit depends on gpushare-engine",
        ],
        "{problems:#?}"
    );
    // A comment naming the crate, or a key merely containing "package", is no dependency.
    assert_eq!(
        dependencies("[dependencies]\n# gpushare-tests\nfoo = { version = \"1\" }\n[features]\npackage = []\n"),
        BTreeSet::from(["foo".to_string()])
    );
}

/// The checker on a small crate written as "--- path" lines, each followed by the file.
fn demo(crate_text: &str) -> Vec<Finding> {
    let mut files = BTreeMap::new();
    for file in crate_text.split("--- ").skip(1) {
        let (path, text) = file.split_once('\n').expect("a path line, then the file");
        files.insert(path.trim().to_string(), text.to_string());
    }
    check_crate("demo", &files)
}

fn texts(findings: &[Finding]) -> Vec<String> {
    findings.iter().map(|f| f.to_string()).collect()
}

#[test]
fn finds_a_two_module_circle_through_use_lines() {
    let found = texts(&demo(
        "--- lib.rs\nmod a;\nmod b;\n\
         --- a.rs\nuse crate::b::B;\npub struct A;\n\
         --- b.rs\npub struct B;\nuse crate::{\n    a::{A, self as x},\n    b,\n};\n",
    ));
    let file_level = "demo: import circle between File modules {a, b}:\n  \
                      a -> b  (a.rs:1: use crate::b::B;)\n  \
                      b -> a  (b.rs:2: use crate::{a::{A,self as x},b,};)";
    assert_eq!(found, [file_level, &file_level.replace("File", "TopLevel")]);
}

#[test]
fn finds_a_three_module_circle_through_inline_paths() {
    let found = demo(
        "--- lib.rs\nmod a;\nmod b;\nmod c;\n\
         --- a.rs\npub fn f() -> u8 {\n    crate::b::g()\n}\n\
         --- b.rs\npub fn g() -> u8 { super::c::d::h() }\n\
         --- c/mod.rs\nmod d;\n\
         --- c/d.rs\npub fn h() -> u8 { crate::a::f() }\n",
    );
    let found = texts(&found);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].starts_with("demo: import circle between File modules {a, b, c::d}:"));
    assert!(
        found[0].contains("\n  a -> b  (a.rs:2: crate::b::g)\n"),
        "{}",
        found[0]
    );
    assert!(found[1].starts_with("demo: import circle between TopLevel modules {a, b, c}:"));
}

#[test]
fn finds_glob_reexports_and_allowed_unused_imports_outside_test_code() {
    // A plain glob import is clippy's (wildcard_imports); only re-exports are found here.
    let found = texts(&demo(
        "--- lib.rs\nmod a;\npub use a::*;\n\
         --- a.rs\n#[cfg(test)]\nmod tests {\n    use super::*;\n    pub use super::*;\n}\n\
         use std::{fmt, collections::*};\n#[allow(dead_code, unused_imports)]\nuse std::io;\n\
         pub(crate) use std::{io::*, fmt::Write};\n",
    ));
    let places: Vec<&str> = found.iter().filter_map(|f| f.lines().next()).collect();
    assert_eq!(
        places,
        [
            "demo: a.rs:9: use std::{io::*,fmt::Write};",
            "demo: a.rs:7: #[allow(dead_code, unused_imports)]",
            "demo: lib.rs:2: use a::*;",
        ]
    );
}

#[test]
fn test_code_and_parents_with_children_are_not_flagged() {
    let found = demo(
        "--- lib.rs\nmod a;\nmod b;\nmod plan;\npub use plan::Plan;\n#[cfg(test)]\nmod tests;\n\
         --- tests.rs\nuse crate::*;\nuse crate::a::A;\n\
         --- a.rs\npub struct A;\n#[cfg(test)]\n#[allow(unused_imports)]\npub(crate) mod tests {\n    \
         use super::*;\n    use crate::b::B;\n    fn f() { let _ = (\"}\", '}'); }\n}\n\
         #[cfg(test)]\nmod more;\n\
         --- a/more.rs\nuse crate::b::*;\n\
         --- b/mod.rs\n#[cfg(test)]\nmod tests;\nuse crate::a::A;\npub struct B;\n\
         --- b/tests.rs\nuse super::*;\nuse crate::a::A;\n\
         --- plan.rs\nmod reasons;\npub use reasons::Reason;\npub struct Plan;\n\
         --- plan/reasons.rs\nuse super::Plan;\nuse crate::plan;\npub struct Reason;\n",
    );
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn paths_in_comments_and_literals_are_not_flagged() {
    let found = demo(
        r###"--- lib.rs
mod a;
mod b;
--- a.rs
use crate::b::B;
--- b.rs
// use crate::a::A;
/// See crate::a::A, and never `use super::*;`.
/* crate::a /* nested */ crate::a */
pub struct B<'a>(&'a str);
const S: &str = "crate::a::A \" use crate::a::*;";
const R: &str = r#"crate::a::A " use super::*;"#;
const C: [char; 2] = ['"', '\''];
fn f<'a>(s: &'a str) -> &'a str { s } // crate::a
"###,
    );
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn known_cycles_must_match_exactly() {
    let two = demo(
        "--- lib.rs\nmod a;\nmod b;\n--- a.rs\nuse crate::b::B;\n--- b.rs\nuse crate::a::A;\n",
    );
    let known = |level: Level, modules: &'static [&'static str]| KnownCycle {
        krate: "demo",
        level,
        modules,
        why: "a test",
    };
    let exact = [
        known(Level::File, &["a", "b"]),
        known(Level::TopLevel, &["a", "b"]),
    ];
    assert_eq!(judge(&two, &exact), Vec::<String>::new());

    // The circle gone: the entry is stale.
    let none = demo("--- lib.rs\nmod a;\nmod b;\n--- a.rs\nuse crate::b::B;\n--- b.rs\n");
    let problems = judge(&none, &[known(Level::TopLevel, &["a", "b"])]);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(problems[0].contains("update KNOWN_CYCLES"), "{problems:#?}");

    // The circle changed: both circles found are reported, and the entry is stale.
    let problems = judge(&two, &[known(Level::File, &["a", "b", "c"])]);
    assert_eq!(problems.len(), 3, "{problems:#?}");
}

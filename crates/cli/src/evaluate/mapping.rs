//! Which workload a process belongs to: by a mapping file of `PATTERN = WORKLOAD`
//! lines (first match wins), else by its process name.
//!
//! A pattern is a glob (`*` any characters, `?` one) matched against the process name
//! as nvidia-smi prints it and against its last path component; `MACHINE:GLOB` matches
//! on that machine only. `#` starts a comment; either side may be quoted.

use super::samples::Loc;
use super::EvalError;
use std::path::Path;

#[derive(Debug, Clone, PartialEq)]
struct Rule {
    machine: Option<String>,
    glob: String,
    workload: String,
}

/// The mapping file's rules, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Mapping {
    rules: Vec<Rule>,
}

impl Mapping {
    pub fn read(path: &Path) -> Result<Mapping, EvalError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| EvalError::Read {
            file: file.clone(),
            source,
        })?;
        Mapping::parse(&file, &text)
    }

    pub fn parse(file: &str, text: &str) -> Result<Mapping, EvalError> {
        let mut rules = vec![];
        for (i, line) in text.lines().enumerate() {
            let l = line.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let bad = |message: String| EvalError::Parse {
                at: Loc {
                    file: file.to_string(),
                    line: i + 1,
                },
                message,
            };
            let Some((pattern, workload)) = l.rsplit_once('=') else {
                return Err(bad(format!("expected PATTERN = WORKLOAD, found {l:?}")));
            };
            let (pattern, workload) = (unquote(pattern), unquote(workload));
            if pattern.is_empty() {
                return Err(bad("an empty pattern".to_string()));
            }
            if !valid_name(&workload) {
                return Err(bad(format!("workload {workload:?} is not a gpushare name (a letter or digit, then letters, digits, `_`, `-`; at most 63)")));
            }
            let (machine, glob) = match pattern.split_once(':') {
                Some((m, g)) if !m.contains(['*', '?', '/']) => {
                    (Some(m.to_string()), g.to_string())
                }
                _ => (None, pattern),
            };
            rules.push(Rule {
                machine,
                glob,
                workload,
            });
        }
        Ok(Mapping { rules })
    }

    /// The workload of process `name` on `machine`.
    pub fn workload(&self, machine: &str, name: &str) -> String {
        let base = basename(name);
        self.rules
            .iter()
            .find(|r| {
                r.machine.as_deref().is_none_or(|m| m == machine)
                    && (glob_match(&r.glob, name) || glob_match(&r.glob, base))
            })
            .map_or_else(|| name_of(base), |r| r.workload.clone())
    }
}

fn unquote(s: &str) -> String {
    let t = s.trim();
    t.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(t)
        .to_string()
}

fn basename(name: &str) -> &str {
    name.rsplit(['/', '\\']).next().unwrap_or(name)
}

/// A gpushare resource name.
pub fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    s.len() <= 63
        && matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A process name made a gpushare name: `python3.11` -> `python3-11`.
fn name_of(base: &str) -> String {
    let s: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let s = s.trim_start_matches(['-', '_']);
    let s: String = s.chars().take(63).collect();
    if s.is_empty() {
        "process".to_string()
    } else {
        s
    }
}

/// `*` any run of characters, `?` one character, everything else itself.
fn glob_match(glob: &str, s: &str) -> bool {
    let g: Vec<char> = glob.chars().collect();
    let t: Vec<char> = s.chars().collect();
    let (mut gi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if gi < g.len() && (g[gi] == '?' || g[gi] == t[ti]) {
            gi += 1;
            ti += 1;
        } else if gi < g.len() && g[gi] == '*' {
            star = Some((gi, ti));
            gi += 1;
        } else if let Some((sg, st)) = star {
            gi = sg + 1;
            ti = st + 1;
            star = Some((sg, st + 1));
        } else {
            return false;
        }
    }
    g[gi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::{glob_match, name_of, Mapping};

    #[test]
    fn globs() {
        assert!(glob_match("*", ""));
        assert!(glob_match("python*", "python3.11"));
        assert!(glob_match("*embed*", "/opt/tei/text-embeddings-router"));
        assert!(glob_match("t?i", "tei"));
        assert!(!glob_match("python", "python3"));
        assert!(!glob_match("*router", "router-x"));
    }

    #[test]
    fn first_matching_rule_wins_and_machines_qualify() {
        let m = Mapping::parse(
            "map.txt",
            "# comment\n\"gpu-b:python3\" = reranker\npython* = \"embedder\"\n",
        )
        .expect("parses");
        assert_eq!(m.workload("gpu-a", "/usr/bin/python3"), "embedder");
        assert_eq!(m.workload("gpu-b", "/usr/bin/python3"), "reranker");
        assert_eq!(m.workload("gpu-b", "tritonserver"), "tritonserver");
    }

    #[test]
    fn bad_lines_are_located() {
        let e = Mapping::parse("map.txt", "a = b\nno equals sign\n").expect_err("refused");
        assert!(e.to_string().starts_with("map.txt:2: "), "{e}");
        let e = Mapping::parse("map.txt", "a = bad name!\n").expect_err("refused");
        assert!(e.to_string().starts_with("map.txt:1: "), "{e}");
    }

    #[test]
    fn default_names_are_gpushare_names() {
        assert_eq!(name_of("python3.11"), "python3-11");
        assert_eq!(name_of(".hidden"), "hidden");
        assert_eq!(name_of("..."), "process");
    }
}

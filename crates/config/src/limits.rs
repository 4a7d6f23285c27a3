//! Bounds on what one configuration may ask of the loader, so that hostile or
//! broken input ends with a located error instead of a crash, a stack overflow
//! or an exhausted machine.
//!
//! - [`prescan`] runs before the HCL parser (whose recursion is unbounded): it
//!   refuses nesting deeper than [`MAX_NESTING`] levels or longer operator chains
//!   than [`MAX_OPERATORS`], and invalid escapes in quoted strings, and says where.
//! - Evaluation (`load::eval`) keeps every value within [`MAX_STRING_BYTES`],
//!   [`MAX_ELEMENTS`], [`MAX_VALUE_BYTES`] and [`MAX_VALUE_DEPTH`], and one load
//!   within [`MAX_EVAL_WORK`] steps.
//!
//! The limits are far above what a real configuration needs (its blocks nest
//! four deep, its values are names and small lists) and low enough that the
//! parser fits in a 2 MiB thread stack (a debug build uses up to 25 KiB of stack
//! per level of `"${`) and one load in well under a second and a few hundred MiB.

/// Levels of `(`, `[`, `{` (blocks and objects) and `${` / `%{` (template
/// interpolations and directives) open at once.
pub const MAX_NESTING: usize = 32;
/// Operators (`+ - * / % ! ? == != < <= > >= && ||`) pending in the expressions
/// open at once: the parser nests one level per operator.
pub const MAX_OPERATORS: usize = 64;
/// Depth of evaluation (a backstop: the prescan bounds expression depth already).
pub const MAX_EVAL_DEPTH: usize = MAX_NESTING + MAX_OPERATORS + 32;
/// Bytes of one evaluated string.
pub const MAX_STRING_BYTES: usize = 1 << 20;
/// Elements of one evaluated value: list items, map entries and scalars,
/// counted at every level of nesting.
pub const MAX_ELEMENTS: usize = 100_000;
/// Bytes of all strings and keys of one evaluated value.
pub const MAX_VALUE_BYTES: usize = 16 << 20;
/// Levels of lists and maps nested in one evaluated value.
pub const MAX_VALUE_DEPTH: usize = 32;
/// Evaluation steps in one load: one per expression evaluated, one per element
/// copied or built, one per 64 bytes of string copied or built.
pub const MAX_EVAL_WORK: u64 = 20_000_000;

/// Why [`prescan`] refused a text, at a byte offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub offset: usize,
    pub summary: String,
    pub detail: String,
    pub hint: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Frame {
    /// `(`, `[` or `{` in code, or `${` / `%{` in a template (closed by `}`).
    Open { newline_ends_expr: bool },
    /// A quoted string.
    Quoted,
    /// A heredoc (its end marker is the last of `markers`).
    Heredoc,
}

/// At `i` in a template: `Some(true)` where `${` or `%{` opens an interpolation
/// or directive, `Some(false)` where `$${` or `%%{` escapes one (3 bytes).
fn template_marker(b: &[u8], i: usize) -> Option<bool> {
    let c = *b.get(i)?;
    if c != b'$' && c != b'%' {
        return None;
    }
    match (b.get(i + 1), b.get(i + 2)) {
        (Some(&b'{'), _) => Some(true),
        (Some(&d), Some(&b'{')) if d == c => Some(false),
        _ => None,
    }
}

/// Checks `text` before it is parsed: nesting, operator chains and string escapes.
/// Lenient with anything else (unbalanced brackets, unterminated strings): the
/// parser reports those with its own messages.
pub fn prescan(text: &str) -> Result<(), Refusal> {
    let b = text.as_bytes();
    let mut stack: Vec<Frame> = vec![];
    // Operators counted in each open code frame (index 0: the top level).
    let mut ops: Vec<usize> = vec![0];
    let mut ops_total = 0usize;
    let mut depth = 0usize;
    let mut markers: Vec<(String, bool)> = vec![];
    let mut i = 0;
    let deep = |offset: usize| Refusal {
        offset,
        summary: "nesting too deep".into(),
        detail: format!(
            "more than {MAX_NESTING} levels of brackets, braces, parentheses \
             or template interpolations are open here"
        ),
        hint: "flatten the expression or the blocks; use locals for intermediate values".into(),
    };
    while i < b.len() {
        let c = b[i];
        match stack.last().copied() {
            Some(frame @ (Frame::Quoted | Frame::Heredoc)) => {
                if frame == Frame::Quoted {
                    match c {
                        b'\\' => {
                            let n = b.get(i + 1).copied();
                            let hex = match n {
                                Some(b'n' | b'r' | b't' | b'\\' | b'"' | b'/' | b'b' | b'f') => 0,
                                Some(b'u') => 4,
                                Some(b'U') => 8,
                                _ => {
                                    let shown: String = text
                                        .get(i..)
                                        .and_then(|s| s.chars().take(2).map(Some).collect())
                                        .unwrap_or_else(|| "\\".into());
                                    return Err(Refusal {
                                    offset: i,
                                    summary: format!("invalid escape sequence `{shown}` in a string"),
                                    detail: "a string may use the escapes \\n \\r \\t \\\" \\\\ \\/ \\b \\f \\uNNNN and \\UNNNNNNNN".into(),
                                    hint: "write a backslash as \\\\".into(),
                                });
                                }
                            };
                            let digits = b.get(i + 2..i + 2 + hex);
                            if hex > 0
                                && !digits.is_some_and(|d| d.iter().all(u8::is_ascii_hexdigit))
                            {
                                return Err(Refusal {
                                    offset: i,
                                    summary: "invalid unicode escape in a string".into(),
                                    detail: format!(
                                        "\\{} takes exactly {hex} hexadecimal digits",
                                        n.map_or('u', char::from)
                                    ),
                                    hint: "write e.g. \\u00e9, or a backslash as \\\\".into(),
                                });
                            }
                            i += 2 + hex;
                            continue;
                        }
                        b'"' | b'\n' => {
                            stack.pop();
                        }
                        _ => {}
                    }
                } else {
                    let at_line_start = i == 0 || b[i - 1] == b'\n';
                    if at_line_start {
                        let end = text[i..].find('\n').map_or(b.len(), |n| i + n);
                        let line = &text[i..end];
                        if let Some((m, indented)) = markers.last() {
                            let l = if *indented {
                                line.trim()
                            } else {
                                line.trim_end()
                            };
                            if l == m {
                                stack.pop();
                                markers.pop();
                                i = end;
                                continue;
                            }
                        }
                    }
                }
                if let Some(opens) = template_marker(b, i) {
                    if opens {
                        depth += 1;
                        if depth > MAX_NESTING {
                            return Err(deep(i));
                        }
                        stack.push(Frame::Open {
                            newline_ends_expr: false,
                        });
                        ops.push(0);
                    }
                    i += if opens { 2 } else { 3 };
                    continue;
                }
                i += 1;
            }
            top => {
                let newline_ends_expr = match top {
                    Some(Frame::Open { newline_ends_expr }) => newline_ends_expr,
                    _ => true,
                };
                match c {
                    b'"' => stack.push(Frame::Quoted),
                    b'#' => {
                        while i < b.len() && b[i] != b'\n' {
                            i += 1;
                        }
                        continue;
                    }
                    b'/' if b.get(i + 1) == Some(&b'/') => {
                        while i < b.len() && b[i] != b'\n' {
                            i += 1;
                        }
                        continue;
                    }
                    b'/' if b.get(i + 1) == Some(&b'*') => {
                        i += 2;
                        while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                            i += 1;
                        }
                        i += 2;
                        continue;
                    }
                    b'<' if b.get(i + 1) == Some(&b'<') => {
                        // A heredoc: `<<EOF` or `<<-EOF`, then the template from the next line.
                        let mut j = i + 2;
                        let indented = b.get(j) == Some(&b'-');
                        if indented {
                            j += 1;
                        }
                        let start = j;
                        while j < b.len()
                            && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] == b'-')
                        {
                            j += 1;
                        }
                        if j > start && b.get(j) == Some(&b'\n') {
                            markers.push((text[start..j].to_string(), indented));
                            stack.push(Frame::Heredoc);
                            i = j + 1;
                            continue;
                        }
                        i += 2;
                        continue;
                    }
                    b'(' | b'[' | b'{' => {
                        depth += 1;
                        if depth > MAX_NESTING {
                            return Err(deep(i));
                        }
                        stack.push(Frame::Open {
                            newline_ends_expr: c == b'{',
                        });
                        ops.push(0);
                    }
                    b')' | b']' | b'}' => {
                        if let Some(Frame::Open { .. }) = top {
                            stack.pop();
                            depth -= 1;
                            ops_total -= ops.pop().unwrap_or(0);
                        }
                    }
                    b',' => {
                        if let Some(n) = ops.last_mut() {
                            ops_total -= *n;
                            *n = 0;
                        }
                    }
                    b'\n' if newline_ends_expr => {
                        if let Some(n) = ops.last_mut() {
                            ops_total -= *n;
                            *n = 0;
                        }
                    }
                    b'+' | b'-' | b'*' | b'/' | b'%' | b'!' | b'?' | b'<' | b'>' | b'&' | b'|'
                    | b'=' => {
                        // `==`, `&&`, `||` and `<=`-like pairs count once; a lone `=` is assignment.
                        let pair = matches!(
                            (c, b.get(i + 1)),
                            (b'=', Some(b'=')) | (b'&', Some(b'&')) | (b'|', Some(b'|'))
                        ) || (matches!(c, b'<' | b'>' | b'!')
                            && b.get(i + 1) == Some(&b'='));
                        if c != b'=' || pair {
                            ops_total += 1;
                            if let Some(n) = ops.last_mut() {
                                *n += 1;
                            }
                            if ops_total > MAX_OPERATORS {
                                return Err(Refusal {
                                    offset: i,
                                    summary: "expression too long".into(),
                                    detail: format!("more than {MAX_OPERATORS} operators are pending in the expressions open here"),
                                    hint: "split the expression into locals".into(),
                                });
                            }
                        }
                        if pair {
                            i += 1;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prescan_accepts_ordinary_hcl() {
        let t = "a {\n  b = [1, 2, (3 + 4) * 5]\n  c = \"x ${upper(\"y\")} \\n \\u00e9\"\n  d = <<-EOF\n    ${1 + 2} \\q [[[\n    EOF\n  e = { k = \"{[(\" } # ((((\n}\n/* [[[[ */\n";
        assert_eq!(prescan(t), Ok(()));
    }

    #[test]
    fn prescan_finds_the_first_over_deep_opener() {
        let t = format!("a = {}{}\n", "[".repeat(40), "]".repeat(40));
        let r = prescan(&t).expect_err("too deep");
        assert_eq!(r.offset, 4 + MAX_NESTING);
        let t = format!("a = {}1{}\n", "\"${".repeat(40), "}\"".repeat(40));
        assert!(prescan(&t).is_err());
        let t = format!("a = 1{}\n", " + 1".repeat(100));
        assert_eq!(
            prescan(&t).map_err(|r| r.summary),
            Err("expression too long".into())
        );
        // Operators of separate attributes do not add up.
        let t = " a = 1 + 1\n".repeat(100);
        assert_eq!(prescan(&t), Ok(()));
    }

    #[test]
    fn prescan_refuses_invalid_escapes() {
        let r = prescan("a = \"re\\qr\"\n").expect_err("bad escape");
        assert_eq!(r.offset, 7);
        assert!(r.summary.contains("`\\q`"), "{}", r.summary);
        assert!(prescan("a = \"\\u00zz\"\n").is_err());
    }
}

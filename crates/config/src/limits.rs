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
    let mut s = Scan {
        text,
        b: text.as_bytes(),
        i: 0,
        stack: vec![],
        ops: vec![0],
        ops_total: 0,
        depth: 0,
        markers: vec![],
    };
    while s.i < s.b.len() {
        match s.stack.last().copied() {
            Some(frame @ (Frame::Quoted | Frame::Heredoc)) => s.in_template(frame)?,
            top => s.in_code(top)?,
        }
    }
    Ok(())
}

/// Where [`prescan`] stands: at byte `i`, inside the frames of `stack`.
struct Scan<'t> {
    text: &'t str,
    b: &'t [u8],
    i: usize,
    stack: Vec<Frame>,
    /// Operators counted in each open code frame (index 0: the top level).
    ops: Vec<usize>,
    ops_total: usize,
    /// Frames of `Frame::Open` on the stack.
    depth: usize,
    /// The end markers of the heredocs open, each with whether it may be indented (`<<-`).
    markers: Vec<(String, bool)>,
}

impl Scan<'_> {
    /// One step in a quoted string or a heredoc: an escape, the string's or
    /// heredoc's end, a template interpolation or directive opening, or a byte.
    fn in_template(&mut self, frame: Frame) -> Result<(), Refusal> {
        if frame == Frame::Quoted {
            match self.b[self.i] {
                b'\\' => return self.escape(),
                b'"' | b'\n' => {
                    self.stack.pop();
                }
                _ => {}
            }
        } else if self.heredoc_ends() {
            return Ok(());
        }
        if let Some(opens) = template_marker(self.b, self.i) {
            if opens {
                self.open(false)?;
            }
            self.i += if opens { 2 } else { 3 };
            return Ok(());
        }
        self.i += 1;
        Ok(())
    }

    /// An escape sequence at `i` in a quoted string: stepped over, or refused.
    fn escape(&mut self) -> Result<(), Refusal> {
        let (b, i) = (self.b, self.i);
        let n = b.get(i + 1).copied();
        let hex = match n {
            Some(b'n' | b'r' | b't' | b'\\' | b'"' | b'/' | b'b' | b'f') => 0,
            Some(b'u') => 4,
            Some(b'U') => 8,
            _ => {
                let shown: String = self
                    .text
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
        if hex > 0 && !digits.is_some_and(|d| d.iter().all(u8::is_ascii_hexdigit)) {
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
        self.i += 2 + hex;
        Ok(())
    }

    /// At the start of a line in a heredoc that is its end marker: closes the
    /// heredoc, steps to the line's end and says `true`.
    fn heredoc_ends(&mut self) -> bool {
        let (b, i, text) = (self.b, self.i, self.text);
        let at_line_start = i == 0 || b[i - 1] == b'\n';
        if !at_line_start {
            return false;
        }
        let end = text[i..].find('\n').map_or(b.len(), |n| i + n);
        let line = &text[i..end];
        let Some((m, indented)) = self.markers.last() else {
            return false;
        };
        let l = if *indented {
            line.trim()
        } else {
            line.trim_end()
        };
        if l != m {
            return false;
        }
        self.stack.pop();
        self.markers.pop();
        self.i = end;
        true
    }

    /// Opens a `Frame::Open` at `i`, refused beyond [`MAX_NESTING`].
    fn open(&mut self, newline_ends_expr: bool) -> Result<(), Refusal> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(Refusal {
                offset: self.i,
                summary: "nesting too deep".into(),
                detail: format!(
                    "more than {MAX_NESTING} levels of brackets, braces, parentheses \
                     or template interpolations are open here"
                ),
                hint: "flatten the expression or the blocks; use locals for intermediate values"
                    .into(),
            });
        }
        self.stack.push(Frame::Open { newline_ends_expr });
        self.ops.push(0);
        Ok(())
    }

    /// One step in code (`top`: the innermost frame, a `Frame::Open` or none):
    /// strings, comments and heredocs opening, brackets, expression ends and
    /// operators.
    fn in_code(&mut self, top: Option<Frame>) -> Result<(), Refusal> {
        let (b, i) = (self.b, self.i);
        let c = b[i];
        let newline_ends_expr = match top {
            Some(Frame::Open { newline_ends_expr }) => newline_ends_expr,
            _ => true,
        };
        match c {
            b'"' => self.stack.push(Frame::Quoted),
            b'#' => {
                self.skip_line();
                return Ok(());
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                self.skip_line();
                return Ok(());
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut i = i + 2;
                while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                self.i = i + 2;
                return Ok(());
            }
            b'<' if b.get(i + 1) == Some(&b'<') => {
                self.heredoc_start();
                return Ok(());
            }
            b'(' | b'[' | b'{' => self.open(c == b'{')?,
            b')' | b']' | b'}' => {
                if let Some(Frame::Open { .. }) = top {
                    self.stack.pop();
                    self.depth -= 1;
                    self.ops_total -= self.ops.pop().unwrap_or(0);
                }
            }
            b',' => self.end_expr(),
            b'\n' if newline_ends_expr => self.end_expr(),
            b'+' | b'-' | b'*' | b'/' | b'%' | b'!' | b'?' | b'<' | b'>' | b'&' | b'|' | b'=' => {
                self.operator(c)?
            }
            _ => {}
        }
        self.i += 1;
        Ok(())
    }

    /// Steps to the end of the line (a comment).
    fn skip_line(&mut self) {
        while self.i < self.b.len() && self.b[self.i] != b'\n' {
            self.i += 1;
        }
    }

    /// `<<` at `i`: a heredoc (`<<EOF` or `<<-EOF`, then the template from the
    /// next line) opens; anything else is stepped over.
    fn heredoc_start(&mut self) {
        let b = self.b;
        let mut j = self.i + 2;
        let indented = b.get(j) == Some(&b'-');
        if indented {
            j += 1;
        }
        let start = j;
        while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] == b'-') {
            j += 1;
        }
        if j > start && b.get(j) == Some(&b'\n') {
            self.markers
                .push((self.text[start..j].to_string(), indented));
            self.stack.push(Frame::Heredoc);
            self.i = j + 1;
            return;
        }
        self.i += 2;
    }

    /// A `,` or an expression-ending newline: the innermost frame's operators end.
    fn end_expr(&mut self) {
        if let Some(n) = self.ops.last_mut() {
            self.ops_total -= *n;
            *n = 0;
        }
    }

    /// An operator byte `c` at `i`: counted (refused beyond [`MAX_OPERATORS`]);
    /// a two-byte operator is stepped over to its second byte.
    fn operator(&mut self, c: u8) -> Result<(), Refusal> {
        let next = self.b.get(self.i + 1);
        // `==`, `&&`, `||` and `<=`-like pairs count once; a lone `=` is assignment.
        let pair = matches!(
            (c, next),
            (b'=', Some(b'=')) | (b'&', Some(b'&')) | (b'|', Some(b'|'))
        ) || (matches!(c, b'<' | b'>' | b'!') && next == Some(&b'='));
        if c != b'=' || pair {
            self.ops_total += 1;
            if let Some(n) = self.ops.last_mut() {
                *n += 1;
            }
            if self.ops_total > MAX_OPERATORS {
                return Err(Refusal {
                    offset: self.i,
                    summary: "expression too long".into(),
                    detail: format!(
                        "more than {MAX_OPERATORS} operators are pending in the expressions open here"
                    ),
                    hint: "split the expression into locals".into(),
                });
            }
        }
        if pair {
            self.i += 1;
        }
        Ok(())
    }
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

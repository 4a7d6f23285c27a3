//! The cloud-init user data every launched host boots with: EXCLUSIVE_PROCESS compute
//! mode, a systemd unit running the MPS control daemon in the foreground, and the
//! `gpushare agent` unit. One template (`user_data.sh.tmpl`), rendered here.
//!
//! Every value put into the script is checked against a strict character set instead
//! of being escaped for two syntaxes (bash and systemd unit files) at once, so a
//! value can never break out of its line. Credentials in URLs are refused: user data
//! is readable by anything on the host that can reach the instance metadata service.

use gpushare_core::model::CapacityProvider;
use std::collections::BTreeMap;

/// EC2's limit on user data, in bytes, before base64 encoding.
pub const USER_DATA_LIMIT: usize = 16 * 1024;

const TEMPLATE: &str = include_str!("user_data.sh.tmpl");

/// What the bootstrap script of one host is rendered from.
#[derive(Debug, Clone, Copy)]
pub struct UserDataInput<'a> {
    pub cluster: &'a str,
    /// Name of the capacity provider the host belongs to.
    pub pool_name: &'a str,
    pub pool: &'a CapacityProvider,
    /// gpushare's id of the host (the `gpushare:host-id` tag).
    pub host_id: &'a str,
    /// Where the agent reaches the store (`etcd://host:port`, ...).
    pub store_address: &'a str,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserDataError {
    #[error("{field} = {value:?} {reason}")]
    InvalidValue {
        field: String,
        value: String,
        reason: String,
    },
    #[error("user data for host {host_id} is {bytes} bytes, over EC2's limit of {limit} bytes")]
    TooLarge {
        host_id: String,
        bytes: usize,
        limit: usize,
    },
    #[error("user-data template: {message}")]
    Template { message: String },
}

/// Render the bootstrap script of one host, checked to fit EC2's 16 KB limit.
pub fn render_user_data(input: &UserDataInput<'_>) -> Result<String, UserDataError> {
    let pool = input.pool;
    let at = |attr: &str| format!("capacity_provider.{}.{attr}", input.pool_name);
    let mut vars: BTreeMap<&'static str, Value> = BTreeMap::new();

    check_name("gpushare.cluster", input.cluster)?;
    check_name("capacity_provider", input.pool_name)?;
    check_name("host id", input.host_id)?;
    check_store_address(input.store_address)?;
    vars.insert("cluster", Value::Text(input.cluster.to_string()));
    vars.insert("pool", Value::Text(input.pool_name.to_string()));
    vars.insert("host_id", Value::Text(input.host_id.to_string()));
    vars.insert("store", Value::Text(input.store_address.to_string()));

    vars.insert("mps", Value::Flag(pool.mps.enabled));
    if pool.mps.enabled {
        check_run_dir(&at("mps.pipe_directory"), &pool.mps.pipe_directory)?;
        check_run_dir(&at("mps.log_directory"), &pool.mps.log_directory)?;
    }
    vars.insert("pipe_dir", Value::Text(pool.mps.pipe_directory.clone()));
    vars.insert("log_dir", Value::Text(pool.mps.log_directory.clone()));
    match pool.mps.default_active_thread_percentage {
        Some(p) if (1..=100).contains(&p) => {
            vars.insert("thread_pct", Value::Text(p.to_string()));
        }
        Some(p) => {
            return Err(invalid(
                at("mps.default_active_thread_percentage"),
                &p.to_string(),
                "must be between 1 and 100",
            ));
        }
        None => {
            vars.insert("thread_pct", Value::Flag(false));
        }
    }

    check_path(&at("agent.path"), &pool.agent.path)?;
    vars.insert("agent_path", Value::Text(pool.agent.path.clone()));
    check_path(&at("agent.credentials_file"), &pool.agent.credentials_file)?;
    vars.insert(
        "credentials_file",
        Value::Text(pool.agent.credentials_file.clone()),
    );
    match (&pool.agent.url, &pool.agent.sha256) {
        (Some(url), Some(sha)) => {
            check_url(&at("agent.url"), url)?;
            let sha = sha.to_ascii_lowercase();
            if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(invalid(
                    at("agent.sha256"),
                    &sha,
                    "is not a SHA-256 digest (64 hexadecimal digits)",
                ));
            }
            vars.insert("agent_url", Value::Text(url.clone()));
            vars.insert("agent_sha256", Value::Text(sha));
        }
        (Some(url), None) => {
            return Err(invalid(
                at("agent.url"),
                url,
                "needs agent.sha256: a downloaded agent is always verified",
            ));
        }
        (None, _) => {
            vars.insert("agent_url", Value::Flag(false));
        }
    }

    let script = render_template(TEMPLATE, &vars)?;
    if script.len() > USER_DATA_LIMIT {
        return Err(UserDataError::TooLarge {
            host_id: input.host_id.to_string(),
            bytes: script.len(),
            limit: USER_DATA_LIMIT,
        });
    }
    Ok(script)
}

#[derive(Debug, Clone)]
enum Value {
    Text(String),
    Flag(bool),
}

impl Value {
    fn is_on(&self) -> bool {
        match self {
            Value::Text(s) => !s.is_empty(),
            Value::Flag(b) => *b,
        }
    }
}

fn invalid(field: String, value: &str, reason: &str) -> UserDataError {
    UserDataError::InvalidValue {
        field,
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

fn check_chars(field: &str, value: &str, extra: &str, what: &str) -> Result<(), UserDataError> {
    if value.is_empty() {
        return Err(invalid(field.to_string(), value, "must not be empty"));
    }
    if let Some(c) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || extra.contains(*c)))
    {
        return Err(invalid(
            field.to_string(),
            value,
            &format!("contains {c:?}; {what} may only hold letters, digits and {extra:?}"),
        ));
    }
    Ok(())
}

fn check_name(field: &str, value: &str) -> Result<(), UserDataError> {
    check_chars(field, value, "._-", "a name")?;
    if value.len() > 128 {
        return Err(invalid(
            field.to_string(),
            value,
            "is longer than 128 characters",
        ));
    }
    Ok(())
}

fn check_path(field: &str, value: &str) -> Result<(), UserDataError> {
    check_chars(field, value, "._/-", "a path")?;
    if !value.starts_with('/') || value.split('/').any(|part| part == "..") || value.ends_with('/')
    {
        return Err(invalid(
            field.to_string(),
            value,
            "must be an absolute file path without \"..\"",
        ));
    }
    Ok(())
}

fn check_run_dir(field: &str, value: &str) -> Result<(), UserDataError> {
    check_path(field, value)?;
    let world_writable = ["/tmp", "/var/tmp", "/dev/shm"];
    if world_writable
        .iter()
        .any(|w| value == *w || value.starts_with(&format!("{w}/")))
    {
        return Err(invalid(
            field.to_string(),
            value,
            "must not be in a world-writable directory such as /tmp (the default is under /run)",
        ));
    }
    Ok(())
}

/// Authority part of a URL (between `scheme://` and the first `/`, `?` or `#`).
fn authority(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    Some(rest.split(['/', '?', '#']).next().unwrap_or(rest))
}

fn check_store_address(value: &str) -> Result<(), UserDataError> {
    let field = "store address";
    check_chars(field, value, "._:/-+,=~%[]@", "a store address")?;
    if authority(value).is_some_and(|a| a.contains('@')) || value.contains('@') {
        return Err(invalid(
            field.into(),
            value,
            "carries credentials; user data must hold no secrets",
        ));
    }
    Ok(())
}

fn check_url(field: &str, value: &str) -> Result<(), UserDataError> {
    check_chars(field, value, "-._~:/?#[]@!&()*+,;=%", "a URL")?;
    if !(value.starts_with("https://") || value.starts_with("http://")) {
        return Err(invalid(
            field.to_string(),
            value,
            "must be an http:// or https:// URL",
        ));
    }
    if authority(value).is_some_and(|a| a.contains('@')) {
        return Err(invalid(
            field.to_string(),
            value,
            "carries credentials; user data must hold no secrets",
        ));
    }
    Ok(())
}

/// A minimal mustache-like renderer: `{{name}}` substitutes, `{{#name}}...{{/name}}`
/// keeps its body when `name` is on, `{{^name}}...{{/name}}` when it is off. A section
/// tag alone on its line takes the whole line with it.
fn render_template(
    template: &str,
    vars: &BTreeMap<&'static str, Value>,
) -> Result<String, UserDataError> {
    let err = |message: String| UserDataError::Template { message };
    let lookup = |name: &str| {
        vars.get(name)
            .ok_or_else(|| err(format!("no value for {{{{{name}}}}}")))
    };
    let mut out = String::with_capacity(template.len());
    // (section name, whether its body is emitted)
    let mut stack: Vec<(String, bool)> = Vec::new();
    let emitting = |stack: &Vec<(String, bool)>| stack.iter().all(|(_, on)| *on);
    let section = |tag: &str, stack: &mut Vec<(String, bool)>| -> Result<bool, UserDataError> {
        if let Some(name) = tag.strip_prefix('#') {
            stack.push((name.to_string(), lookup(name)?.is_on()));
        } else if let Some(name) = tag.strip_prefix('^') {
            stack.push((name.to_string(), !lookup(name)?.is_on()));
        } else if let Some(name) = tag.strip_prefix('/') {
            match stack.pop() {
                Some((open, _)) if open == name => {}
                other => {
                    return Err(err(format!(
                        "{{{{/{name}}}}} closes {:?}",
                        other.map(|o| o.0)
                    )))
                }
            }
        } else {
            return Ok(false);
        }
        Ok(true)
    };
    for line in template.split_inclusive('\n') {
        let trimmed = line.trim();
        if let Some(tag) = trimmed
            .strip_prefix("{{")
            .and_then(|t| t.strip_suffix("}}"))
        {
            if !tag.contains("{{") && section(tag, &mut stack)? {
                continue;
            }
        }
        let mut rest = line;
        while let Some(start) = rest.find("{{") {
            let (text, after) = rest.split_at(start);
            if emitting(&stack) {
                out.push_str(text);
            }
            let end = after
                .find("}}")
                .ok_or_else(|| err(format!("unclosed tag in {line:?}")))?;
            let tag = &after[2..end];
            if !section(tag, &mut stack)? && emitting(&stack) {
                match lookup(tag)? {
                    Value::Text(s) => out.push_str(s),
                    Value::Flag(_) => {
                        return Err(err(format!("{{{{{tag}}}}} is a flag, not a value")))
                    }
                }
            }
            rest = &after[end + 2..];
        }
        if emitting(&stack) {
            out.push_str(rest);
        }
    }
    if let Some((open, _)) = stack.pop() {
        return Err(err(format!("section {open:?} is never closed")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&'static str, Value)]) -> BTreeMap<&'static str, Value> {
        pairs.iter().cloned().collect()
    }

    #[test]
    fn template_sections_and_values() {
        let v = vars(&[
            ("a", Value::Text("x".into())),
            ("on", Value::Flag(true)),
            ("off", Value::Flag(false)),
        ]);
        let out = render_template("1 {{a}}\n{{#on}}\n2\n{{/on}}\n{{#off}}\n3\n{{/off}}\n{{^off}}\n4 {{a}}\n{{/off}}\nz{{#on}}y{{/on}}{{#off}}w{{/off}}\n", &v).expect("renders");
        assert_eq!(out, "1 x\n2\n4 x\nzy\n");
    }

    #[test]
    fn template_errors_on_missing_values_and_unbalanced_sections() {
        let v = vars(&[("on", Value::Flag(true))]);
        assert!(matches!(
            render_template("{{nope}}", &v),
            Err(UserDataError::Template { .. })
        ));
        assert!(matches!(
            render_template("{{#on}}\n", &v),
            Err(UserDataError::Template { .. })
        ));
        assert!(matches!(
            render_template("{{#on}}{{/other}}", &v),
            Err(UserDataError::Template { .. })
        ));
    }

    #[test]
    fn checks_refuse_values_that_could_escape_their_line() {
        assert!(check_name("n", "a b").is_err());
        assert!(check_name("n", "a'b").is_err());
        assert!(check_path("p", "relative/x").is_err());
        assert!(check_path("p", "/usr/../etc/x").is_err());
        assert!(check_run_dir("d", "/tmp/mps").is_err());
        assert!(check_run_dir("d", "/run/gpushare-mps/pipe").is_ok());
        assert!(check_run_dir("d", "/var/tmp/x").is_err());
        assert!(check_run_dir("d", "/var/lib/gpushare/mps").is_ok());
        assert!(check_store_address("etcd://10.0.0.5:2379").is_ok());
        assert!(check_store_address("etcd://user:pw@10.0.0.5:2379").is_err());
        assert!(check_store_address("etcd://x;rm -rf /").is_err());
        assert!(check_url("u", "https://example.com/gpushare?v=1").is_ok());
        assert!(check_url("u", "https://u:p@example.com/gpushare").is_err());
        assert!(check_url("u", "https://example.com/'$(reboot)'").is_err());
        assert!(check_url("u", "ftp://example.com/g").is_err());
    }
}

//! The cloud-init user data every launched host boots with: EXCLUSIVE_PROCESS compute
//! mode, a systemd unit running the MPS control daemon in the foreground, and the
//! `gpushare agent` unit. One template (`user_data.sh.tmpl`), rendered here; the two
//! units are gpushare-core's `host_units`, shared with `gpushare host setup`.
//!
//! Every value put into the script is checked against a strict character set instead
//! of being escaped for two syntaxes (bash and systemd unit files) at once, so a
//! value can never break out of its line; where systemd reads a value that may hold
//! `%` (the store address), it is written `%%`, so no specifier expands. The agent is
//! downloaded with `curl --globoff` and only over the URL's own scheme (https unless
//! the URL says http://). Credentials in URLs are refused: user data
//! is readable by anything on the host that can reach the instance metadata service.

use gpushare_core::model::CapacityProvider;

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

    check_name("gpushare.cluster", input.cluster)?;
    check_name("capacity_provider", input.pool_name)?;
    check_name("host id", input.host_id)?;
    check_store_address(input.store_address)?;
    if pool.mps.enabled {
        check_run_dir(&at("mps.pipe_directory"), &pool.mps.pipe_directory)?;
        check_run_dir(&at("mps.log_directory"), &pool.mps.log_directory)?;
    }
    let thread_pct = match pool.mps.default_active_thread_percentage {
        Some(p) if (1..=100).contains(&p) => Some(p),
        Some(p) => {
            return Err(invalid(
                at("mps.default_active_thread_percentage"),
                &p.to_string(),
                "must be between 1 and 100",
            ));
        }
        None => None,
    };
    check_path(&at("agent.path"), &pool.agent.path)?;
    check_path(&at("agent.credentials_file"), &pool.agent.credentials_file)?;
    let (agent_url, agent_sha256) = match (&pool.agent.url, &pool.agent.sha256) {
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
            (Some(url.as_str()), Some(sha))
        }
        (Some(url), None) => {
            return Err(invalid(
                at("agent.url"),
                url,
                "needs agent.sha256: a downloaded agent is always verified",
            ));
        }
        (None, _) => (None, None),
    };
    // curl may follow only the scheme the URL names: https, unless the URL is
    // explicitly plain http (a test or a private mirror).
    let agent_protocols = match agent_url {
        Some(u) if u.starts_with("http://") => "=http",
        _ => "=https",
    };
    let context = minijinja::context! {
        cluster => input.cluster,
        pool => input.pool_name,
        host_id => input.host_id,
        store => input.store_address,
        mps => pool.mps.enabled,
        pipe_dir => &pool.mps.pipe_directory,
        log_dir => &pool.mps.log_directory,
        thread_pct => thread_pct,
        agent_path => &pool.agent.path,
        credentials_file => &pool.agent.credentials_file,
        agent_url => agent_url,
        agent_sha256 => agent_sha256,
        agent_protocols => agent_protocols,
    };
    let script = render_template(TEMPLATE, context)?;
    if script.len() > USER_DATA_LIMIT {
        return Err(UserDataError::TooLarge {
            host_id: input.host_id.to_string(),
            bytes: script.len(),
            limit: USER_DATA_LIMIT,
        });
    }
    Ok(script)
}

/// Renders the bootstrap template: Jinja syntax (minijinja), block tags alone on their
/// line take the line with them, no HTML escaping, and an undefined name is an error.
fn render_template(template: &str, context: minijinja::Value) -> Result<String, UserDataError> {
    let err = |e: minijinja::Error| UserDataError::Template {
        message: format!("{e:#}"),
    };
    // The systemd units are gpushare-core's, shared with `gpushare host setup`.
    let env = gpushare_core::host_units::environment();
    env.template_from_str(template)
        .and_then(|t| t.render(context))
        .map_err(err)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_blocks_take_their_line_and_undefined_names_are_errors() {
        let out = render_template(
            "1 {{a}}\n{% if on %}\n2\n{% endif %}\n{% if not on %}\n3\n{% endif %}\nz{{ 'y' if on else '' }}\n{{ p | systemd }}\n",
            minijinja::context! { a => "x", on => true, p => "a%hb" },
        )
        .expect("renders");
        assert_eq!(out, "1 x\n2\nzy\na%%hb\n");
        assert!(matches!(
            render_template("{{nope}}", minijinja::context! {}),
            Err(UserDataError::Template { .. })
        ));
        assert!(matches!(
            render_template("{% if on %}\n", minijinja::context! { on => true }),
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
        assert!(check_store_address("etcd://192.0.2.5:2379").is_ok());
        assert!(check_store_address("etcd://user:pw@192.0.2.5:2379").is_err());
        assert!(check_store_address("etcd://x;rm -rf /").is_err());
        assert!(check_url("u", "https://example.com/gpushare?v=1").is_ok());
        assert!(check_url("u", "https://u:p@example.com/gpushare").is_err());
        assert!(check_url("u", "https://example.com/'$(reboot)'").is_err());
        assert!(check_url("u", "ftp://example.com/g").is_err());
    }
}

//! The cloud-init user data every launched host boots with: EXCLUSIVE_PROCESS compute
//! mode, a systemd unit running the MPS control daemon in the foreground, and the
//! `gpushare agent` unit. One template (`user_data.sh.tmpl`), rendered here; the two
//! units are gpushare-core's `host_units`, shared with `gpushare host setup`.
//!
//! Every value put into the script is checked against a strict character set instead
//! of being escaped for two syntaxes (bash and systemd unit files) at once, so a
//! value can never break out of its line; where systemd reads a value that may hold
//! `%`, it is written `%%`, so no specifier expands. The agent is downloaded with
//! `curl --globoff` and only over the URL's own scheme (https unless the URL says
//! http://). Credentials in URLs are refused: user data is readable by anything on the
//! host that can reach the instance metadata service. The one secret it carries is the
//! host's join token: single-use, bound to this host id, valid for the boot grace,
//! written to a root-only file for the agent's unit (docs/security.md, "User data").

use gpushare_core::model::CapacityProvider;
use gpushare_engine::join::JoinGrant;

/// EC2's limit on user data, in bytes, before base64 encoding.
pub const USER_DATA_LIMIT: usize = 16 * 1024;

const TEMPLATE: &str = include_str!("user_data.sh.tmpl");

/// Where the bootstrap writes the host's join token (root-only), read by the agent's
/// unit as `GPUSHARE_JOIN_TOKEN`; spent by the agent's first join.
pub const JOIN_FILE: &str = "/etc/gpushare/join.env";

/// What the bootstrap script of one host is rendered from.
#[derive(Debug, Clone, Copy)]
pub struct UserDataInput<'a> {
    pub cluster: &'a str,
    /// Name of the capacity provider the host belongs to.
    pub pool_name: &'a str,
    pub pool: &'a CapacityProvider,
    /// gpushare's id of the host (the `gpushare:host-id` tag).
    pub host_id: &'a str,
    /// How the host's agent joins the controller's agent API (address, single-use
    /// token, CA hash).
    pub join: &'a JoinGrant,
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
    check_join(input.join)?;
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
        server => &input.join.server,
        join_token => &input.join.token,
        ca_hash => &input.join.ca_hash,
        join_file => JOIN_FILE,
        env_file => JOIN_FILE,
        mps => pool.mps.enabled,
        pipe_dir => &pool.mps.pipe_directory,
        log_dir => &pool.mps.log_directory,
        mps_user => pool.mps.user,
        thread_pct => thread_pct,
        agent_path => &pool.agent.path,
        agent_url => agent_url,
        agent_sha256 => agent_sha256,
        agent_protocols => agent_protocols,
        deep_check => pool.deep_check,
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
    if gpushare_core::pool::mps_dir_issue(value).is_some() {
        return Err(invalid(
            field.to_string(),
            value,
            "must not be in a world-writable directory such as /tmp, /dev/shm or /run/lock (the default is under /run)",
        ));
    }
    Ok(())
}

/// Authority part of a URL (between `scheme://` and the first `/`, `?` or `#`).
fn authority(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    Some(rest.split(['/', '?', '#']).next().unwrap_or(rest))
}

/// The controller's address (`https://HOST[:PORT]`, no credentials, no path), the
/// token (`<hex>.<hex>`) and the CA hash (`sha256:<64 hex>`).
fn check_join(join: &JoinGrant) -> Result<(), UserDataError> {
    let field = "gpushare.controller_address";
    check_chars(field, &join.server, ".:/-[]", "the controller's address")?;
    let host = join.server.strip_prefix("https://").unwrap_or("");
    if host.is_empty() || host.contains('/') {
        return Err(invalid(
            field.into(),
            &join.server,
            "must be https://HOST:PORT (the controller's agent API, without a path)",
        ));
    }
    let hex_part = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_hexdigit());
    let token_ok = join
        .token
        .split_once('.')
        .is_some_and(|(id, secret)| hex_part(id) && hex_part(secret));
    if !token_ok {
        // Never echo the token itself.
        return Err(invalid(
            "join token".into(),
            "(hidden)",
            "is not a join token (<id>.<secret>, hexadecimal)",
        ));
    }
    let hash_ok = join
        .ca_hash
        .strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && hex_part(h));
    if !hash_ok {
        return Err(invalid(
            "CA hash".into(),
            &join.ca_hash,
            "is not sha256:<64 hexadecimal digits>",
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
        let join = |server: &str, token: &str, hash: &str| JoinGrant {
            server: server.into(),
            token: token.into(),
            ca_hash: hash.into(),
        };
        let hash = format!("sha256:{}", "a".repeat(64));
        assert!(check_join(&join("https://ctl.internal:7443", "ab12.cd34", &hash)).is_ok());
        assert!(check_join(&join("https://[fd00::1]:7443", "ab12.cd34", &hash)).is_ok());
        assert!(check_join(&join("https://u:p@ctl:7443", "ab12.cd34", &hash)).is_err());
        assert!(check_join(&join("http://ctl:7443", "ab12.cd34", &hash)).is_err());
        assert!(check_join(&join("https://ctl:7443/x", "ab12.cd34", &hash)).is_err());
        assert!(check_join(&join("https://x;rm -rf /", "ab12.cd34", &hash)).is_err());
        assert!(check_join(&join("https://ctl:7443", "ab12.cd34'$(reboot)", &hash)).is_err());
        assert!(check_join(&join("https://ctl:7443", "ab12", &hash)).is_err());
        assert!(check_join(&join("https://ctl:7443", "ab12.cd34", "sha256:zz")).is_err());
        let err = check_join(&join("https://ctl:7443", "s3cret;x", &hash)).expect_err("bad token");
        assert!(!err.to_string().contains("s3cret"), "{err}");
        assert!(check_url("u", "https://example.com/gpushare?v=1").is_ok());
        assert!(check_url("u", "https://u:p@example.com/gpushare").is_err());
        assert!(check_url("u", "https://example.com/'$(reboot)'").is_err());
        assert!(check_url("u", "ftp://example.com/g").is_err());
    }
}

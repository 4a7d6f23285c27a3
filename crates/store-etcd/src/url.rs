//! `etcd://host:2379[,host2:2379,...]/prefix[?cacert=PATH&cert=PATH&key=PATH]` and the
//! connection options that do not belong in a URL (credentials, timeouts, TTLs, limits).

use std::path::PathBuf;
use std::time::Duration;

/// The default key prefix when the URL names none.
pub const DEFAULT_PREFIX: &str = "gpushare";
/// The port used when an endpoint names none.
pub const DEFAULT_PORT: u16 = 2379;

/// Environment variables read by [`EtcdOptions::from_env`].
pub const ENV_CACERT: &str = "GPUSHARE_ETCD_CACERT";
pub const ENV_CERT: &str = "GPUSHARE_ETCD_CERT";
pub const ENV_KEY: &str = "GPUSHARE_ETCD_KEY";
pub const ENV_USERNAME: &str = "GPUSHARE_ETCD_USERNAME";
pub const ENV_PASSWORD: &str = "GPUSHARE_ETCD_PASSWORD";

/// Why an `etcd://` URL was refused. Every message names the URL (never a credential:
/// a URL carrying `user:password@` is refused without repeating it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("{url:?} is not an etcd store URL: it must start with etcd://")]
    Scheme { url: String },
    #[error("{url:?} names no etcd endpoint (etcd://host:2379[,host2:2379]/prefix)")]
    NoEndpoint { url: String },
    #[error("{url:?}: endpoint {endpoint:?} is not host:port")]
    Endpoint { url: String, endpoint: String },
    #[error(
        "the etcd store URL {url:?} carries credentials; give them in {ENV_USERNAME} and {ENV_PASSWORD} instead"
    )]
    Credentials {
        /// The URL with its user information removed.
        url: String,
    },
    #[error(
        "{url:?}: prefix {prefix:?} must be segments of letters, digits, '-', '_' and '.' separated by '/'"
    )]
    Prefix { url: String, prefix: String },
    #[error("{url:?}: unknown query parameter {name:?} (cacert, cert and key are known)")]
    Query { url: String, name: String },
}

/// Why a credentials file was refused. Never carries the file's content.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("cannot read the etcd credentials file {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the etcd credentials file {path} is readable by others (mode {mode:o}): chmod 600 it"
    )]
    Permissions { path: String, mode: u32 },
    #[error("{path}, line {line}: not NAME=value with a GPUSHARE_ETCD_* name")]
    Line { path: String, line: usize },
}

/// A parsed `etcd://` store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdUrl {
    /// `host:port` of each member.
    pub endpoints: Vec<String>,
    /// Key prefix without leading or trailing '/', e.g. `gpushare/prod`.
    pub prefix: String,
    pub cacert: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

impl EtcdUrl {
    pub fn parse(url: &str) -> Result<EtcdUrl, UrlError> {
        let rest = url
            .strip_prefix("etcd://")
            .ok_or_else(|| UrlError::Scheme { url: redact(url) })?;
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match rest.split_once('/') {
            Some((a, p)) => (a, p),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(UrlError::Credentials { url: redact(url) });
        }
        let mut endpoints = Vec::new();
        for ep in authority
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
        {
            endpoints.push(parse_endpoint(ep).ok_or_else(|| UrlError::Endpoint {
                url: url.to_string(),
                endpoint: ep.to_string(),
            })?);
        }
        if endpoints.is_empty() {
            return Err(UrlError::NoEndpoint {
                url: url.to_string(),
            });
        }
        let prefix = path.trim_matches('/');
        let prefix = if prefix.is_empty() {
            DEFAULT_PREFIX.to_string()
        } else {
            let ok = prefix.split('/').all(|seg| {
                !seg.is_empty()
                    && seg != "."
                    && seg != ".."
                    && seg
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            });
            if !ok {
                return Err(UrlError::Prefix {
                    url: url.to_string(),
                    prefix: prefix.to_string(),
                });
            }
            prefix.to_string()
        };
        let mut parsed = EtcdUrl {
            endpoints,
            prefix,
            cacert: None,
            cert: None,
            key: None,
        };
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = Some(PathBuf::from(value));
            match name {
                "cacert" => parsed.cacert = value,
                "cert" => parsed.cert = value,
                "key" => parsed.key = value,
                _ => {
                    return Err(UrlError::Query {
                        url: url.to_string(),
                        name: name.to_string(),
                    })
                }
            }
        }
        Ok(parsed)
    }

    /// `etcd://h1:2379,h2:2379/prefix`: what errors and logs show (no query, no secret).
    pub fn location(&self) -> String {
        format!("etcd://{}/{}", self.endpoints.join(","), self.prefix)
    }
}

impl std::fmt::Display for EtcdUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.location())
    }
}

fn parse_endpoint(ep: &str) -> Option<String> {
    let (host, port) = if let Some(rest) = ep.strip_prefix('[') {
        // [::1]:2379
        let (h, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse::<u16>().ok()?,
            None if after.is_empty() => DEFAULT_PORT,
            None => return None,
        };
        (format!("[{h}]"), port)
    } else {
        match ep.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse::<u16>().ok()?),
            None => (ep.to_string(), DEFAULT_PORT),
        }
    };
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '[' | ']' | ':'));
    host_ok.then(|| format!("{host}:{port}"))
}

/// The URL with any `user:password@` removed, for messages.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.split('@').next_back().unwrap_or("").to_string();
    };
    let end = rest.find('/').unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    format!("{scheme}://{authority}{tail}")
}

/// A password that never prints.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// How to connect, beyond the URL. [`EtcdOptions::from_env`] is what the CLI and agents use.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// CA bundle (PEM) to verify the etcd members; with it, the connection is TLS.
    pub cacert: Option<PathBuf>,
    /// Client certificate and key (PEM) for mutual TLS.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// etcd user; the password is never logged or written.
    pub username: Option<String>,
    pub password: Option<Secret>,
    /// Bound on reaching the store: an unreachable store fails within about this.
    pub connect_timeout: Duration,
    /// Bound on any one request.
    pub request_timeout: Duration,
    /// TTL of the lease behind the apply lock (a dead holder's lock is gone after it).
    pub lock_ttl: Duration,
    /// TTL of a host report's lease (a host whose agent stops is silent after it).
    pub report_ttl: Duration,
    /// TTL of the lease behind a large commit's claim.
    pub commit_ttl: Duration,
    /// Most operations in one transaction (etcd 3.4's `--max-txn-ops` default is 128).
    pub max_txn_ops: usize,
    /// Most bytes of keys and values in one transaction (etcd's `--max-request-bytes`
    /// default is 1.5 MiB).
    pub max_txn_bytes: usize,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            cacert: None,
            cert: None,
            key: None,
            username: None,
            password: None,
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(30),
            lock_ttl: Duration::from_secs(10),
            report_ttl: Duration::from_secs(60),
            commit_ttl: Duration::from_secs(10),
            max_txn_ops: 120,
            max_txn_bytes: 1024 * 1024,
        }
    }
}

impl EtcdOptions {
    /// Defaults, with TLS files and credentials from `GPUSHARE_ETCD_*`.
    pub fn from_env() -> EtcdOptions {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        EtcdOptions {
            cacert: var(ENV_CACERT).map(PathBuf::from),
            cert: var(ENV_CERT).map(PathBuf::from),
            key: var(ENV_KEY).map(PathBuf::from),
            username: var(ENV_USERNAME),
            password: var(ENV_PASSWORD).map(Secret::new),
            ..EtcdOptions::default()
        }
    }

    /// These options with the `GPUSHARE_ETCD_*` settings found in the file `path`
    /// (lines `NAME=value`; blank lines and `#` comments ignored; the format of a
    /// systemd `EnvironmentFile`), which take the place of the options'. This is how an
    /// agent gets its credentials on a host (never from user data). The file must not
    /// be readable by group or others; errors name the file, never its content.
    pub fn with_env_file(
        mut self,
        path: &std::path::Path,
    ) -> Result<EtcdOptions, CredentialsError> {
        let shown = path.display().to_string();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let meta = std::fs::metadata(path).map_err(|source| CredentialsError::Read {
                path: shown.clone(),
                source,
            })?;
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(CredentialsError::Permissions { path: shown, mode });
            }
        }
        let text = std::fs::read_to_string(path).map_err(|source| CredentialsError::Read {
            path: shown.clone(),
            source,
        })?;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((name, value)) = line.split_once('=') else {
                return Err(CredentialsError::Line {
                    path: shown,
                    line: n + 1,
                });
            };
            let value = value.trim().trim_matches('"').to_string();
            match name.trim() {
                ENV_CACERT => self.cacert = Some(PathBuf::from(value)),
                ENV_CERT => self.cert = Some(PathBuf::from(value)),
                ENV_KEY => self.key = Some(PathBuf::from(value)),
                ENV_USERNAME => self.username = Some(value),
                ENV_PASSWORD => self.password = Some(Secret::new(value)),
                _ => {
                    return Err(CredentialsError::Line {
                        path: shown,
                        line: n + 1,
                    })
                }
            }
        }
        Ok(self)
    }

    /// TLS files named in the URL take the place of the options'.
    pub(crate) fn merged_with(mut self, url: &EtcdUrl) -> EtcdOptions {
        if url.cacert.is_some() {
            self.cacert = url.cacert.clone();
        }
        if url.cert.is_some() {
            self.cert = url.cert.clone();
        }
        if url.key.is_some() {
            self.key = url.key.clone();
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_endpoints_prefix_and_tls_files() {
        let u = EtcdUrl::parse(
            "etcd://a:2379,b.example:2380/gpushare/prod?cacert=/ca.pem&cert=/c.pem&key=/k.pem",
        )
        .expect("parses");
        assert_eq!(u.endpoints, ["a:2379", "b.example:2380"]);
        assert_eq!(u.prefix, "gpushare/prod");
        assert_eq!(u.cacert.as_deref(), Some(std::path::Path::new("/ca.pem")));
        assert_eq!(u.key.as_deref(), Some(std::path::Path::new("/k.pem")));
        assert_eq!(u.location(), "etcd://a:2379,b.example:2380/gpushare/prod");
        let d = EtcdUrl::parse("etcd://localhost").expect("parses");
        assert_eq!(d.endpoints, ["localhost:2379"]);
        assert_eq!(d.prefix, DEFAULT_PREFIX);
        let v6 = EtcdUrl::parse("etcd://[::1]:2379/x/").expect("parses");
        assert_eq!(
            (v6.endpoints[0].as_str(), v6.prefix.as_str()),
            ("[::1]:2379", "x")
        );
    }

    #[test]
    fn bad_urls_are_refused_naming_the_url_but_never_a_password() {
        for (bad, want) in [
            ("http://a:2379/p", "http://a:2379/p"),
            ("etcd:///p", "etcd:///p"),
            ("etcd://a:notaport/p", "a:notaport"),
            ("etcd://a:2379/../x", "../x"),
            ("etcd://a:2379/p?token=1", "token"),
        ] {
            let e = EtcdUrl::parse(bad).expect_err(bad).to_string();
            assert!(e.contains(want), "{bad}: {e}");
        }
        let e = EtcdUrl::parse("etcd://root:hunter2@a:2379/p").expect_err("credentials");
        let msg = e.to_string();
        assert!(!msg.contains("hunter2") && !msg.contains("root"), "{msg}");
        assert!(
            msg.contains("etcd://a:2379/p") && msg.contains(ENV_PASSWORD),
            "{msg}"
        );
    }

    #[test]
    fn credentials_come_from_a_private_env_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("etcd.env");
        std::fs::write(
            &path,
            "# agent credentials\nGPUSHARE_ETCD_USERNAME=agent-h-1\nGPUSHARE_ETCD_PASSWORD=\"s3cret=x\"\n\nGPUSHARE_ETCD_CACERT=/etc/ca.pem\n",
        )
        .expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = EtcdOptions::default()
            .with_env_file(&path)
            .expect_err("world-readable");
        assert!(e.to_string().contains("chmod 600"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let o = EtcdOptions::default().with_env_file(&path).expect("read");
        assert_eq!(o.username.as_deref(), Some("agent-h-1"));
        assert_eq!(o.password.as_ref().map(Secret::expose), Some("s3cret=x"));
        assert_eq!(
            o.cacert.as_deref(),
            Some(std::path::Path::new("/etc/ca.pem"))
        );
        std::fs::write(&path, "PASSWORD hunter2\n").expect("write");
        let e = EtcdOptions::default()
            .with_env_file(&path)
            .expect_err("bad line");
        assert!(
            e.to_string().contains("line 1") && !e.to_string().contains("hunter2"),
            "{e}"
        );
    }

    #[test]
    fn a_secret_never_prints() {
        let o = EtcdOptions {
            password: Some(Secret::new("hunter2")),
            ..EtcdOptions::default()
        };
        assert!(!format!("{o:?}").contains("hunter2"));
    }
}

//! Which names a task may give its containers' environment variables.
//!
//! The agent sets a few variables itself, and they carry the limits gpushare exists to
//! enforce: `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` (the MPS memory limit),
//! `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`, the pipe directory, the GPUs a container sees.
//! A task that could set them (or a key like `"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=99999M,1"`,
//! which a shell or a container's environment reads as a second value of that variable)
//! could lift its own limits. So a key of `env` or `secret_env` must be a plain
//! POSIX-style name and must not be one of those gpushare owns. The loader, the
//! Terraform provider (through the schema's `env_names` validation) and the agent
//! (before it starts anything, so a hand-edited store cannot get past it) all ask
//! [`name_issue`].

/// A name gpushare owns: an exact name, or a prefix (ending in `_`) of the names it owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reserved {
    pub name: &'static str,
    pub prefix: bool,
    /// Who sets it, for the message.
    pub owner: &'static str,
}

/// The names the agent sets on every container it starts.
pub const RESERVED: &[Reserved] = &[
    Reserved {
        name: "CUDA_MPS_",
        prefix: true,
        owner: "the agent sets the MPS client settings: memory limit, compute cap, pipe directory",
    },
    Reserved {
        name: "CUDA_VISIBLE_DEVICES",
        prefix: false,
        owner: "the agent selects the GPUs a container sees",
    },
    Reserved {
        name: "NVIDIA_VISIBLE_DEVICES",
        prefix: false,
        owner: "the agent selects the GPUs a container sees",
    },
    Reserved {
        name: "GPUSHARE_",
        prefix: true,
        owner: "gpushare's own variables, such as the task id",
    },
];

/// Why `name` cannot be an environment variable of a container, or `None` when it can:
/// it must match `[A-Za-z_][A-Za-z0-9_]*` and not be one of [`RESERVED`].
pub fn name_issue(name: &str) -> Option<String> {
    let mut chars = name.chars();
    let plain = match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' => {
            chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        _ => false,
    };
    if !plain {
        return Some(format!(
            "{name:?} is not an environment variable name: expected letters, digits and `_`, not starting with a digit ([A-Za-z_][A-Za-z0-9_]*)"
        ));
    }
    RESERVED
        .iter()
        .find(|r| {
            if r.prefix {
                name.starts_with(r.name)
            } else {
                name == r.name
            }
        })
        .map(|r| {
            let what = if r.prefix {
                format!("names starting with `{}` are reserved", r.name)
            } else {
                "it is reserved".to_string()
            };
            format!("`{name}` cannot be set by a task: {what}; {}", r.owner)
        })
}

/// The rule in one sentence, for the reference docs.
pub fn rule_text() -> String {
    let names = RESERVED
        .iter()
        .map(|r| {
            if r.prefix {
                format!("`{}*`", r.name)
            } else {
                format!("`{}`", r.name)
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    format!("Keys must match `[A-Za-z_][A-Za-z0-9_]*` and must not be one of the names the agent sets ({names}).")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_pass() {
        for n in [
            "MODEL",
            "_x",
            "a1_B2",
            "CUDA_MPS",
            "CUDA_LAUNCH_BLOCKING",
            "NVIDIA_DRIVER_CAPABILITIES",
        ] {
            assert_eq!(name_issue(n), None, "{n}");
        }
    }

    #[test]
    fn malformed_names_are_refused() {
        for n in [
            "",
            "1A",
            "A-B",
            "A=B",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=99999M,1",
            "CUDA_VISIBLE_DEVICES=0,1,2,3,",
            "A B",
            "É",
        ] {
            let issue = name_issue(n).unwrap_or_else(|| panic!("{n:?} passed"));
            assert!(
                issue.contains("not an environment variable name"),
                "{issue}"
            );
        }
    }

    #[test]
    fn names_gpushare_sets_are_refused() {
        for n in [
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
            "CUDA_MPS_PIPE_DIRECTORY",
            "CUDA_VISIBLE_DEVICES",
            "NVIDIA_VISIBLE_DEVICES",
            "GPUSHARE_TASK_ID",
        ] {
            let issue = name_issue(n).unwrap_or_else(|| panic!("{n:?} passed"));
            assert!(issue.contains("cannot be set by a task"), "{issue}");
        }
    }
}

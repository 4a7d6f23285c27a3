//! Identifiers that reach file names, store keys, tags and commands (host and task
//! ids, resource names, the cluster name), and the check a saved plan gets before it
//! is applied: a plan file is input like any other, and an edited id such as
//! `../../x` must never be written into the state or joined to a path.

use crate::plan::Plan;
use thiserror::Error;

/// Longest identifier accepted.
pub const MAX_ID_LEN: usize = 128;

/// Whether `s` is a safe identifier: 1 to [`MAX_ID_LEN`] ASCII letters, digits, `-`,
/// `_` and `.`, starting with a letter or digit (so never `.`, `..` or a path).
pub fn valid_id(s: &str) -> bool {
    let mut chars = s.chars();
    s.len() <= MAX_ID_LEN
        && chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// An identifier in a plan that is not a safe one.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("the plan's {what} {value:?} is not a valid identifier (letters, digits, '-', '_' and '.', starting with a letter or digit, at most {MAX_ID_LEN} characters)")]
pub struct BadId {
    /// Where it was found, e.g. `launches[0].host.id`.
    pub what: String,
    pub value: String,
}

impl Plan {
    /// Checks every identifier the plan would write into the state, a store key or a
    /// cloud request: the cluster, resource names, host and task ids and the pools and
    /// services they name. The first bad one is the error.
    pub fn check_identifiers(&self) -> Result<(), BadId> {
        let mut ids: Vec<(String, &str)> = vec![("cluster".into(), &self.cluster)];
        for (i, rc) in self.resource_changes.iter().enumerate() {
            ids.push((format!("resource_changes[{i}].addr"), &rc.addr.name));
        }
        for (i, r) in self.registrations.iter().enumerate() {
            ids.push((format!("registrations[{i}].family"), &r.family));
            for (j, c) in r.spec.containers.iter().enumerate() {
                ids.push((
                    format!("registrations[{i}].spec.container[{j}].name"),
                    &c.name,
                ));
            }
        }
        for (i, l) in self.launches.iter().enumerate() {
            ids.push((format!("launches[{i}].host.id"), &l.host.id));
            ids.push((
                format!("launches[{i}].host.capacity_provider"),
                &l.host.capacity_provider,
            ));
        }
        for (i, r) in self.retirements.iter().enumerate() {
            ids.push((format!("retirements[{i}].host_id"), &r.host_id));
        }
        for (i, s) in self.starts.iter().enumerate() {
            ids.push((format!("starts[{i}].task.id"), &s.task.id));
            ids.push((format!("starts[{i}].task.host"), &s.task.host));
            ids.push((format!("starts[{i}].task.service"), &s.task.service));
        }
        for (i, s) in self.stops.iter().enumerate() {
            ids.push((format!("stops[{i}].task_id"), &s.task_id));
        }
        for (i, m) in self.moves.iter().enumerate() {
            ids.push((format!("moves[{i}].from_task"), &m.from_task));
            ids.push((format!("moves[{i}].to.id"), &m.to.id));
            ids.push((format!("moves[{i}].to.host"), &m.to.host));
        }
        for (k, h) in &self.after.hosts {
            ids.push(("after.hosts key".into(), k));
            ids.push((format!("after.hosts[{k:?}].id"), &h.id));
        }
        for (k, t) in &self.after.tasks {
            ids.push(("after.tasks key".into(), k));
            ids.push((format!("after.tasks[{k:?}].id"), &t.id));
            // A task not placed yet has an empty host.
            if !t.host.is_empty() {
                ids.push((format!("after.tasks[{k:?}].host"), &t.host));
            }
        }
        match ids.into_iter().find(|(_, v)| !valid_id(v)) {
            Some((what, value)) => Err(BadId {
                what,
                value: value.to_string(),
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        for ok in [
            "h-l4-74979c",
            "embedder-3.1",
            "a",
            "A_b.c-d",
            &"x".repeat(MAX_ID_LEN),
        ] {
            assert!(valid_id(ok), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../../x",
            "a/b",
            "-a",
            ".hidden",
            "a b",
            "a\0",
            "é",
            &"x".repeat(MAX_ID_LEN + 1),
        ] {
            assert!(!valid_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn an_edited_host_id_in_a_plan_is_found() {
        let mut plan = Plan {
            cluster: "c".into(),
            ..Plan::default()
        };
        assert_eq!(plan.check_identifiers(), Ok(()));
        plan.retirements.push(crate::plan::Retire {
            host_id: "../../..".into(),
            reason: "edited".into(),
            if_empty: false,
        });
        let e = plan.check_identifiers().expect_err("refused");
        assert_eq!(e.what, "retirements[0].host_id");
        assert!(e.to_string().contains("\"../../..\""), "{e}");
    }
}

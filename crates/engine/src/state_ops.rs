//! The rules of editing the recorded state by hand (`gpushare state rm|mv`): which
//! address names what, what goes with a removed resource or host, what follows a
//! renamed resource, and what is refused. Pure functions over a [`StoreState`]; the
//! caller runs them inside the edit transaction ([`crate::store::edit::edit`]).
//! Beside them, `import` (which instance may be adopted and the host it becomes) and
//! `state push` (which state may be written, and when).

use gpushare_core::model::{AppliedResource, ResourceAddr, ResourceKind, StoreState};

mod import;
mod push;
pub use import::{find_instance, imported_host, ImportError};
pub use push::{check_pushed, push, PushError};

/// What `state show|rm|mv` accept: a resource (`service.NAME`...), `host.ID` or `task.ID`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addr {
    Resource(ResourceAddr),
    Host(String),
    Task(String),
}

/// Why a state edit is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateOpError {
    #[error("{message}: an address is KIND.NAME (capacity_provider, gpu_instance, task_definition, service), host.ID or task.ID")]
    BadAddr { message: String },
    #[error("no {addr} in the state ({held}; see gpushare state list)")]
    Unknown { addr: String, held: String },
    #[error("{addr} still has hosts in the state ({hosts}): remove them first (gpushare state rm host.ID) or destroy them")]
    PoolHasHosts { addr: String, hosts: String },
    #[error("state mv renames resources (KIND.NAME); hosts and tasks keep their ids")]
    NotAResource,
    #[error("state mv cannot change a resource's kind ({from} to {to})")]
    KindChange {
        from: &'static str,
        to: &'static str,
    },
    #[error("{to}: {name:?} is not a valid name (letters, digits, '-', '_' and '.', not starting with '.')")]
    InvalidName { to: String, name: String },
    #[error("{to} is already in the state: remove it first (gpushare state rm {to})")]
    Exists { to: String },
}

impl Addr {
    pub fn parse(s: &str) -> Result<Addr, StateOpError> {
        match s.split_once('.') {
            Some(("host", id)) if !id.is_empty() => Ok(Addr::Host(id.to_string())),
            Some(("task", id)) if !id.is_empty() => Ok(Addr::Task(id.to_string())),
            _ => s
                .parse()
                .map(Addr::Resource)
                .map_err(|message| StateOpError::BadAddr { message }),
        }
    }
}

/// The error for an address the state does not hold, listing what it does hold.
pub fn unknown(addr: &str, state: &StoreState) -> StateOpError {
    let mut known: Vec<String> = state.resources.keys().map(ToString::to_string).collect();
    known.extend(state.hosts.keys().map(|h| format!("host.{h}")));
    known.extend(state.tasks.keys().map(|t| format!("task.{t}")));
    let held = if known.is_empty() {
        "the state is empty".to_string()
    } else {
        format!("the state holds: {}", known.join(", "))
    };
    StateOpError::Unknown {
        addr: addr.to_string(),
        held,
    }
}

/// `state rm ADDR` on `state`: what was removed (one line each). A service or job
/// takes its tasks with it, a host its tasks; a pool with hosts is refused.
pub fn remove(state: &mut StoreState, addr: &str) -> Result<Vec<String>, StateOpError> {
    let mut removed = vec![];
    let tasks = match Addr::parse(addr)? {
        Addr::Resource(a) => {
            if !state.resources.contains_key(&a) {
                return Err(unknown(addr, state));
            }
            let tasks = resource_tasks(state, &a, addr)?;
            state.resources.remove(&a);
            removed.push(a.to_string());
            tasks
        }
        Addr::Host(id) => {
            if state.hosts.remove(&id).is_none() {
                return Err(unknown(addr, state));
            }
            removed.push(format!("host.{id}"));
            let mut by_host = state.tasks_by_host(|t| t.host == id);
            by_host
                .remove(id.as_str())
                .unwrap_or_default()
                .into_iter()
                .map(|t| t.id.clone())
                .collect()
        }
        Addr::Task(id) => {
            if state.tasks.remove(&id).is_none() {
                return Err(unknown(addr, state));
            }
            removed.push(format!("task.{id}"));
            vec![]
        }
    };
    // What went with it first, as the command prints it.
    let mut out: Vec<String> = tasks
        .into_iter()
        .filter(|t| state.tasks.remove(t).is_some())
        .map(|t| format!("task.{t}"))
        .collect();
    out.extend(removed);
    Ok(out)
}

/// The tasks that go with resource `a` (a service's or a job's); a pool that still
/// has hosts is refused.
fn resource_tasks(
    state: &StoreState,
    a: &ResourceAddr,
    addr: &str,
) -> Result<Vec<String>, StateOpError> {
    match a.kind {
        ResourceKind::CapacityProvider => {
            let hosts: Vec<String> = state
                .hosts
                .values()
                .filter(|h| h.capacity_provider == a.name)
                .map(|h| format!("host.{}", h.id))
                .collect();
            if hosts.is_empty() {
                Ok(vec![])
            } else {
                Err(StateOpError::PoolHasHosts {
                    addr: addr.to_string(),
                    hosts: hosts.join(", "),
                })
            }
        }
        ResourceKind::Service | ResourceKind::Job => {
            let job = a.kind == ResourceKind::Job;
            Ok(state
                .tasks
                .values()
                .filter(|t| t.service == a.name && t.job.is_some() == job)
                .map(|t| t.id.clone())
                .collect())
        }
        ResourceKind::GpuInstance | ResourceKind::TaskDefinition => Ok(vec![]),
    }
}

/// `state mv FROM TO` on `state`: rename a resource; what follows it is renamed too
/// (a pool's hosts, a service's tasks, a gpu_instance's host, a task definition's
/// revisions and tasks) and so are other recorded resources' references to it.
pub fn rename(state: &mut StoreState, from: &str, to: &str) -> Result<(), StateOpError> {
    let (Addr::Resource(a), Addr::Resource(b)) = (Addr::parse(from)?, Addr::parse(to)?) else {
        return Err(StateOpError::NotAResource);
    };
    if a.kind != b.kind {
        return Err(StateOpError::KindChange {
            from: a.kind.as_str(),
            to: b.kind.as_str(),
        });
    }
    if !gpushare_core::ids::valid_id(&b.name) {
        return Err(StateOpError::InvalidName {
            to: to.to_string(),
            name: b.name,
        });
    }
    if state.resources.contains_key(&b) {
        return Err(StateOpError::Exists { to: to.to_string() });
    }
    let r = state
        .resources
        .remove(&a)
        .ok_or_else(|| unknown(from, state))?;
    follow(state, &a, &b.name);
    state.resources.insert(
        b,
        AppliedResource {
            attrs: r.attrs,
            deployment: r.deployment,
            scaling: r.scaling,
            job: r.job,
            one_off: r.one_off,
        },
    );
    Ok(())
}

/// What follows resource `a` renamed to `to`: its hosts, tasks and revisions, and the
/// other resources' references to it.
fn follow(state: &mut StoreState, a: &ResourceAddr, to: &str) {
    let reference = |attrs: &mut serde_json::Value, key: &str| {
        if attrs.get(key).and_then(|v| v.as_str()) == Some(a.name.as_str()) {
            attrs[key] = serde_json::Value::String(to.to_string());
        }
    };
    match a.kind {
        ResourceKind::CapacityProvider => {
            for h in state
                .hosts
                .values_mut()
                .filter(|h| h.capacity_provider == a.name)
            {
                h.capacity_provider = to.to_string();
            }
            for (addr, other) in state.resources.iter_mut() {
                if matches!(
                    addr.kind,
                    ResourceKind::Service | ResourceKind::GpuInstance | ResourceKind::Job
                ) {
                    reference(&mut other.attrs, "capacity_provider");
                }
            }
        }
        ResourceKind::Service => {
            for t in state
                .tasks
                .values_mut()
                .filter(|t| t.service == a.name && t.job.is_none())
            {
                t.service = to.to_string();
            }
        }
        ResourceKind::Job => {
            for t in state.tasks.values_mut() {
                if let Some(run) = t.job.as_mut().filter(|r| r.job == a.name) {
                    run.job = to.to_string();
                    t.service = to.to_string();
                }
            }
        }
        ResourceKind::GpuInstance => {
            for h in state
                .hosts
                .values_mut()
                .filter(|h| h.gpu_instance.as_deref() == Some(a.name.as_str()))
            {
                h.gpu_instance = Some(to.to_string());
            }
        }
        ResourceKind::TaskDefinition => {
            if let Some(mut revs) = state.revisions.remove(&a.name) {
                for r in &mut revs {
                    r.family = to.to_string();
                }
                state.revisions.insert(to.to_string(), revs);
            }
            for t in state.tasks.values_mut().filter(|t| t.family == a.name) {
                t.family = to.to_string();
            }
            for (addr, other) in state.resources.iter_mut() {
                if matches!(addr.kind, ResourceKind::Service | ResourceKind::Job) {
                    reference(&mut other.attrs, "task_definition");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpushare_core::model::{HostState, Task, TaskGpu, TaskShape, TaskState};
    use gpushare_testkit::model::host;

    fn state() -> StoreState {
        let mut s = StoreState::default();
        let res = |s: &mut StoreState, a: &str, attrs: serde_json::Value| {
            s.resources
                .insert(a.parse().expect("addr"), AppliedResource::new(attrs));
        };
        res(
            &mut s,
            "capacity_provider.l4",
            serde_json::json!({"instance_type": "g6.xlarge"}),
        );
        res(
            &mut s,
            "task_definition.emb",
            serde_json::json!({"containers": []}),
        );
        res(
            &mut s,
            "service.emb",
            serde_json::json!({"task_definition": "emb", "capacity_provider": "l4"}),
        );
        let h = host("h-1")
            .pool("l4")
            .instance_type("g6.xlarge")
            .instance_id("i-1")
            .state(HostState::Running)
            .build();
        s.hosts.insert("h-1".into(), h);
        s.tasks.insert(
            "t-1".into(),
            Task {
                ports: Vec::new(),
                id: "t-1".into(),
                service: "emb".into(),
                family: "emb".into(),
                revision: 1,
                host: "h-1".into(),
                gpus: vec![0],
                shape: TaskShape {
                    cpu_units: 0,
                    memory_mib: 0,
                    gpu: TaskGpu::None,
                },
                state: TaskState::Running,
                job: None,
                scrape: None,
            },
        );
        s
    }

    #[test]
    fn rm_refuses_unknown_addresses_and_pools_with_hosts() {
        let mut s = state();
        let e = remove(&mut s, "service.nope").expect_err("unknown");
        assert!(
            e.to_string().contains("no service.nope in the state"),
            "{e}"
        );
        assert!(
            e.to_string().contains("host.h-1"),
            "lists what is there: {e}"
        );
        let e = remove(&mut s, "capacity_provider.l4").expect_err("has hosts");
        assert!(
            matches!(&e, StateOpError::PoolHasHosts { hosts, .. } if hosts == "host.h-1"),
            "{e}"
        );
        assert!(matches!(
            remove(&mut s, "bogus"),
            Err(StateOpError::BadAddr { .. })
        ));
        assert_eq!(s, state(), "nothing changed");
        assert_eq!(
            remove(&mut s, "host.h-1").expect("rm"),
            ["task.t-1", "host.h-1"]
        );
        assert!(s.hosts.is_empty() && s.tasks.is_empty());
        assert_eq!(
            remove(&mut s, "capacity_provider.l4").expect("rm"),
            ["capacity_provider.l4"]
        );
        let mut s = state();
        assert_eq!(
            remove(&mut s, "service.emb").expect("rm"),
            ["task.t-1", "service.emb"]
        );
        assert!(s.tasks.is_empty() && s.hosts.contains_key("h-1"));
    }

    #[test]
    fn mv_renames_what_follows_and_references() {
        let mut s = state();
        rename(&mut s, "capacity_provider.l4", "capacity_provider.l4b").expect("mv");
        assert_eq!(s.hosts["h-1"].capacity_provider, "l4b");
        assert_eq!(
            s.resources[&"service.emb".parse().expect("a")].attrs["capacity_provider"],
            "l4b"
        );
        rename(&mut s, "service.emb", "service.embed").expect("mv");
        assert_eq!(s.tasks["t-1"].service, "embed");
        rename(&mut s, "task_definition.emb", "task_definition.e2").expect("mv");
        assert_eq!(s.tasks["t-1"].family, "e2");
        assert_eq!(
            s.resources[&"service.embed".parse().expect("a")].attrs["task_definition"],
            "e2"
        );
        for (from, to, why) in [
            ("service.nope", "service.x", "no service.nope"),
            ("service.embed", "task_definition.x", "kind"),
            (
                "task_definition.e2",
                "task_definition.e2",
                "already in the state",
            ),
            ("host.h-1", "host.h-2", "hosts and tasks keep their ids"),
            ("service.embed", "service..x", "not a valid name"),
        ] {
            let before = s.clone();
            let e = rename(&mut s, from, to).expect_err(why);
            assert!(e.to_string().contains(why), "{e}");
            assert_eq!(s, before);
        }
    }
}

//! `gpushare import capacity_provider.POOL INSTANCE_ID`: which instance may be
//! adopted (one the cluster launched, running, of this store, unknown to the state)
//! and the host record it becomes (checked against the pool).

use crate::cloud::{Cloud, CloudError};
use gpushare_core::model::{
    CloudHost, Desired, Host, HostState, ResourceAddr, ResourceKind, StoreState,
};

/// Why an instance is not imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{reason}: import takes capacity_provider.POOL INSTANCE_ID")]
    BadAddr { reason: String },
    #[error(
        "{addr} is not importable: gpushare imports running instances into a pool (capacity_provider.POOL INSTANCE_ID); \
         {kind} resources live in the configuration and are created by apply"
    )]
    NotAPool { addr: String, kind: &'static str },
    #[error("the configuration declares no {addr} (pools: {pools})")]
    UndeclaredPool { addr: String, pools: String },
    #[error("instance {instance_id} is a {instance_type}, but {addr} runs {runs}: import it into a pool of its instance type")]
    OtherType {
        instance_id: String,
        instance_type: String,
        addr: String,
        runs: String,
    },
    #[error("instance {instance_id} was launched for pool {tagged:?} (its gpushare tag), not {pool}: its agent and user data belong to that pool")]
    OtherPool {
        instance_id: String,
        tagged: String,
        pool: String,
    },
    #[error("instance type {instance_type} is not in the GPU catalogue")]
    UnknownType { instance_type: String },
    #[error("instance {instance_id} carries an invalid host id tag {host_id:?}")]
    BadHostId {
        instance_id: String,
        host_id: String,
    },
    #[error("listing the cluster's instances")]
    List(#[source] CloudError),
    #[error(
        "no instance {id} in cluster {cluster:?} on the {cloud} cloud: only instances gpushare launched for this cluster \
         (tagged with it) can be imported; an instance launched otherwise has no MPS bootstrap and no agent"
    )]
    NotInCluster {
        id: String,
        cluster: String,
        cloud: &'static str,
    },
    #[error("instance {id} belongs to another state store (store id {store_id}): not importable")]
    Foreign { id: String, store_id: String },
    #[error("instance {id} is {state:?}: only a running instance can be imported")]
    NotRunning { id: String, state: HostState },
    #[error("instance {id} is already in the state as host.{host}")]
    Known { id: String, host: String },
}

/// The instance `id` as `cloud` lists it for `cluster`: one of the cluster's, running
/// (or pending), not another store's, and unknown to `state`.
pub async fn find_instance(
    cloud: &dyn Cloud,
    cluster: &str,
    state: &StoreState,
    id: &str,
) -> Result<CloudHost, ImportError> {
    let listed = cloud.list_hosts(cluster).await.map_err(ImportError::List)?;
    let Some(inst) = listed.into_iter().find(|c| c.instance_id == id) else {
        return Err(ImportError::NotInCluster {
            id: id.to_string(),
            cluster: cluster.to_string(),
            cloud: cloud.kind(),
        });
    };
    if inst.is_foreign_to(&state.store_id) {
        return Err(ImportError::Foreign {
            id: id.to_string(),
            store_id: inst.store_id.clone().unwrap_or_default(),
        });
    }
    if !matches!(inst.state, HostState::Running | HostState::Pending) {
        return Err(ImportError::NotRunning {
            id: id.to_string(),
            state: inst.state,
        });
    }
    if let Some(h) = state
        .hosts
        .values()
        .find(|h| h.instance_id.as_deref() == Some(id) || h.id == inst.host_id)
    {
        return Err(ImportError::Known {
            id: id.to_string(),
            host: h.id.clone(),
        });
    }
    Ok(inst)
}

/// The host record `instance` becomes in pool `addr` (`capacity_provider.POOL`),
/// checked against the pool as `desired` declares it: its instance types, the pool
/// the instance was launched for, the catalogue and the host id tag.
pub fn imported_host(
    desired: &Desired,
    addr: &str,
    instance: &CloudHost,
) -> Result<Host, ImportError> {
    let a: ResourceAddr = addr
        .parse()
        .map_err(|reason| ImportError::BadAddr { reason })?;
    if a.kind != ResourceKind::CapacityProvider {
        return Err(ImportError::NotAPool {
            addr: addr.to_string(),
            kind: a.kind.as_str(),
        });
    }
    let Some(pool) = desired.capacity_providers.get(&a.name) else {
        return Err(ImportError::UndeclaredPool {
            addr: addr.to_string(),
            pools: (desired.capacity_providers.keys().cloned())
                .collect::<Vec<_>>()
                .join(", "),
        });
    };
    if !pool.allows_type(&instance.instance_type) {
        return Err(ImportError::OtherType {
            instance_id: instance.instance_id.clone(),
            instance_type: instance.instance_type.clone(),
            addr: addr.to_string(),
            runs: pool.launch_types().collect::<Vec<_>>().join(" or "),
        });
    }
    if !instance.capacity_provider.is_empty() && instance.capacity_provider != a.name {
        return Err(ImportError::OtherPool {
            instance_id: instance.instance_id.clone(),
            tagged: instance.capacity_provider.clone(),
            pool: a.name.clone(),
        });
    }
    let Some(it) = gpushare_core::catalog::lookup(&instance.instance_type) else {
        return Err(ImportError::UnknownType {
            instance_type: instance.instance_type.clone(),
        });
    };
    if !gpushare_core::ids::valid_id(&instance.host_id) {
        return Err(ImportError::BadHostId {
            instance_id: instance.instance_id.clone(),
            host_id: instance.host_id.clone(),
        });
    }
    let mut host = Host::imported(
        &instance.host_id,
        &instance.instance_id,
        &a.name,
        pool,
        it,
        instance.state,
    );
    host.zone = instance.zone.clone();
    host.launch_token = instance.launch_token.clone();
    Ok(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(instance_type: &str, pool: &str, host_id: &str) -> CloudHost {
        CloudHost {
            instance_id: "i-1".into(),
            host_id: host_id.into(),
            capacity_provider: pool.into(),
            instance_type: instance_type.into(),
            zone: Some("us-east-1a".into()),
            state: HostState::Running,
            launch_token: "tok".into(),
            store_id: None,
        }
    }

    #[test]
    fn an_instance_becomes_a_host_of_its_pool_and_every_misfit_is_named() {
        let d = gpushare_testkit::plan::quickstart(1);
        let ok = imported_host(
            &d,
            "capacity_provider.l4",
            &instance("g6.12xlarge", "l4", "h-7"),
        )
        .expect("imported");
        assert_eq!(
            (
                ok.id.as_str(),
                ok.instance_id.as_deref(),
                ok.capacity_provider.as_str()
            ),
            ("h-7", Some("i-1"), "l4")
        );
        assert_eq!(ok.zone.as_deref(), Some("us-east-1a"));
        let refused = |addr: &str, i: CloudHost| {
            imported_host(&d, addr, &i)
                .expect_err("refused")
                .to_string()
        };
        let cases = [
            (
                "service.embedder",
                instance("g6.12xlarge", "l4", "h-7"),
                "is not importable",
            ),
            (
                "capacity_provider.nope",
                instance("g6.12xlarge", "l4", "h-7"),
                "declares no capacity_provider.nope",
            ),
            (
                "capacity_provider.l4",
                instance("g5.xlarge", "", "h-7"),
                "import it into a pool of its instance type",
            ),
            (
                "capacity_provider.l4",
                instance("g6.12xlarge", "a10g", "h-7"),
                "was launched for pool \"a10g\"",
            ),
            (
                "capacity_provider.l4",
                instance("g6.12xlarge", "l4", "bad id!"),
                "invalid host id tag",
            ),
            (
                "nonsense",
                instance("g6.12xlarge", "l4", "h-7"),
                "import takes capacity_provider.POOL",
            ),
        ];
        for (addr, i, says) in cases {
            let e = refused(addr, i);
            assert!(e.contains(says), "{addr}: {e}");
        }
    }
}

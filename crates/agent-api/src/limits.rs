//! The agent API's connection budget (issue 46): a connection that shows no host
//! certificate (a join, or anyone) holds one of a few anonymous slots, at most a
//! share of them per address, for a bounded time; a host's own connections hold host
//! slots. So idle connections from anywhere cannot exhaust the controller's file
//! descriptors, and one address cannot take every join slot.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The limits, fixed when the server starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Connections at once that show no host certificate (joins, and anyone else).
    pub anonymous: usize,
    /// Of those, from one address.
    pub anonymous_per_address: usize,
    /// How long a connection without a host certificate may stay open (a join is one
    /// short call).
    pub anonymous_lifetime: Duration,
    /// Connections at once of hosts (with a certificate the cluster's CA signed).
    pub hosts: usize,
    /// Streams at once on one connection.
    pub streams_per_connection: u32,
}

impl Default for ConnLimits {
    fn default() -> ConnLimits {
        ConnLimits {
            anonymous: 256,
            anonymous_per_address: 64,
            anonymous_lifetime: Duration::from_secs(30),
            hosts: 16_384,
            streams_per_connection: 32,
        }
    }
}

/// The slots, shared by the accept loop.
#[derive(Clone)]
pub(crate) struct Gate {
    limits: ConnLimits,
    anonymous: Arc<Semaphore>,
    hosts: Arc<Semaphore>,
    per_address: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// A slot held for as long as its connection lives.
pub(crate) enum Slot {
    Anonymous {
        _permit: OwnedSemaphorePermit,
        _address: AddressSlot,
    },
    Host {
        _permit: OwnedSemaphorePermit,
    },
}

/// One anonymous connection counted against its address.
pub(crate) struct AddressSlot {
    ip: IpAddr,
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut counts = gpushare_core::util::lock(&self.counts);
        if let Some(n) = counts.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

impl Gate {
    pub(crate) fn new(limits: ConnLimits) -> Gate {
        Gate {
            limits,
            anonymous: Arc::new(Semaphore::new(limits.anonymous)),
            hosts: Arc::new(Semaphore::new(limits.hosts)),
            per_address: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    pub(crate) fn limits(&self) -> ConnLimits {
        self.limits
    }

    /// An anonymous slot for a new connection from `ip` (held through its TLS
    /// handshake), or why there is none.
    pub(crate) fn anonymous(&self, ip: IpAddr) -> Result<Slot, &'static str> {
        let address = {
            let mut counts = gpushare_core::util::lock(&self.per_address);
            let n = counts.entry(ip).or_insert(0);
            if *n >= self.limits.anonymous_per_address {
                return Err("too many connections without a host certificate from this address");
            }
            *n += 1;
            AddressSlot {
                ip,
                counts: Arc::clone(&self.per_address),
            }
        };
        let permit = Arc::clone(&self.anonymous)
            .try_acquire_owned()
            .map_err(|_| "too many connections without a host certificate")?;
        Ok(Slot::Anonymous {
            _permit: permit,
            _address: address,
        })
    }

    /// A host slot for a connection that showed a host certificate (its anonymous
    /// slot is given back), or why there is none.
    pub(crate) fn host(&self) -> Result<Slot, &'static str> {
        Arc::clone(&self.hosts)
            .try_acquire_owned()
            .map(|p| Slot::Host { _permit: p })
            .map_err(|_| "too many host connections")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_slots_are_bounded_in_all_and_per_address_and_come_back() {
        let gate = Gate::new(ConnLimits {
            anonymous: 3,
            anonymous_per_address: 2,
            ..ConnLimits::default()
        });
        let a: IpAddr = "127.0.0.1".parse().expect("ip");
        let b: IpAddr = "127.0.0.2".parse().expect("ip");
        let first = gate.anonymous(a).expect("a 1");
        let _second = gate.anonymous(a).expect("a 2");
        assert!(gate.anonymous(a).is_err(), "a third from one address");
        let _third = gate.anonymous(b).expect("b 1");
        assert!(gate.anonymous(b).is_err(), "none left at all");
        drop(first);
        assert!(
            gate.anonymous(a).is_ok(),
            "a slot comes back when its connection ends"
        );
    }
}

//! The checks of registered pools (`capacity_provider { hosts = "registered" }`):
//! hosts that join by themselves, so the launch settings have no meaning there, and
//! the settings only a launched pool needs.

use super::Validator;
use gpushare_core::model::CapacityProvider;

/// The attributes a launched pool needs that the schema cannot require, since a
/// registered pool goes without them.
pub(crate) const LAUNCHED_REQUIRES: [&str; 2] = ["instance_type", "max_size"];

/// Which of [`LAUNCHED_REQUIRES`] a capacity provider given as JSON attributes lacks
/// (none for a registered pool).
pub(crate) fn missing_for_launched(
    attrs: &serde_json::Map<String, serde_json::Value>,
) -> Vec<&'static str> {
    if attrs.get("hosts").and_then(serde_json::Value::as_str) == Some("registered") {
        return vec![];
    }
    LAUNCHED_REQUIRES
        .into_iter()
        .filter(|a| attrs.get(*a).is_none_or(serde_json::Value::is_null))
        .collect()
}

impl Validator<'_> {
    /// A registered pool: the launch and sizing settings it may not set.
    pub(super) fn registered_pool(&mut self, addr: &str, cp: &CapacityProvider) {
        let set: [(&str, bool); 5] = [
            ("max_size", cp.max_size != 0),
            ("min_size", cp.min_size != 0),
            ("instance_types", !cp.instance_types.is_empty()),
            ("market", !cp.market.is_on_demand()),
            ("max_price", cp.max_price.is_some()),
        ];
        for (attr, _) in set.into_iter().filter(|(_, on)| *on) {
            self.error(
                &format!("{addr}.{attr}"),
                format!("{addr} is a registered pool: `{attr}` has no meaning there"),
                Some("a registered pool's hosts join by themselves (hosts = \"registered\"): gpushare never launches one, and the pool is as large as the hosts that joined".into()),
                Some(format!("remove `{attr}`, or make the pool a launched one (hosts = \"launched\")")),
            );
        }
        if !cp.instance_type.is_empty() && !gpushare_core::ids::valid_id(&cp.instance_type) {
            self.error(
                &format!("{addr}.instance_type"),
                format!("the instance_type filter of {addr} is not a valid name"),
                Some("in a registered pool, instance_type is a filter: only hosts that join giving this instance type are taken".into()),
                Some("use letters, digits, '-', '_' and '.', e.g. g5.xlarge".into()),
            );
        }
        for (name, gi) in &self.d.gpu_instances {
            if gi.capacity_provider == addr.trim_start_matches("capacity_provider.") {
                self.error(
                    &format!("gpu_instance.{name}.capacity_provider"),
                    format!("gpu_instance.{name} is in {addr}, a registered pool"),
                    Some("gpushare launches a gpu_instance's host; a registered pool only has the hosts that joined it".into()),
                    Some("pin the host in a launched pool, or let it join the registered pool".into()),
                );
            }
        }
    }

    /// A launched pool: `instance_type` given, `host_hourly_cost` not.
    pub(super) fn launched_pool(&mut self, addr: &str, cp: &CapacityProvider) {
        if cp.instance_type.is_empty() {
            self.error(
                &format!("{addr}.instance_type"),
                format!("{addr} needs an instance_type"),
                Some("a launched pool's hosts are launched with it".into()),
                Some("set instance_type, or make the pool one of your own hosts (hosts = \"registered\")".into()),
            );
        } else {
            self.instance_type(&format!("{addr}.instance_type"), &cp.instance_type);
        }
        if cp.host_hourly_cost.is_some() {
            self.error(
                &format!("{addr}.host_hourly_cost"),
                format!("{addr} is a launched pool: `host_hourly_cost` is for registered pools"),
                Some("a launched pool's hosts are priced from the instance catalogue".into()),
                Some("remove `host_hourly_cost`".into()),
            );
        }
    }
}

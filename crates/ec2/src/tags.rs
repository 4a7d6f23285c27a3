//! The tags gpushare puts on every instance and volume it launches.

use std::collections::BTreeMap;

pub const CLUSTER: &str = "gpushare:cluster";
pub const POOL: &str = "gpushare:pool";
pub const HOST_ID: &str = "gpushare:host-id";
pub const LAUNCH_TOKEN: &str = "gpushare:launch-token";
pub const MANAGED_BY: &str = "gpushare:managed-by";
/// The launching state store's identity (`StoreState::store_id`): an instance whose
/// tag differs from a store's id is never adopted, retired or terminated by it.
pub const STORE_ID: &str = "gpushare:store-id";
/// Value of [`MANAGED_BY`].
pub const MANAGER: &str = "gpushare";
/// Prefix reserved for gpushare's own tags.
pub const PREFIX: &str = "gpushare:";

/// `specific`'s tags over `defaults`' (the `gpushare { default_tags }` under a
/// pool's `tags`): the more specific wins on a key.
pub fn layered(
    defaults: &BTreeMap<String, String>,
    specific: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut tags = defaults.clone();
    tags.extend(specific.iter().map(|(k, v)| (k.clone(), v.clone())));
    tags
}

/// The tags of one launched host: the pool's own tags, then gpushare's (which win).
/// [`STORE_ID`] is set when `store_id` is not empty.
pub fn for_host(
    cluster: &str,
    store_id: &str,
    pool_name: &str,
    host_id: &str,
    launch_token: &str,
    pool_tags: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut tags: BTreeMap<String, String> = pool_tags
        .iter()
        .filter(|(k, _)| !k.starts_with(PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    tags.entry("Name".into())
        .or_insert_with(|| format!("gpushare-{cluster}-{host_id}"));
    tags.insert(CLUSTER.into(), cluster.into());
    tags.insert(POOL.into(), pool_name.into());
    tags.insert(HOST_ID.into(), host_id.into());
    tags.insert(LAUNCH_TOKEN.into(), launch_token.into());
    tags.insert(MANAGED_BY.into(), MANAGER.into());
    if !store_id.is_empty() {
        tags.insert(STORE_ID.into(), store_id.into());
    }
    tags
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_tags_win_over_default_tags() {
        let m = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let defaults = m(&[("team", "platform"), ("cost-center", "42")]);
        let pool = m(&[("team", "ml")]);
        assert_eq!(
            layered(&defaults, &pool),
            m(&[("team", "ml"), ("cost-center", "42")])
        );
        let t = for_host("prod", "", "l4", "h-1", "tok", &layered(&defaults, &pool));
        assert_eq!(
            (t["team"].as_str(), t["cost-center"].as_str()),
            ("ml", "42")
        );
    }

    #[test]
    fn gpushare_tags_win_over_pool_tags() {
        let pool: BTreeMap<String, String> = [
            ("team", "ml"),
            ("gpushare:cluster", "forged"),
            ("gpushare:store-id", "forged"),
            ("Name", "mine"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let t = for_host("prod", "0123456789abcdef", "l4", "h-1", "tok", &pool);
        assert_eq!(t[STORE_ID], "0123456789abcdef");
        assert_eq!(t[CLUSTER], "prod");
        assert_eq!(t[POOL], "l4");
        assert_eq!(t[HOST_ID], "h-1");
        assert_eq!(t[LAUNCH_TOKEN], "tok");
        assert_eq!(t[MANAGED_BY], "gpushare");
        assert_eq!(t["team"], "ml");
        assert_eq!(t["Name"], "mine");
        let bare = for_host("prod", "", "l4", "h-1", "tok", &BTreeMap::new());
        assert_eq!(bare["Name"], "gpushare-prod-h-1");
        assert!(
            !bare.contains_key(STORE_ID),
            "no identity, no tag (and a pool cannot forge one)"
        );
    }
}

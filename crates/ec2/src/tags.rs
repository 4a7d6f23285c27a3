//! The tags gpushare puts on every instance and volume it launches.

use std::collections::BTreeMap;

pub const CLUSTER: &str = "gpushare:cluster";
pub const POOL: &str = "gpushare:pool";
pub const HOST_ID: &str = "gpushare:host-id";
pub const LAUNCH_TOKEN: &str = "gpushare:launch-token";
pub const MANAGED_BY: &str = "gpushare:managed-by";
/// Value of [`MANAGED_BY`].
pub const MANAGER: &str = "gpushare";
/// Prefix reserved for gpushare's own tags.
pub const PREFIX: &str = "gpushare:";

/// The tags of one launched host: the pool's own tags, then gpushare's (which win).
pub fn for_host(
    cluster: &str,
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
    tags
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpushare_tags_win_over_pool_tags() {
        let pool: BTreeMap<String, String> = [
            ("team", "ml"),
            ("gpushare:cluster", "forged"),
            ("Name", "mine"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let t = for_host("prod", "l4", "h-1", "tok", &pool);
        assert_eq!(t[CLUSTER], "prod");
        assert_eq!(t[POOL], "l4");
        assert_eq!(t[HOST_ID], "h-1");
        assert_eq!(t[LAUNCH_TOKEN], "tok");
        assert_eq!(t[MANAGED_BY], "gpushare");
        assert_eq!(t["team"], "ml");
        assert_eq!(t["Name"], "mine");
        let bare = for_host("prod", "l4", "h-1", "tok", &BTreeMap::new());
        assert_eq!(bare["Name"], "gpushare-prod-h-1");
    }
}

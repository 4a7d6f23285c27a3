//! `gpushare iam-policy`: the IAM policies of the ec2 cloud, as docs/ec2-iam.md shows them.

/// Print the operator's policy for `cluster`, or the hosts' (`host`), with the ARNs of
/// `region`'s partition (the commercial one without a region).
#[cfg(feature = "ec2")]
pub fn print(cluster: &str, host: bool, region: Option<&str>) -> anyhow::Result<u8> {
    use gpushare_ec2::iam;
    use gpushare_ec2::partition::Partition;
    if let Some(r) = region.filter(|r| {
        r.is_empty()
            || !r
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    }) {
        anyhow::bail!(
            "invalid --region {r:?}: a region name such as us-east-1, us-gov-west-1 or cn-north-1"
        );
    }
    let partition = region.map_or(Partition::Aws, Partition::of_region);
    if !host {
        // The same rule as the settings' `cluster`.
        let ok = cluster.len() <= 63
            && cluster
                .chars()
                .enumerate()
                .all(|(i, c)| c.is_ascii_alphanumeric() || (i > 0 && (c == '_' || c == '-')))
            && !cluster.is_empty();
        if !ok {
            anyhow::bail!("invalid --cluster {cluster:?}: letters, digits, '_' and '-', starting with a letter or digit, at most 63");
        }
    }
    let policy = if host {
        iam::host_policy()
    } else {
        iam::operator_policy(cluster, partition)
    };
    print!("{}", iam::render(&policy));
    Ok(0)
}

#[cfg(not(feature = "ec2"))]
pub fn print(_cluster: &str, _host: bool, _region: Option<&str>) -> anyhow::Result<u8> {
    anyhow::bail!("this gpushare was built without the ec2 cloud (feature `ec2`)")
}

//! `gpushare iam-policy` prints well-formed IAM policies, and docs/ec2-iam.md shows
//! exactly what it prints (`UPDATE_DOCS=1` rewrites the docs' JSON blocks).

use gpushare_tests::{gp, workspace_root};
use serde_json::Value;

/// The commands whose output the docs show, in the order of their ```json blocks.
const SHOWN: &[&[&str]] = &[
    &["iam-policy", "--cluster", "inference"],
    &["iam-policy", "--host"],
];

fn output(args: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = gp(dir.path(), args).run();
    run.expect_code(0);
    run.stdout
}

/// (start, end) byte ranges of the bodies of the ```json blocks of `doc`.
fn json_blocks(doc: &str) -> Vec<(usize, usize)> {
    let mut out = vec![];
    let mut at = 0;
    while let Some(open) = doc[at..].find("```json\n") {
        let start = at + open + "```json\n".len();
        let Some(close) = doc[start..].find("```") else {
            break;
        };
        out.push((start, start + close));
        at = start + close + 3;
    }
    out
}

/// A structural check of an IAM policy document (JSON-schema-like): Version, and a
/// non-empty Statement list whose entries have Effect, Action and Resource.
fn check_policy(text: &str) -> Value {
    let doc: Value = serde_json::from_str(text).expect("the policy is JSON");
    assert_eq!(doc["Version"], "2012-10-17", "{doc:#}");
    let statements = doc["Statement"].as_array().expect("Statement is a list");
    assert!(!statements.is_empty());
    let strings = |v: &Value| match v {
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => {
            !a.is_empty() && a.iter().all(|x| x.as_str().is_some_and(|s| !s.is_empty()))
        }
        _ => false,
    };
    for st in statements {
        let obj = st.as_object().expect("a statement is an object");
        for key in obj.keys() {
            assert!(
                ["Sid", "Effect", "Action", "Resource", "Condition"].contains(&key.as_str()),
                "unexpected key {key} in {st}"
            );
        }
        assert!(
            matches!(st["Effect"].as_str(), Some("Allow" | "Deny")),
            "{st}"
        );
        assert!(strings(&st["Action"]), "Action of {st}");
        assert!(strings(&st["Resource"]), "Resource of {st}");
        if let Some(c) = st.get("Condition") {
            let c = c.as_object().expect("Condition is an object");
            for (op, kv) in c {
                assert!(kv.is_object(), "{op} of {st}");
            }
        }
    }
    doc
}

#[test]
fn iam_policy_prints_well_formed_policies_and_the_docs_show_them() {
    let outputs: Vec<String> = SHOWN.iter().map(|a| output(a)).collect();
    let op = check_policy(&outputs[0]);
    check_policy(&outputs[1]);
    // TerminateInstances and CreateTags only on resources of the cluster.
    for st in op["Statement"].as_array().into_iter().flatten() {
        let action = st["Action"].to_string();
        if action.contains("ec2:TerminateInstances") || action.contains("ec2:CreateTags") {
            let cond = st["Condition"].to_string();
            assert!(
                cond.contains("gpushare:cluster") && cond.contains("inference"),
                "{st}"
            );
        }
    }

    let path = workspace_root().join("docs/ec2-iam.md");
    let doc = std::fs::read_to_string(&path).expect("docs/ec2-iam.md");
    let blocks = json_blocks(&doc);
    assert_eq!(
        blocks.len(),
        SHOWN.len(),
        "one ```json block per command in {}",
        path.display()
    );
    if std::env::var_os("UPDATE_DOCS").is_some() {
        let mut new = doc.clone();
        for ((start, end), out) in blocks.iter().zip(&outputs).rev() {
            new.replace_range(start..end, out);
        }
        std::fs::write(&path, new).expect("write docs");
        return;
    }
    for ((start, end), (out, args)) in blocks.iter().zip(outputs.iter().zip(SHOWN)) {
        assert_eq!(
            &doc[*start..*end],
            out.as_str(),
            "docs/ec2-iam.md differs from `gpushare {}` (UPDATE_DOCS=1 rewrites it)",
            args.join(" ")
        );
    }
}

#[test]
fn iam_policy_refuses_a_bad_cluster_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = gp(dir.path(), &["iam-policy", "--cluster", "no spaces"]).run();
    assert_ne!(run.code, 0);
    assert!(run.stderr.contains("invalid --cluster"), "{}", run.stderr);
}

/// `iam-policy --region` for a GovCloud and a China region prints only ARNs of that
/// partition (a commercial policy grants nothing there), and the China partition's
/// EC2 service principal.
#[test]
fn iam_policy_for_govcloud_and_china_names_only_their_partition() {
    for (region, partition) in [
        ("us-gov-west-1", "aws-us-gov"),
        ("cn-northwest-1", "aws-cn"),
        ("eu-west-1", "aws"),
    ] {
        let text = output(&["iam-policy", "--cluster", "inference", "--region", region]);
        check_policy(&text);
        let arns: Vec<&str> = text.split('"').filter(|s| s.starts_with("arn:")).collect();
        assert!(!arns.is_empty(), "{text}");
        for arn in &arns {
            assert_eq!(arn.split(':').nth(1), Some(partition), "{region}: {arn}");
        }
        let principal = if partition == "aws-cn" {
            "\"ec2.amazonaws.com.cn\""
        } else {
            "\"ec2.amazonaws.com\""
        };
        assert!(text.contains(principal), "{region}: {text}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let run = gp(dir.path(), &["iam-policy", "--region", "US East"]).run();
    assert_ne!(run.code, 0);
    assert!(run.stderr.contains("invalid --region"), "{}", run.stderr);
}

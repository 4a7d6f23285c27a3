//! The generated documentation: `docs/resources/<kind>.md`, `docs/index.md` and the
//! registry layout's example files, all from the schemas (checked by `committed_docs`).

use super::{provider_schema, schema, Attribute, Block, Nesting};
use crate::model::ResourceKind;
use std::fmt::Write as _;

/// The first sentence of a description, without its full stop (doc front matter).
pub fn first_sentence(description: &str) -> &str {
    description
        .split(". ")
        .next()
        .unwrap_or(description)
        .trim_end_matches('.')
}

/// `docs/resources/<kind>.md`, in the terraform-provider-aws layout.
pub fn render_docs(kind: ResourceKind) -> String {
    let s = schema(kind);
    let tf = kind.terraform_type();
    let mut out = String::new();
    let first_sentence = first_sentence(&s.description);
    let _ = writeln!(out, "---");
    let _ = writeln!(out, "subcategory: \"gpushare\"");
    let _ = writeln!(out, "page_title: \"gpushare: {tf}\"");
    let _ = writeln!(out, "description: |-");
    let _ = writeln!(out, "  {first_sentence}.");
    let _ = writeln!(out, "---");
    let _ = writeln!(out);
    let _ = writeln!(out, "<!-- Generated from schemas/{}.json by gpushare_core::schema::render_docs; do not edit. -->", s.kind);
    let _ = writeln!(out);
    let _ = writeln!(out, "# Resource: {tf}");
    let _ = writeln!(out);
    let _ = writeln!(out, "{}", s.description);
    let _ = writeln!(out);
    let _ = writeln!(out, "## Example Usage");
    let _ = writeln!(out);
    let _ = writeln!(out, "### gpushare HCL");
    let _ = writeln!(out);
    let _ = writeln!(out, "```hcl\n{}```", ensure_newline(&s.example));
    let _ = writeln!(out);
    let _ = writeln!(out, "### Terraform");
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "```terraform\n{}```",
        ensure_newline(&s.terraform_example)
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "## Argument Reference");
    let _ = writeln!(out);
    let required: Vec<&Attribute> = s.attributes.iter().filter(|a| a.required).collect();
    let optional: Vec<&Attribute> = s
        .attributes
        .iter()
        .filter(|a| a.optional && !a.required)
        .collect();
    if !required.is_empty() {
        let _ = writeln!(out, "The following arguments are required:");
        let _ = writeln!(out);
        for a in required {
            let _ = writeln!(out, "{}", attr_line(a));
        }
        let _ = writeln!(out);
    }
    let blocks_required: Vec<&Block> = s.blocks.iter().filter(|b| b.min_items > 0).collect();
    let blocks_optional: Vec<&Block> = s.blocks.iter().filter(|b| b.min_items == 0).collect();
    for b in &blocks_required {
        let _ = writeln!(out, "{}", block_line(b));
    }
    if !blocks_required.is_empty() {
        let _ = writeln!(out);
    }
    if !optional.is_empty() || !blocks_optional.is_empty() {
        let _ = writeln!(out, "The following arguments are optional:");
        let _ = writeln!(out);
        for a in optional {
            let _ = writeln!(out, "{}", attr_line(a));
        }
        for b in &blocks_optional {
            let _ = writeln!(out, "{}", block_line(b));
        }
        let _ = writeln!(out);
    }
    let mut stack: Vec<&Block> = s.blocks.iter().collect();
    while !stack.is_empty() {
        let b = stack.remove(0);
        let _ = writeln!(out, "### {}", b.name);
        let _ = writeln!(out);
        let _ = writeln!(out, "{}", b.description);
        let _ = writeln!(out);
        if let Some(l) = &b.label {
            let _ = writeln!(out, "In gpushare HCL the block label sets `{l}`.");
            let _ = writeln!(out);
        }
        for a in b.attributes.iter().filter(|a| a.is_argument()) {
            let _ = writeln!(out, "{}", attr_line(a));
        }
        for nb in &b.blocks {
            let _ = writeln!(out, "{}", block_line(nb));
        }
        let _ = writeln!(out);
        for (i, nb) in b.blocks.iter().enumerate() {
            stack.insert(i, nb);
        }
    }
    let _ = writeln!(out, "## Attribute Reference");
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "This resource exports the following attributes in addition to the arguments above:"
    );
    let _ = writeln!(out);
    for a in s.attributes.iter().filter(|a| a.computed) {
        let _ = writeln!(out, "* `{}` - {}", a.name, a.description);
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "## Import");
    let _ = writeln!(out);
    let _ = writeln!(out, "Import a `{tf}` by its name, for example:");
    let _ = writeln!(out);
    let _ = writeln!(out, "```console");
    let _ = writeln!(out, "% terraform import {tf}.NAME NAME");
    let _ = writeln!(out, "```");
    out
}

/// `docs/index.md`: the provider's page in the registry layout (what the provider
/// is, how Terraform installs it, the provider block's arguments).
pub fn render_index() -> String {
    let s = provider_schema();
    let mut out = String::new();
    let _ = writeln!(out, "---");
    let _ = writeln!(out, "page_title: \"Provider: gpushare\"");
    let _ = writeln!(out, "description: |-");
    let _ = writeln!(
        out,
        "  Share NVIDIA GPUs between many small workloads with NVIDIA MPS: GPU hosts, task definitions and services."
    );
    let _ = writeln!(out, "---");
    let _ = writeln!(out);
    let _ = writeln!(out, "<!-- Generated from schemas/gpushare.json by gpushare_core::schema::render_index; do not edit. -->");
    let _ = writeln!(out);
    let _ = writeln!(out, "# gpushare Provider");
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "gpushare places small GPU workloads on shared NVIDIA GPUs: each task declares its GPU memory (and optionally a cap on compute) and runs as an NVIDIA MPS client on a GPU with room, on hosts gpushare launches and sizes (EC2, or a local simulated fleet). The provider manages the same resources as the `gpushare` command, with the same engine: `gpushare_capacity_provider` (a pool of GPU hosts), `gpushare_gpu_instance` (one pinned host), `gpushare_task_definition`, `gpushare_service`, `gpushare_job` (run-to-completion work) and `gpushare_join_token` (a pool token for your own servers), and the data sources `gpushare_instance_type` and `gpushare_placements`."
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "{}", s.description);
    let _ = writeln!(out);
    let _ = writeln!(out, "## Example Usage");
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "```terraform\nterraform {{\n  required_providers {{\n    gpushare = {{\n      source = \"gpushare/gpushare\"\n    }}\n  }}\n}}\n\n{}```",
        ensure_newline(&s.terraform_example)
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "## Installation");
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "The provider is not on the public registry. Build it (`cargo build --release -p terraform-provider-gpushare`) and put the binary in a filesystem mirror, in Terraform's unpacked layout:"
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "```console");
    let _ = writeln!(
        out,
        "% dir=$HOME/.terraform.d/plugins/registry.terraform.io/gpushare/gpushare/{}/linux_amd64",
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(out, "% mkdir -p $dir");
    let _ = writeln!(
        out,
        "% cp target/release/terraform-provider-gpushare $dir/terraform-provider-gpushare_v{}",
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(out, "```");
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "`~/.terraform.d/plugins` is one of Terraform's implied mirror directories; for another directory, name it in the CLI configuration (`provider_installation {{ filesystem_mirror {{ path = \"DIR\" include = [\"registry.terraform.io/gpushare/gpushare\"] }} direct {{ exclude = [\"registry.terraform.io/gpushare/gpushare\"] }} }}`). `terraform init` then installs the provider and records its checksum in `.terraform.lock.hcl`. For development, `dev_overrides` pointing at `target/debug` needs no `terraform init` (see examples/terraform/README.md)."
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "## What `terraform plan` shows");
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Besides each resource's own checks, the provider plans every change with gpushare's planner against the store and what the same run planned before it:"
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "- errors at the attribute's path when a service cannot fit its pool (an MPS share larger than the pool's GPU, more whole GPUs than the instance has, an unknown pool or task definition);"
    );
    let _ = writeln!(
        out,
        "- a `Task not placed` warning at `desired_count` for tasks no host of the pool can take (the pool's `max_size` reached);"
    );
    let _ = writeln!(
        out,
        "- a `Fleet change after <resource>` warning: hosts to launch and retire, tasks to place, move and stop, the cost per hour now and after (priced as `gpushare plan` prices them: on EC2 the region's On-Demand prices from the AWS Price List API and the current Spot prices where AWS gives them, else the built-in us-east-1 table, and the line names which; see \"Where the prices come from\" in the README), and the hosts and tasks with where they land (host, GPU). Terraform plans independent resources in parallel; the provider checks them one at a time, each counting its resource's change with every change the run planned before it, so the run's last warning about a pool counts the whole run and gives the same cost, saving, right-sizing hints and placements as `gpushare plan` over the same files (provider/tests/terraform.rs checks this on examples/terraform). A run warns the first time it changes a pool, and again only for a change that launches or retires hosts, moves or stops tasks, or changes the cost text (cost, saving, hints): a task placed on a host the run had planned anyway without changing those adds no warning of its own (each warning Terraform renders costs about 5 ms; 60 of them doubled a plan of 100 resources). `terraform plan -destroy` warns the same way about what removing each resource stops and retires (the provider asks Terraform for destroy plans)."
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "The rule for exact values: placements, host ids and pool sizes stay `(known after apply)` in the plan. gpushare's planner fixes them, but Terraform applies independent resources in parallel, in an order the provider cannot know at plan time, and each apply runs the engine over what the store holds then; two services on one pool placed in either order land differently, and Terraform refuses an apply whose result differs from a known planned value. So the plan's values hold only what is certain (configured arguments, `id`), and the `Fleet change` warning lists where gpushare would put every host and task now (the `Hosts` and `Tasks` lines `gpushare plan` prints, up to 40 lines). For an exact, reviewable plan of the whole fleet, `gpushare plan -out=FILE` and `gpushare apply FILE` carry out exactly what was shown. Each pool's `hourly_cost` is refreshed from the store, priced as the provider's last plan in that run priced (on EC2 the region's prices, as the warnings; a refresh before any plan keeps the last value)."
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "## What `terraform apply` does");
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Each resource Terraform applies is carried out by gpushare's engine as `gpushare apply` carries out a run (observe, plan, apply the steps with their journal, commit). Terraform applies up to `-parallelism` (10) independent resources at once; the changes that arrive while an engine pass runs are carried out together by the next pass, so applying many resources takes about one pass per wave of Terraform's graph, not one per resource. A `Task not placed` warning is shown on its service when that service is in the pass, otherwise on the first resource of the pass. A joint pass that fails is run again one change at a time, so an error is shown on the resource that caused it."
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "## Argument Reference");
    let _ = writeln!(out);
    let _ = writeln!(out, "Every argument is optional:");
    let _ = writeln!(out);
    for a in &s.attributes {
        let _ = writeln!(out, "{}", attr_line(a));
    }
    out
}

/// The registry layout's example files, as paths under `examples/` with their text:
/// `provider/provider.tf`, and per resource `resources/<type>/resource.tf` and
/// `resources/<type>/import.sh`, from the schemas' Terraform examples.
pub fn example_files() -> Vec<(String, String)> {
    let mut out = vec![(
        "provider/provider.tf".to_string(),
        ensure_newline(&provider_schema().terraform_example),
    )];
    for k in ResourceKind::ALL {
        let tf = k.terraform_type();
        out.push((
            format!("resources/{tf}/resource.tf"),
            ensure_newline(&schema(k).terraform_example),
        ));
        out.push((
            format!("resources/{tf}/import.sh"),
            format!("# A {tf} is imported by its name.\nterraform import {tf}.NAME NAME\n"),
        ));
    }
    out
}

fn ensure_newline(s: &str) -> String {
    if s.ends_with('\n') {
        s.to_string()
    } else {
        format!("{s}\n")
    }
}

fn attr_line(a: &Attribute) -> String {
    let mut tags = vec![if a.required { "Required" } else { "Optional" }];
    if a.forces_replacement {
        tags.push("Forces new resource");
    }
    if a.sensitive {
        tags.push("Sensitive");
    }
    let mut line = format!(
        "* `{}` - ({}, {}) {}",
        a.name,
        tags.join(", "),
        a.ty,
        a.description
    );
    let range = a.validation.range_text();
    if !range.is_empty() {
        let _ = write!(line, " Must be {range}.");
    }
    if !a.validation.one_of.is_empty() {
        let list = a
            .validation
            .one_of
            .iter()
            .map(|e| format!("`{e}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = write!(line, " One of {list}.");
    }
    if let Some(p) = &a.validation.pattern {
        let _ = write!(line, " Must match `{p}`.");
    }
    if a.validation.env_names {
        let _ = write!(line, " {}", crate::envname::rule_text());
    }
    if let Some(d) = &a.default {
        let _ = write!(line, " Defaults to `{d}`.");
    }
    line
}

fn block_line(b: &Block) -> String {
    let mut tags = vec![if b.min_items > 0 {
        "Required"
    } else {
        "Optional"
    }];
    if b.forces_replacement {
        tags.push("Forces new resource");
    }
    let count = match (b.nesting, b.min_items, b.max_items) {
        (Nesting::Single, _, _) => "block, at most one".to_string(),
        (_, min, Some(max)) => format!("blocks, {min} to {max}"),
        (_, 0, None) => "blocks".to_string(),
        (_, min, None) => format!("blocks, at least {min}"),
    };
    format!(
        "* `{}` - ({}, {count}) {} See [{}](#{}) below.",
        b.name,
        tags.join(", "),
        b.description,
        b.name,
        b.name
    )
}

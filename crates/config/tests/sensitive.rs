//! Issue 46 item 6: a value computed from a variable declared `sensitive = true` is
//! never printed in a diagnostic (validate, the GitOps status record, the logs, the
//! console's plan page all show the loader's diagnostics as they are). Each error
//! shows `(sensitive)` in place of the value and keeps its location and the rest of
//! its message; a value that is not sensitive is still shown.

use gpushare_config::{load_sources, LoadOptions, Source};

const SECRET: &str = "hunter2-SECRET";

/// Variables on lines 1-23; the `locals` block opens on line 25, its first
/// value is on line 26.
const VARIABLES: &str = r#"gpushare {
  cluster = "c"
}

variable "token" {
  type      = string
  sensitive = true
  default   = "hunter2-SECRET"
}

variable "secrets" {
  type      = map(string)
  sensitive = true
  default   = { db = "hunter2-SECRET" }
}

variable "pin" {
  type      = number
  sensitive = true
  default   = 4242
}

variable "plain" {}
"#;

/// The error text of loading one file `name` holding `text`.
fn error_of(name: &str, text: &str, opts: &LoadOptions) -> String {
    let source = Source {
        name: name.into(),
        text: text.into(),
    };
    match load_sources(&[source], opts) {
        Ok(_) => panic!("{name} loaded:\n{text}"),
        Err(e) => e.to_string(),
    }
}

/// The error text of loading `VARIABLES` plus `locals { <locals> }`.
fn load_error(locals: &str) -> String {
    let text = format!("{VARIABLES}\nlocals {{\n  {locals}\n}}\n");
    let opts = LoadOptions {
        vars: vec![("plain".into(), "visible-value".into())],
        ..Default::default()
    };
    error_of("main.hcl", &text, &opts)
}

/// The error of `locals { <expr> }` names line 26, says `(sensitive)` and holds
/// neither the secret nor the sensitive number, nor any of `forbidden`.
fn assert_hidden(local: &str, says: &str) {
    let e = load_error(local);
    assert!(!e.contains(SECRET), "`{local}` prints the secret:\n{e}");
    assert!(
        !e.contains("4242"),
        "`{local}` prints the sensitive number:\n{e}"
    );
    assert!(e.contains("(sensitive)"), "`{local}`: no (sensitive):\n{e}");
    assert!(e.contains("main.hcl:26:"), "`{local}`: not located:\n{e}");
    assert!(
        e.contains(says),
        "`{local}`: lost its message `{says}`:\n{e}"
    );
}

#[test]
fn sensitive_value_of_wrong_type_is_not_printed() {
    for (local, says) in [
        (
            "x = var.token ? 1 : 2",
            "expected a boolean, got (sensitive)",
        ),
        ("x = !var.token", "not applicable to (sensitive)"),
        (
            "x = [for c in var.token : c]",
            "needs a list or map, got (sensitive)",
        ),
        (
            "x = { (var.secrets) = 1 }",
            "a key must be a string, got (sensitive)",
        ),
        (
            "x = \"a${var.secrets}\"",
            "cannot insert (sensitive) into a string",
        ),
        (
            "x = format(\"%d\", var.token)",
            "%d needs a number, got (sensitive)",
        ),
        ("x = min(1, var.token)", "must be a number, got (sensitive)"),
        (
            "x = length(var.pin)",
            "length needs a string, list or map, got (sensitive)",
        ),
        (
            "x = format(var.token, 1)",
            "too many arguments for the format (sensitive)",
        ),
        (
            "x = concat(var.token...)",
            "expands a list, got (sensitive)",
        ),
        ("x = local.y ? 1 : 2\n  y = var.token", "expected a boolean"),
    ] {
        assert_hidden(local, says);
    }
}

#[test]
fn sensitive_map_missing_key_is_not_printed() {
    for (local, says) in [
        ("x = { a = 1 }[var.token]", "no such key: (sensitive)"),
        (
            "x = var.secrets.db.user",
            "cannot read attribute `user` of (sensitive)",
        ),
        (
            "x = var.secrets[\"db\"].user",
            "cannot read attribute `user` of (sensitive)",
        ),
        ("x = var.secrets.db[0]", "cannot index (sensitive)"),
        ("x = [1][var.pin]", "index (sensitive) out of range"),
        (
            "x = [for k, entry in var.secrets : entry.user]",
            "cannot read attribute `user` of (sensitive)",
        ),
        (
            "x = { for s in [var.token, var.token] : s => 1 }",
            "key (sensitive) already exists",
        ),
    ] {
        assert_hidden(local, says);
    }
}

#[test]
fn sensitive_arithmetic_error_is_not_printed() {
    for (local, says) in [
        (
            "x = var.token + 1",
            "needs two numbers, got (sensitive) and `1`",
        ),
        (
            "x = 1 + 2 * var.token",
            "needs two numbers, got `2` and (sensitive)",
        ),
        (
            "x = \"${var.token}-x\" + 1",
            "needs two numbers, got (sensitive)",
        ),
        (
            "x = 1 - upper(var.token)",
            "needs two numbers, got `1` and (sensitive)",
        ),
        (
            "x = var.token && true",
            "needs two booleans, got (sensitive)",
        ),
        ("x = var.pin / 0", "division by zero: `(sensitive) / 0`"),
        (
            "x = 0 % (var.pin - 4242)",
            "remainder by zero: `0 % (sensitive)`",
        ),
        (
            "x = var.pin * 9223372036854775807",
            "`(sensitive) * 9223372036854775807` is out of the range",
        ),
        (
            "x = -(var.pin - 4242 - 9223372036854775807 - 1)",
            "cannot negate (sensitive)",
        ),
        (
            "x = [for k, v in var.secrets : v + 1]",
            "got (sensitive) and `1`",
        ),
        (
            "x = local.y + 1\n  y = var.token",
            "got (sensitive) and `1`",
        ),
    ] {
        assert_hidden(local, says);
    }
}

#[test]
fn a_sensitive_variable_default_that_fails_is_not_printed() {
    let text = "gpushare {\n  cluster = \"c\"\n}\n\nvariable \"k\" {\n  sensitive = true\n  default   = \"hunter2-SECRET\" + 1\n}\n";
    let e = error_of("main.hcl", text, &LoadOptions::default());
    assert!(!e.contains(SECRET), "{e}");
    assert!(e.contains("main.hcl:7:"), "{e}");
    // The whole default is the sensitive value: neither operand is shown.
    assert!(e.contains("got (sensitive) and (sensitive)"), "{e}");
}

/// A sensitive value in a Terraform resource's or data lookup's `name` is refused
/// like anywhere but `secret_env` (the name is shown by plan), without printing it.
#[test]
fn sensitive_value_in_a_name_is_refused_and_not_printed() {
    let vars = "variable \"token\" {\n  type      = string\n  sensitive = true\n  default   = \"hunter2-SECRET\"\n}\n";
    for (body, at) in [
        (
            "data \"gpushare_instance_type\" \"t\" {\n  name = var.token\n}\n",
            "main.tf:8:",
        ),
        (
            "resource \"gpushare_capacity_provider\" \"p\" {\n  name = var.token\n}\n",
            "main.tf:8:",
        ),
    ] {
        let text = format!("{vars}\n{body}");
        let e = error_of("main.tf", &text, &LoadOptions::default());
        assert!(!e.contains(SECRET), "{body}: {e}");
        assert!(e.contains(at), "{body}: {e}");
        assert!(
            e.contains("`var.token` is sensitive and cannot be used in `name`"),
            "{body}: {e}"
        );
    }
}

/// The same mistakes with a variable that is not sensitive still show the value.
#[test]
fn values_that_are_not_sensitive_are_still_shown() {
    for (local, says) in [
        ("x = var.plain + 1", "got `\"visible-value\"` and `1`"),
        (
            "x = var.plain ? 1 : 2",
            "expected a boolean, got `\"visible-value\"`",
        ),
        ("x = { a = 1 }[var.plain]", "no such key: `visible-value`"),
        (
            "x = min(1, var.plain)",
            "must be a number, got visible-value",
        ),
        (
            "x = [for c in var.plain : c]",
            "needs a list or map, got `\"visible-value\"`",
        ),
    ] {
        let e = load_error(local);
        assert!(e.contains(says), "`{local}`: {e}");
        assert!(!e.contains("(sensitive)"), "`{local}`: {e}");
    }
}

/// `var` read whole holds the sensitive variables too: a local computed from it is
/// sensitive (its use in `env` is refused, as `var.token`'s is), where before it
/// put the secret in `env`, which plan prints.
#[test]
fn sensitive_variable_read_through_var_whole_is_refused_and_not_printed() {
    let text = r#"gpushare {
  cluster = "c"
}

variable "token" {
  sensitive = true
  default   = "hunter2-SECRET"
}

locals {
  all = var
}

task_definition "t" {
  container "c" {
    image = "i"
    env   = local.all
  }
}
"#;
    let e = error_of("main.hcl", text, &LoadOptions::default());
    assert!(!e.contains(SECRET), "{e}");
    assert!(e.contains("main.hcl:17:"), "{e}");
    assert!(
        e.contains("`local.all` is sensitive and cannot be used in `env`"),
        "{e}"
    );
}

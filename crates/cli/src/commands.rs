//! One function per command.

use crate::cli::{Cli, Command};
use anyhow::bail;

pub async fn run(cli: Cli) -> anyhow::Result<u8> {
    let name = match cli.command {
        Command::Validate { .. } => "validate",
        Command::Fmt { .. } => "fmt",
        Command::Plan { .. } => "plan",
        Command::Apply { .. } => "apply",
        Command::Destroy { .. } => "destroy",
        Command::Show { .. } => "show",
        Command::State { .. } => "state",
        Command::Reconcile { .. } => "reconcile",
        Command::Debug { .. } => "debug",
    };
    bail!("`gpushare {name}` is not wired into this build yet")
}

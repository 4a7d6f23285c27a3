//! The real `terraform` binary in a scratch directory, with a CLI configuration whose
//! `dev_overrides` point at the freshly built provider (no `terraform init`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn terraform_binary() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("terraform"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("these tests need the real `terraform` binary (1.11) on PATH; none was found in {path:?}"))
}

pub struct Workdir {
    pub dir: tempfile::TempDir,
    pub cli_config: PathBuf,
}

impl Workdir {
    pub fn new(main_tf: &str) -> Workdir {
        let dir = tempfile::tempdir().unwrap();
        let provider = Path::new(env!("CARGO_BIN_EXE_terraform-provider-gpushare"));
        let cli_config = dir.path().join("cli.tfrc");
        std::fs::write(
            &cli_config,
            format!(
                "provider_installation {{\n  dev_overrides {{\n    \"registry.terraform.io/gpushare/gpushare\" = \"{}\"\n  }}\n  direct {{}}\n}}\n",
                provider.parent().unwrap().display()
            ),
        )
        .unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        std::fs::write(work.join("main.tf"), main_tf).unwrap();
        Workdir { dir, cli_config }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(terraform_binary());
        c.args(args)
            .current_dir(self.path())
            .env("TF_CLI_CONFIG_FILE", &self.cli_config)
            .env("TF_IN_AUTOMATION", "1")
            .env("TF_INPUT", "0")
            .env("CHECKPOINT_DISABLE", "1")
            .env_remove("TF_LOG");
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.output(self.command(args), args)
    }

    /// Runs `command` (from [`Workdir::command`] with `args`), echoing its output.
    pub fn output(&self, mut command: Command, args: &[&str]) -> Output {
        let out = command.output().expect("running terraform");
        eprintln!(
            "$ terraform {}\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "terraform {} failed", args.join(" "));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

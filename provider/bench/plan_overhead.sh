#!/usr/bin/env bash
# Provider overhead under the real `terraform plan`: the same run times
#   (a) `terraform plan` of 100 gpushare resources, and
#   (b) `terraform plan` of 100 terraform_data resources (Terraform's built-in
#       provider, no plugin process, no gRPC),
# alternating a and b, RUNS times each, in two situations: from an empty state
# (100 to add) and after applying them (refresh of 100 resources, no changes).
# Prints every sample, the medians and the ratios a/b. With APPLY_RUNS=N, also
# times `terraform apply` of the same resources from an empty state, N alternating
# runs each.
#
# Usage: provider/bench/plan_overhead.sh            (RUNS=5 PROFILE=release by default)
#        APPLY_RUNS=5 provider/bench/plan_overhead.sh
#        RUNS=9 PROFILE=debug provider/bench/plan_overhead.sh
#        RUNS=9 PROVIDER_BIN_DIR=$CARGO_TARGET_DIR/debug provider/bench/plan_overhead.sh
# Needs `terraform` on PATH; loopback only; writes only under a temporary directory.
set -euo pipefail
RUNS=${RUNS:-5}
PROFILE=${PROFILE:-release}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
command -v terraform >/dev/null || { echo "terraform is not on PATH" >&2; exit 1; }
if [ -n "${PROVIDER_BIN_DIR:-}" ]; then
  # A provider built already (e.g. by `cargo test --workspace`, whose feature set a
  # `-p` build would not share: no rebuild of the EC2 SDK).
  BIN_DIR=$PROVIDER_BIN_DIR
  PROFILE="prebuilt ($BIN_DIR)"
elif [ "$PROFILE" = release ]; then
  (cd "$ROOT" && cargo build -q --release -p terraform-provider-gpushare)
  BIN_DIR="$TARGET/$PROFILE"
else
  (cd "$ROOT" && cargo build -q -p terraform-provider-gpushare)
  BIN_DIR="$TARGET/$PROFILE"
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

cat > "$WORK/cli.tfrc" <<EOT
provider_installation {
  dev_overrides {
    "registry.terraform.io/gpushare/gpushare" = "$BIN_DIR"
  }
  direct {}
}
EOT
export TF_CLI_CONFIG_FILE="$WORK/cli.tfrc" TF_IN_AUTOMATION=1 TF_INPUT=0 CHECKPOINT_DISABLE=1

# (a) 100 gpushare resources: 10 capacity providers, 30 task definitions, 60 services.
mkdir -p "$WORK/gpushare" "$WORK/data"
{
  cat <<'EOT'
terraform {
  required_providers {
    gpushare = { source = "gpushare/gpushare" }
  }
}
provider "gpushare" {
  cluster = "bench"
}
EOT
  for i in $(seq 0 9); do
    printf 'resource "gpushare_capacity_provider" "p%d" {\n  name          = "p%d"\n  instance_type = "g6.12xlarge"\n  max_size      = 20\n}\n' "$i" "$i"
  done
  for i in $(seq 0 29); do
    printf 'resource "gpushare_task_definition" "t%d" {\n  name = "t%d"\n  container {\n    name  = "c"\n    image = "example/app:%d"\n    gpu {\n      mps {\n        memory = 2048\n      }\n    }\n  }\n}\n' "$i" "$i" "$i"
  done
  for i in $(seq 0 59); do
    printf 'resource "gpushare_service" "s%d" {\n  name              = "s%d"\n  task_definition   = gpushare_task_definition.t%d.name\n  capacity_provider = gpushare_capacity_provider.p%d.name\n  desired_count     = 1\n}\n' "$i" "$i" $((i % 30)) $((i % 10))
  done
} > "$WORK/gpushare/main.tf"

# (b) 100 terraform_data resources with inputs of a similar shape and the same references.
{
  for i in $(seq 0 9); do
    printf 'resource "terraform_data" "p%d" {\n  input = { name = "p%d", instance_type = "g6.12xlarge", max_size = 20 }\n}\n' "$i" "$i"
  done
  for i in $(seq 0 29); do
    printf 'resource "terraform_data" "t%d" {\n  input = { name = "t%d", container = [{ name = "c", image = "example/app:%d", gpu = { mps = { memory = 2048 } } }] }\n}\n' "$i" "$i" "$i"
  done
  for i in $(seq 0 59); do
    printf 'resource "terraform_data" "s%d" {\n  input = { name = "s%d", task_definition = terraform_data.t%d.output.name, capacity_provider = terraform_data.p%d.output.name, desired_count = 1 }\n}\n' "$i" "$i" $((i % 30)) $((i % 10))
  done
} > "$WORK/data/main.tf"

now_ms() { date +%s%3N; }
plan_ms() { # dir -> milliseconds of one `terraform plan`
  local t0 t1
  t0=$(now_ms)
  (cd "$1" && terraform plan -input=false -no-color -lock=false >/dev/null 2>"$WORK/err") || { cat "$WORK/err" >&2; exit 1; }
  t1=$(now_ms)
  echo $((t1 - t0))
}
apply_ms() { # dir -> milliseconds of one `terraform apply` from an empty state
  local t0 t1
  rm -rf "$1/terraform.tfstate" "$1/terraform.tfstate.backup" "$1/.gpushare"
  t0=$(now_ms)
  (cd "$1" && terraform apply -auto-approve -input=false -no-color -lock=false >/dev/null 2>"$WORK/err") || { cat "$WORK/err" >&2; exit 1; }
  t1=$(now_ms)
  echo $((t1 - t0))
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

measure() { # label [runs] [timer]
  local ga=() da=() runs=${2:-$RUNS} timer=${3:-plan_ms}
  "$timer" "$WORK/gpushare" >/dev/null; "$timer" "$WORK/data" >/dev/null   # warm-up (page cache)
  for _ in $(seq "$runs"); do
    ga+=("$("$timer" "$WORK/gpushare")")
    da+=("$("$timer" "$WORK/data")")
  done
  local gm dm
  gm=$(printf '%s\n' "${ga[@]}" | median)
  dm=$(printf '%s\n' "${da[@]}" | median)
  echo "$1: gpushare samples ms: ${ga[*]}"
  echo "$1: terraform_data samples ms: ${da[*]}"
  awk -v g="$gm" -v d="$dm" -v l="$1" 'BEGIN { printf "%s: median gpushare %d ms, terraform_data %d ms, ratio %.2f\n", l, g, d, g / d }'
}

echo "terraform $(terraform version | head -1), provider $PROFILE build, $RUNS runs each, $(nproc) CPUs"
measure "empty state (100 to add)"
(cd "$WORK/gpushare" && terraform apply -auto-approve -input=false -no-color >/dev/null)
(cd "$WORK/data" && terraform apply -auto-approve -input=false -no-color >/dev/null)
measure "after apply (refresh 100, no changes)"
if [ "${APPLY_RUNS:-0}" -gt 0 ]; then
  measure "apply from empty state (100 to create)" "$APPLY_RUNS" apply_ms
fi

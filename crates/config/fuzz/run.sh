#!/usr/bin/env bash
# Runs the configuration loader's fuzz targets (cargo-fuzz, libFuzzer) for a fixed
# budget each, seeded with the repository's examples and test fixtures. Needs the
# nightly toolchain; installs cargo-fuzz when missing. Not run by CI.
#
#   crates/config/fuzz/run.sh [SECONDS_PER_TARGET]     (default 60)
#
# A crash, abort, timeout (5 s for one input) or memory blow-up (2 GiB) stops the run
# with the input saved under crates/config/fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-60}"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-$PWD/target}"
for t in load fmt; do
    mkdir -p "corpus/$t"
    for f in ../../../examples/*/*.hcl ../../../examples/*/*.tf ../tests/fixtures/*/*.hcl ../tests/fixtures/*/*.tf; do
        [ -f "$f" ] || continue
        cp "$f" "corpus/$t/seed-$(sha256sum "$f" | cut -c1-16)"
    done
    cargo +nightly fuzz run "$t" "corpus/$t" -- \
        -max_total_time="$secs" -timeout=5 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1
done

#!/usr/bin/env bash
# Runs every fuzz target in fuzz/ for a bounded time and fails on the first crash, panic,
# timeout or memory blow-up. libFuzzer through cargo-fuzz, without a sanitizer (-s none: the
# machine's one stable toolchain takes the coverage flags; AddressSanitizer builds with
# RUSTC_BOOTSTRAP=1 and `-s address` too, but that is a second full build of the workspace and
# the code under test has no unsafe of its own), with overflow checks and debug assertions (-a).
#   Limits per input: 10 s, 512 MB of RSS; inputs up to 4 KiB.
#   The corpus in fuzz/corpus/<target> is read, never written: new inputs go to a scratch dir.
#   The build goes to <target dir>/fuzz, beside the main build, so CI keeps and reuses it.
# Usage: scripts/fuzz.sh [seconds per target, default 20]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}

# cargo-fuzz (pinned) comes from scripts/install-deps.sh test.
export CARGO_TARGET_DIR="$(scripts/target-dir)/fuzz"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

cd fuzz
cargo fuzz build -s none -O -a
bin_dir="$CARGO_TARGET_DIR/$(rustc -vV | sed -n 's/^host: //p')/release"
for target in $(cargo fuzz list); do
    mkdir -p "$scratch/$target" "$scratch/artifacts"
    log="$scratch/$target.log"
    if ! "$bin_dir/$target" "$scratch/$target" "corpus/$target" \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=512 -max_len=4096 \
        -print_final_stats=1 -artifact_prefix="$scratch/artifacts/$target-" >"$log" 2>&1; then
        tail -n 60 "$log"
        for crash in "$scratch"/artifacts/*; do
            echo "fuzz: $target failed on $(basename "$crash"), base64: $(base64 -w0 "$crash")"
        done
        exit 1
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    corpus=$(ls "corpus/$target" | wc -l)
    echo "fuzz: $target: $runs runs in ${seconds} s from $corpus seeds, no failure"
done

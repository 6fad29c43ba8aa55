#!/usr/bin/env bash
# Runs every check and test, all in the release profile (one RocksDB build serves them all):
# formatting, the Grafana dashboards' static checks, clippy, unit and property tests, and the
# integration tests against real servers (actcd, Debian's etcd 3.4, etcdctl, Prometheus) on
# loopback ports. Each fuzz target runs for 25 s (scripts/fuzz.sh) before the tests, so that
# cargo's closing lines are the test results.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh test
cargo fmt --all -- --check
scripts/check-dashboards --no-install
cargo clippy --release --locked --workspace --all-targets -- -D warnings
scripts/fuzz.sh 25
# One test at a time: in parallel, the resource-exhaustion tests (10k connections, descriptor
# limits) starve the others of CPU on a 2-core machine. (The parallel runs' other failure, a
# watch stream that ended early, was a stream-actor bug, fixed in fdc090f; 3 parallel runs of
# the integration tests passed after it, 80-88 s against ~150 s serial.)
cargo test --release --locked --workspace -- --test-threads=1

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
# limits) starve the others, and twice the live linearizability test saw its watch stream end
# early (under investigation; see the closing note of 2026-11-30).
cargo test --release --locked --workspace -- --test-threads=1

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
cargo test --release --locked --workspace

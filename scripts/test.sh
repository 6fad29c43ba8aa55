#!/usr/bin/env bash
# Runs every check and test, all in the release profile (one RocksDB build serves them all):
# formatting, the Grafana dashboards' static checks, clippy, unit and property tests, and the
# integration tests against real servers (actcd, Debian's etcd 3.4, etcdctl, Prometheus) on
# loopback ports, and then each fuzz target for 25 s (scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh test
cargo fmt --all -- --check
scripts/check-dashboards --no-install
cargo clippy --release --locked --workspace --all-targets -- -D warnings
cargo test --release --locked --workspace
scripts/fuzz.sh 25

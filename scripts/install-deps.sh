#!/usr/bin/env bash
# Installs what actcd's two commands need on a fresh Debian machine that has only the Rust
# toolchain, skipping what is already there, so running it again is cheap.
#   server: clang + libclang-dev (bindgen for RocksDB's bindings), etcd-client (etcdctl, for
#           the README's first session against the server; a fresh-root run of the server
#           command alone found it missing)
#   test:   protobuf-compiler + libprotobuf-dev (the etcd-client crate's build script runs
#           protoc on etcd's protos, which import google/protobuf/*.proto: those files are in
#           libprotobuf-dev, which protobuf-compiler only recommends), etcd-server +
#           etcd-client (etcd 3.4 and etcdctl for the differential and CLI tests), prometheus
#           (a real Prometheus and promtool for the metrics and dashboard tests), fiu-utils +
#           libfiu0 (fiu-run/fiu-ctrl inject fsync errors for the fault tests), strace (the
#           fsync-before-answer trace), python3 (scripts/check-dashboards and the sample
#           exporter it serves), curl and openssl (scripts and TLS material), systemd
#           (systemd-analyze verify of packaging/actcd.service; no init is started), and cargo-fuzz,
#           pinned, for scripts/fuzz.sh.
# Debian's versions are not pinned (a point release removes the old ones): tests/it/setup.rs
# checks the versions the tests rely on instead.
# `packages P...` installs the named Debian packages alone, the same way (grafana/render/render.sh
# takes chromium and prometheus so).
# Usage: scripts/install-deps.sh server|test|packages P...
set -euo pipefail

case "${1:-server}" in
server) packages=(clang libclang-dev etcd-client) ;;
test)
    packages=(clang libclang-dev etcd-client protobuf-compiler libprotobuf-dev etcd-server prometheus
        fiu-utils libfiu0 strace python3 curl openssl systemd iproute2)
    ;;
packages) packages=("${@:2}") ;;
*) echo "install-deps.sh: usage: install-deps.sh server|test|packages P..." >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"

if [[ ${#missing[@]} -gt 0 ]]; then
    # Debian's etcd-server would start a system etcd on 127.0.0.1:2379, actcd's own port: a
    # policy-rc.d that says no keeps packages from starting services while we install.
    policy=/usr/sbin/policy-rc.d
    created_policy=false
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' | $sudo tee $policy >/dev/null
        $sudo chmod +x $policy
        created_policy=true
    fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
    if $created_policy; then
        $sudo rm -f $policy
    fi
fi

if [[ "${1:-server}" == test ]]; then
    cargo_fuzz_version=0.13.2
    if ! cargo fuzz --version 2>/dev/null | grep -qx "cargo-fuzz $cargo_fuzz_version"; then
        cargo install cargo-fuzz --locked --version "$cargo_fuzz_version"
    fi
fi

#!/usr/bin/env bash
# Installs the Debian packages actcd needs, only those missing, so running it again is cheap.
#   server: clang + libclang-dev (bindgen for RocksDB's bindings)
#   tests:  protobuf-compiler (the etcd-client crate's build), etcd-server + etcd-client
#           (etcd 3.4 and etcdctl for the differential and CLI tests), prometheus (a real
#           Prometheus and promtool for the metrics and dashboard tests), fiu-utils + libfiu0
#           (fiu-run/fiu-ctrl inject fsync errors for the fault tests), strace (the fsync-before-
#           answer trace)
# Usage: scripts/install-deps.sh server|test
set -euo pipefail

packages=(clang libclang-dev)
if [[ "${1:-server}" == test ]]; then
    packages+=(protobuf-compiler etcd-server etcd-client prometheus fiu-utils libfiu0 strace)
fi

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"

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

#!/usr/bin/env bash
# Builds actcd's Debian package with dpkg-deb (no cargo-deb to install): /usr/bin/actcd, the
# systemd unit (packaging/actcd.service), /etc/default/actcd (a conffile) and the README; the
# maintainer scripts add the `actcd` system user and, where systemd runs, enable and start the
# unit, as Debian's etcd-server does.
#   scripts/deb.sh [--binary PATH] [--out DIR]
# --binary packages a binary already built (the tests pass theirs); otherwise a release build
# with its Git SHA for `actcd --version`. The .deb lands in DIR (default target/debian).
set -euo pipefail
cd "$(dirname "$0")/.."

binary="" out="${CARGO_TARGET_DIR:-target}/debian"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --binary) binary=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "usage: scripts/deb.sh [--binary PATH] [--out DIR]" >&2; exit 2 ;;
    esac
done
if [[ -z $binary ]]; then
    ACTCD_GIT_SHA=$(git rev-parse --short HEAD) cargo build --release --locked -p actcd --bin actcd
    binary="${CARGO_TARGET_DIR:-target}/release/actcd"
fi

version=$(awk -F'"' '/^version = / {print $2; exit}' Cargo.toml)
arch=$(dpkg --print-architecture)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
chmod 0755 "$stage"

# Stripped: the debug info is most of the release binary's size.
install -D -m 0755 -s "$binary" "$stage/usr/bin/actcd"
install -D -m 0644 packaging/actcd.service "$stage/lib/systemd/system/actcd.service"
install -D -m 0644 packaging/default "$stage/etc/default/actcd"
install -D -m 0644 README.md "$stage/usr/share/doc/actcd/README.md"
install -D -m 0644 LICENSE* "$stage/usr/share/doc/actcd/" 2>/dev/null || true
mkdir -p "$stage/DEBIAN"
cat >"$stage/DEBIAN/control" <<CONTROL
Package: actcd
Version: $version
Architecture: $arch
Maintainer: actcd developers <actcd@localhost>
Section: database
Priority: optional
Depends: libc6, libgcc-s1, libstdc++6, adduser
Installed-Size: $(du -sk "$stage" | cut -f1)
Description: key-value server that speaks the etcd v3 API
 actcd serves etcd's v3 gRPC API, its JSON gateway and its metrics, with etcd's flags,
 ETCD_* variables and YAML config file, on RocksDB; one member or a Raft cluster.
CONTROL
echo /etc/default/actcd >"$stage/DEBIAN/conffiles"
cat >"$stage/DEBIAN/postinst" <<'SCRIPT'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    getent passwd actcd >/dev/null ||
        adduser --system --group --home /var/lib/actcd --no-create-home --quiet actcd
    install -d -o actcd -g actcd -m 0700 /var/lib/actcd
fi
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
    systemctl enable actcd.service || true
    systemctl start actcd.service || true
fi
SCRIPT
cat >"$stage/DEBIAN/prerm" <<'SCRIPT'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
    systemctl stop actcd.service || true
    systemctl disable actcd.service || true
fi
SCRIPT
cat >"$stage/DEBIAN/postrm" <<'SCRIPT'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
fi
SCRIPT
chmod 0755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/prerm" "$stage/DEBIAN/postrm"

mkdir -p "$out"
deb="$out/actcd_${version}_${arch}.deb"
dpkg-deb --root-owner-group --build "$stage" "$deb" >/dev/null
echo "$deb"

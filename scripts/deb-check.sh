#!/usr/bin/env bash
# Installs actcd's Debian package as a new machine meets it and checks it: dpkg -i (apt-get -f
# for what it depends on), `systemd-analyze verify` of the installed unit, then actcd started
# as the unit starts it (its user, /etc/default/actcd, $DAEMON_ARGS) with NOTIFY_SOCKET on a
# socket this script listens on: READY=1, a healthy /health, STOPPING=1 on SIGTERM.
# It installs into /: run it only inside ../shared/tools/fresh-root.sh's root, never on the
# machine CI runs on:
#   FRESH_SHARE_TARGET=1 ../shared/tools/fresh-root.sh run 'bash scripts/deb-check.sh'
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -e /root/project ]] || { echo "deb-check.sh: run inside fresh-root.sh's root" >&2; exit 2; }

# What building needs, as the README's server command installs it.
bash scripts/install-deps.sh server
deb=$(bash scripts/deb.sh | tail -1)
dpkg -i "$deb" || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -f -y -qq; }
dpkg-query -W -f='${Status}\n' actcd | grep -qx 'install ok installed'
getent passwd actcd >/dev/null
[[ $(stat -c %U /var/lib/actcd) == actcd ]]

said=$(systemd-analyze verify /lib/systemd/system/actcd.service 2>&1) || { echo "$said"; exit 1; }
[[ -z $said ]] || { echo "systemd-analyze verify: $said"; exit 1; }
echo "verify: clean"

# systemd's side of Type=notify: a datagram socket the service's user may write to.
dir=$(mktemp -d); chmod 0777 "$dir"; sock=$dir/notify
perl -MIO::Socket::UNIX -e '
    my $s = IO::Socket::UNIX->new(Type => SOCK_DGRAM, Local => $ARGV[0]) or die "bind: $!";
    chmod 0777, $ARGV[0];
    $SIG{ALRM} = sub { print "timeout\n"; exit 1 }; alarm 120;
    for (1..2) { $s->recv(my $m, 4096); print $m; $| = 1 }' "$sock" >"$dir/heard" &
listener=$!
while [[ ! -S $sock ]]; do sleep 0.1; done

set -a; . /etc/default/actcd; set +a
DAEMON_ARGS=${DAEMON_ARGS:-}
# setpriv execs (runuser would stay the parent and die of the SIGTERM itself).
setpriv --reuid=actcd --regid=actcd --init-groups env NOTIFY_SOCKET="$sock" ETCD_DATA_DIR="$ETCD_DATA_DIR" \
    /usr/bin/actcd $DAEMON_ARGS >"$dir/log" 2>&1 &
server=$!
for _ in $(seq 600); do grep -q READY=1 "$dir/heard" && break; sleep 0.1; done
grep -qx READY=1 "$dir/heard" || { cat "$dir/log"; exit 1; }
echo "notify: READY=1"
curl -fsS http://127.0.0.1:2379/health | grep -q '"health":"true"'
echo "health: true"
[[ $(stat -c %U "$ETCD_DATA_DIR") == actcd ]]
kill -TERM "$server"
wait "$server" || { echo "actcd exited $? on SIGTERM"; cat "$dir/log"; exit 1; }
wait "$listener"
grep -qx STOPPING=1 "$dir/heard"
echo "notify: STOPPING=1; deb-check passed"

#!/bin/bash
# A live upgrade under load (docs/performance.md#live-upgrade-under-load): starts the daemon
# in a private $HOME with default settings, N terminals each running `yes`, lets them fill
# their histories for FILL seconds (default 10), then runs `ahpty upgrade` while sampling the
# daemon's resident size every 10 ms. Prints the resident size before, its peak during the
# upgrade, the daemon's status (switchMs, totalMs) and how many terminals are listed after.
#
#   cargo build --release && benches/upgrade_load.sh target/release/ahpty 50
set -u
BIN=$(realpath "$1"); N=$2; FILL=${FILL:-10}
H=$(mktemp -d)
export HOME=$H XDG_RUNTIME_DIR=$H/run XDG_STATE_HOME=$H/state XDG_CONFIG_HOME=$H/cfg TMPDIR=$H
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
cp "$BIN" "$H/ahpty"
"$H/ahpty" serve --listen 127.0.0.1:0 >"$H/out" 2>"$H/err" &
PID=$!
for _ in $(seq 100); do [ -S "$XDG_RUNTIME_DIR/ahpty/ahpty.sock" ] && break; sleep 0.1; done
for _ in $(seq "$N"); do
    t=$("$H/ahpty" new) && "$H/ahpty" send "$t" 'yes' --enter >/dev/null
done
sleep "$FILL"
before=$(awk '/VmRSS/{print $2}' "/proc/$PID/status")
(
    peak=0
    while [ ! -e "$H/stop" ]; do
        r=$(awk '/VmRSS/{print $2}' "/proc/$PID/status" 2>/dev/null)
        [ -n "$r" ] && [ "$r" -gt "$peak" ] && peak=$r && echo "$peak" >"$H/peak"
        sleep 0.01
    done
) &
"$H/ahpty" upgrade --timeout 300s
touch "$H/stop"; sleep 0.1
echo "terminals=$N rss_before_kib=$before rss_peak_kib=$(cat "$H/peak")"
cat "$XDG_RUNTIME_DIR/ahpty/upgrade-$PID.json"; echo
grep -o 'hand-over written.*\|upgraded in place.*\|terminals suspended.*' "$H/err" | tail -3
echo "listed after: $("$H/ahpty" ls 2>/dev/null | tail -n +2 | wc -l)"
kill "$PID"; wait "$PID" 2>/dev/null
rm -rf "$H"

#!/usr/bin/env bash
# Speculation over llama.cpp RPC with real network latency, all on this machine (nothing leaves it).
#
# The RPC server runs inside a network namespace, reached over a veth pair; `tc netem` delays
# every packet on both ends of the pair by DELAY ms (one way: a round trip costs 2 x DELAY more).
# For each delay, `tandem bench` runs the F16 Gemma 3 270M target with all its layers on that
# server, plain against n-gram drafting, then plain against the Q4_K_M draft model (which stays
# here), and writes one report per run: rpc-latency/delay-<D>ms-{ngram,draft}.md. A summary
# table of tokens/s per delay and mode is printed at the end.
#
#   sudo tools/rpc_latency.sh                 # delays 0, 1 and 5 ms
#   sudo DELAYS="0 0.5 1 2 5" tools/rpc_latency.sh
#   sudo tools/rpc_latency.sh --check         # set up, one short generate through the namespace, tear down
#
# Needs root (ip netns, tc), `make setup` done, and an otherwise idle machine: it is a benchmark.
# Environment: DELAYS, THREADS (each side; default 1: the server and this side share the cores),
# MAX_TOKENS (128), SETS (copy,qa,writing), REPEAT (1), OUT (rpc-latency).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=$ROOT/.venv/bin/python
SERVER=$ROOT/.venv/bin/ggml-rpc-server
NS=tandem-rpc
HOST_IF=trpc0
NS_IF=trpc1
HOST_IP=10.77.0.1
NS_IP=10.77.0.2
PORT=50052
DELAYS=${DELAYS:-"0 1 5"}
THREADS=${THREADS:-1}
MAX_TOKENS=${MAX_TOKENS:-128}
SETS=${SETS:-copy,qa,writing}
REPEAT=${REPEAT:-1}
OUT=${OUT:-$ROOT/rpc-latency}
CHECK=0
[ "${1:-}" = "--check" ] && CHECK=1

die() { echo "error: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "needs root (ip netns, tc): run it with sudo"
command -v ip >/dev/null && command -v tc >/dev/null || die "needs ip and tc (Debian: apt-get install iproute2)"
[ -x "$PY" ] && [ -x "$SERVER" ] || die "run make setup first ($SERVER missing)"
ip netns list | grep -qw "$NS" && die "network namespace $NS exists already (ip netns del $NS)"

SERVER_PID=
cleanup() {
    set +e
    if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; fi
    ip link del "$HOST_IF" 2>/dev/null
    ip netns del "$NS" 2>/dev/null
    true
}
trap cleanup EXIT

ip netns add "$NS"
ip link add "$HOST_IF" type veth peer name "$NS_IF"
ip link set "$NS_IF" netns "$NS"
ip addr add "$HOST_IP/24" dev "$HOST_IF"
ip link set "$HOST_IF" up
ip netns exec "$NS" ip addr add "$NS_IP/24" dev "$NS_IF"
ip netns exec "$NS" ip link set "$NS_IF" up
ip netns exec "$NS" ip link set lo up

mkdir -p "$OUT"
ip netns exec "$NS" "$SERVER" --host "$NS_IP" --port "$PORT" --threads "$THREADS" --cache \
    >"$OUT/server.log" 2>&1 &
SERVER_PID=$!
cd "$ROOT"
"$PY" - "$NS_IP:$PORT" <<'EOF'
import sys, time
from engine import rpc
deadline = time.monotonic() + 30
while True:
    try:
        print("RPC server up, protocol %d.%d.%d" % rpc.check_server(sys.argv[1]))
        break
    except rpc.RpcError as e:
        if time.monotonic() > deadline:
            sys.exit(f"error: {e}")
        time.sleep(0.2)
EOF

set_delay() {  # one-way delay on both ends of the pair
    tc qdisc del dev "$HOST_IF" root 2>/dev/null || true
    ip netns exec "$NS" tc qdisc del dev "$NS_IF" root 2>/dev/null || true
    if [ "$1" != 0 ]; then
        tc qdisc add dev "$HOST_IF" root netem delay "${1}ms"
        ip netns exec "$NS" tc qdisc add dev "$NS_IF" root netem delay "${1}ms"
    fi
}

if [ "$CHECK" = 1 ]; then
    set_delay 1
    ping -c 3 -q "$NS_IP" | tail -1
    TINY=$(mktemp -d)/tiny.gguf
    "$PY" -c "from engine.tiny import write_tiny_model; write_tiny_model('$TINY', n_layers=4)"
    "$PY" -m app.main generate --model "$TINY" --prompt "the cat sat" --max-tokens 16 --threads 1 \
        --rpc "$NS_IP:$PORT" --gpu-layers 99 --draft ngram
    echo "check ok: generated through the namespace with 1 ms each way"
    exit 0
fi

TARGET=$("$PY" -c "from app.default_model import ensure_default_f16; print(ensure_default_f16())")
DRAFT=$("$PY" -c "from app.default_model import ensure_default_model; print(ensure_default_model())")
SUMMARY="$OUT/summary.md"
echo "| one-way delay | ping RTT | mode | plain tok/s | speculative tok/s | speedup |" >"$SUMMARY"
echo "|---|---|---|---|---|---|" >>"$SUMMARY"
for delay in $DELAYS; do
    set_delay "$delay"
    rtt=$(ping -c 5 -q "$NS_IP" | awk -F/ '/rtt|round-trip/ {print $5 " ms"}')
    for mode in ngram draft; do
        spec=ngram
        [ "$mode" = draft ] && spec=$DRAFT
        json="$OUT/delay-${delay}ms-$mode.json"
        # A fresh data folder per run: costs measured at another latency must not seed this one.
        TANDEM_HOME=$(mktemp -d) "$PY" -m app.main bench --model "$TARGET" --draft "$spec" \
            --rpc "$NS_IP:$PORT" --gpu-layers 99 --threads "$THREADS" --sets "$SETS" \
            --max-tokens "$MAX_TOKENS" --repeat "$REPEAT" --no-peer --no-lookup --no-process --turns 0 \
            --json --out "$OUT/delay-${delay}ms-$mode.md" >"$json"
        "$PY" - "$json" "$delay" "$rtt" "$mode" >>"$SUMMARY" <<'EOF'
import json, statistics, sys
path, delay, rtt, mode = sys.argv[1:]
report = json.loads(open(path).read().strip().splitlines()[-1])
rows = report["prompts"]
def med(key):
    vals = [r[key] for r in rows if isinstance(r, dict) and isinstance(r.get(key), (int, float))]
    return statistics.median(vals) if vals else float("nan")
plain, spec = med("plain_tokens_per_s"), med("spec_tokens_per_s")
print(f"| {delay} ms | {rtt} | {mode} | {plain:.1f} | {spec:.1f} | {spec / plain:.2f}x |")
EOF
    done
done
set_delay 0
cat "$SUMMARY"

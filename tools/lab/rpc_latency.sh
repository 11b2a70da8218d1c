#!/usr/bin/env bash
# Speculation over llama.cpp RPC with network latency added, all on this machine (nothing leaves it).
#
# The RPC server runs inside a network namespace, reached over a veth pair. `tc netem` delays every
# packet on both ends of the pair by DELAY ms (one way: a round trip costs 2 x DELAY more). Where
# the kernel has no netem (CONFIG_NET_SCH_NETEM unset, as on this project's 2-core machines), a
# user-space proxy in front of the veth (tools/lab/delay_proxy.py) delays every byte by DELAY ms in
# each direction instead; delay 0 then goes through the proxy too, so its own cost is in the
# baseline. METHOD=netem|proxy forces one.
#
# For each delay, `tandem bench` runs the F16 Gemma 3 270M target with all its layers on that
# server: plain against n-gram drafting, then plain against the Q4_K_M draft model (which stays
# here). Reports: rpc-latency/delay-<D>ms-{ngram,draft}.md, and rpc-latency/summary.md, a table of
# tokens/s per delay and mode.
#
#   sudo tools/lab/rpc_latency.sh                 # delays 0, 1 and 5 ms
#   sudo DELAYS="0 0.5 1 2 5" tools/lab/rpc_latency.sh
#   sudo tools/lab/rpc_latency.sh --check         # set up, a short generate at 0 and 1 ms, tear down
#
# Needs root (ip netns, tc), `make setup` done, and an otherwise idle machine: it is a benchmark.
# Environment: DELAYS, THREADS (each side; default 1: the server and this side share the cores),
# MAX_TOKENS (128), SETS (copy,qa,writing), REPEAT (1), OUT (rpc-latency), METHOD, MODES (ngram draft).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=$ROOT/.venv/bin/python
UTIL=$ROOT/tools/lab/rpc_latency_util.py
SERVER=$ROOT/.venv/bin/ggml-rpc-server
NS=tandem-rpc
HOST_IF=trpc0
NS_IF=trpc1
HOST_IP=10.77.0.1
NS_IP=10.77.0.2
PORT=50052
PROXY_PORT=50053
DELAYS=${DELAYS:-"0 1 5"}
THREADS=${THREADS:-1}
MAX_TOKENS=${MAX_TOKENS:-128}
SETS=${SETS:-copy,qa,writing}
REPEAT=${REPEAT:-1}
OUT=${OUT:-$ROOT/rpc-latency}
METHOD=${METHOD:-}
CHECK=0
[ "${1:-}" = "--check" ] && CHECK=1

die() { echo "error: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "needs root (ip netns, tc): run it with sudo"
command -v ip >/dev/null && command -v tc >/dev/null || die "needs ip and tc (Debian: apt-get install iproute2)"
[ -x "$PY" ] && [ -x "$SERVER" ] || die "run make setup first ($SERVER missing)"
if ip netns list | grep -qw "$NS"; then die "network namespace $NS exists already (ip netns del $NS)"; fi

SERVER_PID=
PROXY_PID=
stop_proxy() {
    if [ -n "$PROXY_PID" ]; then kill "$PROXY_PID" 2>/dev/null || true; wait "$PROXY_PID" 2>/dev/null || true; fi
    PROXY_PID=
    return 0
}
cleanup() {
    set +e
    stop_proxy
    if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; fi
    ip link del "$HOST_IF" 2>/dev/null
    ip netns del "$NS" 2>/dev/null
    return 0
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
"$PY" "$UTIL" wait "$NS_IP:$PORT"

if [ -z "$METHOD" ]; then
    if tc qdisc add dev "$HOST_IF" root netem delay 1ms 2>/dev/null; then
        tc qdisc del dev "$HOST_IF" root
        METHOD=netem
    else
        METHOD=proxy
        echo "this kernel has no netem qdisc: the delay is added in user space (tools/lab/delay_proxy.py)"
    fi
fi

# One-way delay $1 ms on both directions; sets ENDPOINT (what Tandem connects to) and RTT.
set_delay() {
    if [ "$METHOD" = netem ]; then
        tc qdisc del dev "$HOST_IF" root 2>/dev/null || true
        ip netns exec "$NS" tc qdisc del dev "$NS_IF" root 2>/dev/null || true
        if [ "$1" != 0 ]; then
            tc qdisc add dev "$HOST_IF" root netem delay "${1}ms"
            ip netns exec "$NS" tc qdisc add dev "$NS_IF" root netem delay "${1}ms"
        fi
        ENDPOINT="$NS_IP:$PORT"
    else
        stop_proxy
        "$PY" "$ROOT/tools/lab/delay_proxy.py" --listen "127.0.0.1:$PROXY_PORT" --to "$NS_IP:$PORT" \
            --delay-ms "$1" >>"$OUT/proxy.log" 2>&1 &
        PROXY_PID=$!
        ENDPOINT="127.0.0.1:$PROXY_PORT"
    fi
    RTT=$("$PY" "$UTIL" rtt "$ENDPOINT")
}

if [ "$CHECK" = 1 ]; then
    TINY=$(mktemp -d)/tiny.gguf
    "$PY" -c "from tests.tiny import write_tiny_model; write_tiny_model('$TINY', n_layers=4)"
    for delay in 0 1; do
        set_delay "$delay"
        echo "delay $delay ms each way ($METHOD): RPC handshake $RTT"
        TANDEM_HOME=$(mktemp -d) "$PY" -m app.main generate --model "$TINY" --prompt "the cat sat" \
            --max-tokens 16 --threads 1 --rpc "$ENDPOINT" --gpu-layers 99 --draft ngram >/dev/null
    done
    echo "check ok: generated through the namespace ($METHOD)"
    exit 0
fi

TARGET=$("$PY" -c "from tools.lab.models import ensure_default_f16; print(ensure_default_f16())")
DRAFT=$("$PY" -c "from app.library.default_model import ensure_default_model; print(ensure_default_model())")
SUMMARY="$OUT/summary.md"
{
    echo "Delay: $METHOD, added in each direction; threads $THREADS on each side; $MAX_TOKENS tokens;"
    echo "sets $SETS; target $(basename "$TARGET") on the RPC server, draft $(basename "$DRAFT") here."
    echo ""
    echo "| one-way delay | RPC handshake | mode | plain tok/s | speculative tok/s | speedup | accepted |"
    echo "|---|---|---|---|---|---|---|"
} >"$SUMMARY"
for delay in $DELAYS; do
    set_delay "$delay"
    for mode in ${MODES:-ngram draft}; do
        spec=ngram
        [ "$mode" = draft ] && spec=$DRAFT
        json="$OUT/delay-${delay}ms-$mode.json"
        # A fresh data folder per run: costs measured at another latency must not seed this one.
        TANDEM_HOME=$(mktemp -d) "$PY" -m app.main bench --model "$TARGET" --draft "$spec" \
            --rpc "$ENDPOINT" --gpu-layers 99 --threads "$THREADS" --sets "$SETS" \
            --max-tokens "$MAX_TOKENS" --repeat "$REPEAT" --no-peer --no-lookup --no-process --turns 0 \
            --json --out "$OUT/delay-${delay}ms-$mode.md" >"$json"
        "$PY" "$UTIL" row "$json" "$delay" "$RTT" "$mode" >>"$SUMMARY"
    done
done
cat "$SUMMARY"

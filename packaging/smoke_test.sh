#!/usr/bin/env bash
# Smoke test of the built bundle, run OUTSIDE any virtual environment.
#
#   packaging/smoke_test.sh [DIST_DIR]          (default dist/tandem; `make package-smoke`)
#
# Every run of the binary gets an `env -i` environment: HOME and TANDEM_HOME in a fresh temp
# folder, PATH = an empty folder (no python, no venv can be found), LANG=C.UTF-8.
#
# 1. CLI: `tandem generate --model default --draft ngram --prompt ... --max-tokens 16 --json`
#    must exit 0 with 16 generated tokens and n-gram speculation. The default model is joined
#    from the chunk files inside the bundle (TANDEM_HOME starts empty: no download, no venv).
# 2. Window, offscreen (QT_QPA_PLATFORM=offscreen). Offscreen windows cannot be seen or closed
#    from outside and the app has no quit-after hook, so the checks are: the process is still up
#    after TANDEM_SMOKE_ALIVE_S seconds (default 8), its engine worker (a multiprocessing "spawn"
#    child of the frozen executable, started by the main window) is running, and that worker
#    has mapped llama.cpp from the bundle and the default model (= the engine loaded); no process
#    maps anything from a virtual environment or site-packages. It is then closed with SIGTERM,
#    which app/gui.py turns into window.close(), and must exit 0 with its children gone.
# 3. Window on a real X display (Xvfb + xdotool; skipped with a note when they are missing,
#    unless TANDEM_SMOKE_REQUIRE_X=1): the window must become visible (xdotool --onlyvisible),
#    its title must change to "Tandem — <model>" (the engine loaded in the worker), then it is
#    closed like a window manager's close button does (WM_DELETE_WINDOW, x11_close_window.py,
#    run with the host's python3) and the app must exit 0 with its worker gone. Times from launch
#    to a visible window and to the loaded engine are written to the artifacts.
#
# Artifacts (timings, logs, an xwd dump of the window): TANDEM_SMOKE_ARTIFACTS, default
# build/smoke. Exit status 0: every step that ran passed.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
DIST="$(cd "${1:-$ROOT/dist/tandem}" && pwd -P)"
BIN="$DIST/tandem"
ART="${TANDEM_SMOKE_ARTIFACTS:-$ROOT/build/smoke}"
ALIVE_S="${TANDEM_SMOKE_ALIVE_S:-8}"
PROMPT="Repeat the list exactly: red, green, blue, yellow, purple. red, green, blue, yellow, purple. red, green,"

[[ -x "$BIN" ]] || { echo "smoke: no executable at $BIN (run make package)" >&2; exit 1; }
mkdir -p "$ART"
WORK="$(mktemp -d /tmp/tandem-smoke.XXXXXX)"
mkdir -p "$WORK/home" "$WORK/tandem-home" "$WORK/empty-path" "$WORK/runtime"
chmod 700 "$WORK/runtime"
PIDS_TO_STOP=()
cleanup() {
    local pid
    for pid in "${PIDS_TO_STOP[@]}"; do
        kill -TERM "$pid" 2>/dev/null || continue
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

fail() {
    echo "smoke: FAIL: $*" >&2
    for f in "$WORK"/*.err "$WORK/tandem-home/logs/"*.log; do
        [[ -f "$f" ]] && { echo "---- $f (tail)" >&2; tail -n 30 "$f" >&2; }
    done
    exit 1
}
now_ms() { date +%s%3N; }

# The environment every run of the bundle gets: nothing from this shell. (An array, not a
# function: `"${CLEAN_ENV[@]}" BIN &` makes $! the app's own pid, as env execs it.)
CLEAN_ENV=(env -i HOME="$WORK/home" PATH="$WORK/empty-path" LANG=C.UTF-8
    TANDEM_HOME="$WORK/tandem-home" XDG_RUNTIME_DIR="$WORK/runtime")

children_of() { cat /proc/"$1"/task/*/children 2>/dev/null | tr ' ' '\n' | grep -E '^[0-9]+$' || true; }

# The engine worker: the child started with --multiprocessing-fork (the other child of a
# "spawn" app is multiprocessing's resource tracker).
worker_of() {
    local child
    for child in $(children_of "$1"); do
        if tr '\0' ' ' <"/proc/$child/cmdline" 2>/dev/null | grep -q -- '--multiprocessing-fork'; then
            echo "$child"
            return
        fi
    done
}

# Wait up to 5 s for each of the given processes to be gone.
gone_within_5s() {
    local pid
    for pid in "$@"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && return 1
    done
    return 0
}

# No process of the app may map files from a virtual environment or a site-packages folder.
check_no_venv() {
    local pid
    for pid in "$@"; do
        if grep -E '/\.venv/|site-packages' "/proc/$pid/maps" 2>/dev/null | head -3 | grep -q .; then
            grep -E '/\.venv/|site-packages' "/proc/$pid/maps" | head -3 >&2
            fail "process $pid maps files from a virtual environment"
        fi
    done
}

echo "smoke: bundle $DIST ($(du -sh "$DIST" | cut -f1)), artifacts in $ART"
if "${CLEAN_ENV[@]}" /bin/sh -c 'command -v python3 || command -v python' >/dev/null 2>&1; then
    fail "a python is reachable on the clean PATH"
fi

# ---- 1. CLI -----------------------------------------------------------------------------------
t0=$(now_ms)
"${CLEAN_ENV[@]}" "$BIN" generate --model default --draft ngram --prompt "$PROMPT" --max-tokens 16 --json \
    >"$WORK/generate.json" 2>"$WORK/generate.err" || fail "tandem generate exited $?"
t1=$(now_ms)
cp "$WORK/generate.json" "$ART/generate.json"
grep -q '"n_generated": 16' "$WORK/generate.json" || fail "generate did not report 16 tokens: $(cat "$WORK/generate.json")"
grep -q '"speculation": "ngram"' "$WORK/generate.json" || fail "generate did not use n-gram drafting"
[[ -f "$WORK/tandem-home/models/gemma-3-270m-q4_k_m.gguf" ]] || fail "the default model was not assembled"
echo "smoke: CLI ok: 16 tokens with n-gram drafting in $((t1 - t0)) ms (first run: includes joining the default model)"
t0=$(now_ms)
"${CLEAN_ENV[@]}" "$BIN" generate --model default --prompt "Hello" --max-tokens 1 --json >/dev/null 2>"$WORK/generate2.err" \
    || fail "second tandem generate exited $?"
t1=$(now_ms)
echo "cli_generate_1_token_ms=$((t1 - t0))" >"$ART/timings.txt"

# ---- 2. Window, offscreen ---------------------------------------------------------------------
"${CLEAN_ENV[@]}" QT_QPA_PLATFORM=offscreen "$BIN" >"$WORK/gui-offscreen.out" 2>"$WORK/gui-offscreen.err" &
GUI=$!
PIDS_TO_STOP+=("$GUI")
worker=""
deadline=$(($(now_ms) + 60000))
while (($(now_ms) < deadline)); do
    kill -0 "$GUI" 2>/dev/null || { wait "$GUI" && code=0 || code=$?; fail "the offscreen app exited early ($code)"; }
    worker=$(worker_of "$GUI")
    # the project's own GGUF check maps the model before llama.cpp is imported: wait for both
    if [[ -n "$worker" ]] && grep -q 'gemma-3-270m-q4_k_m.gguf' "/proc/$worker/maps" 2>/dev/null &&
        grep -q '/libllama\.so' "/proc/$worker/maps" 2>/dev/null; then
        break
    fi
    sleep 0.2
done
[[ -n "$worker" ]] || fail "no engine worker process was started by the window"
grep -q '/libllama\.so' "/proc/$worker/maps" || fail "the worker did not load llama.cpp and the default model within 60 s"
grep -q "$DIST/_internal/llama_cpp/lib/libllama.so" "/proc/$worker/maps" || fail "the worker's llama.cpp is not the bundle's"
[[ "$(readlink "/proc/$worker/exe")" == "$BIN" ]] || fail "the worker is not the bundle's executable"
sleep "$ALIVE_S"
kill -0 "$GUI" 2>/dev/null || fail "the offscreen app died within ${ALIVE_S} s"
children=$(children_of "$GUI")
# shellcheck disable=SC2086
check_no_venv "$GUI" $children
# app/gui.py turns SIGTERM into window.close(): the same path as the close button.
kill -TERM "$GUI"
for _ in $(seq 300); do kill -0 "$GUI" 2>/dev/null || break; sleep 0.1; done
kill -0 "$GUI" 2>/dev/null && fail "the offscreen app did not exit within 30 s of SIGTERM"
code=0
wait "$GUI" || code=$?
((code == 0)) || fail "the offscreen app exited $code after SIGTERM (expected a clean close: 0)"
# shellcheck disable=SC2086
gone_within_5s $children || fail "a child process (worker or resource tracker) outlived the app by 5 s"
echo "smoke: offscreen window ok: up ${ALIVE_S} s with its engine worker (llama.cpp and the model from the bundle); closed by SIGTERM, exit 0"

# ---- 3. Window on a real X display ------------------------------------------------------------
if ! command -v Xvfb >/dev/null || ! command -v xdotool >/dev/null || ! command -v python3 >/dev/null; then
    [[ "${TANDEM_SMOKE_REQUIRE_X:-0}" == 1 ]] && fail "Xvfb, xdotool and python3 are needed for the X display step"
    echo "smoke: X display step skipped (install xvfb xdotool; see packaging/README.md)"
    echo "smoke: PASS"
    exit 0
fi
exec 5>"$WORK/display"
Xvfb -displayfd 5 -screen 0 1280x800x24 -nolisten tcp >"$WORK/xvfb.err" 2>&1 &
XVFB=$!
PIDS_TO_STOP+=("$XVFB")
for _ in $(seq 100); do [[ -s "$WORK/display" ]] && break; sleep 0.1; done
DISPLAY_NUM=":$(head -1 "$WORK/display")"
[[ "$DISPLAY_NUM" != ":" ]] || fail "Xvfb did not start"
export DISPLAY="$DISPLAY_NUM"

t0=$(now_ms)
"${CLEAN_ENV[@]}" DISPLAY="$DISPLAY" QT_QPA_PLATFORM=xcb "$BIN" >"$WORK/gui-x11.out" 2>"$WORK/gui-x11.err" &
GUI=$!
PIDS_TO_STOP+=("$GUI")
wid=""
deadline=$((t0 + 60000))
while (($(now_ms) < deadline)); do
    kill -0 "$GUI" 2>/dev/null || { wait "$GUI" && code=0 || code=$?; fail "the app exited early on X ($code)"; }
    wid=$(xdotool search --onlyvisible --pid "$GUI" --name '^Tandem' 2>/dev/null | head -1 || true)
    [[ -n "$wid" ]] && break
    sleep 0.05
done
t_visible=$(now_ms)
[[ -n "$wid" ]] || fail "no visible Tandem window within 60 s"
title=""
while (($(now_ms) < deadline)); do
    title=$(xdotool getwindowname "$wid" 2>/dev/null || true)
    [[ "$title" == "Tandem — "* ]] && break
    sleep 0.05
done
t_loaded=$(now_ms)
[[ "$title" == "Tandem — "* ]] || fail "the window title never showed a loaded model (last: '$title')"
xwd -silent -id "$wid" >"$ART/window.xwd" 2>/dev/null || true
if command -v xwdtopnm >/dev/null && command -v pnmtopng >/dev/null; then
    xwdtopnm "$ART/window.xwd" 2>/dev/null | pnmtopng >"$ART/window.png" 2>/dev/null || true
fi
geometry=$(xdotool getwindowgeometry "$wid" | tr '\n' ' ')
children=$(children_of "$GUI")
# shellcheck disable=SC2086
check_no_venv "$GUI" $children
python3 "$HERE/x11_close_window.py" "$wid" || fail "could not send WM_DELETE_WINDOW"
code=0
for _ in $(seq 300); do kill -0 "$GUI" 2>/dev/null || break; sleep 0.1; done
kill -0 "$GUI" 2>/dev/null && fail "the app did not exit within 30 s of closing its window"
wait "$GUI" || code=$?
((code == 0)) || fail "the app exited $code after its window was closed"
# shellcheck disable=SC2086
gone_within_5s $children || fail "a child process outlived the closed app by 5 s"
{
    echo "x11_launch_to_visible_window_ms=$((t_visible - t0))"
    echo "x11_launch_to_engine_loaded_ms=$((t_loaded - t0))"
    echo "x11_window=\"$title\" $geometry"
} >>"$ART/timings.txt"
echo "smoke: X11 window ok: visible after $((t_visible - t0)) ms, \"$title\" after $((t_loaded - t0)) ms; closed (WM_DELETE_WINDOW), exit 0"
echo "smoke: PASS"

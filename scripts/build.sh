#!/usr/bin/env bash
# Builds what the tests and benchmarks run besides the extension, so that nothing is built inside
# a timed test (pytest-timeout): the callgrind harness of the core's hot paths
# (rust/laminar_core/examples/hotpath.rs, release, for benches/bench_hotpath.py) and the wheel
# users install (scripts/wheel.sh, for tests/integration/test_wheel_install.py).
#
#   scripts/build.sh          both, with cargo's and maturin's progress on stderr
#
# Each artifact's path goes into .laminar/artifacts.json (read by benches/hotpath.py and the
# wheel test, which fail as a set-up failure when it is missing or older than rust/). Both builds
# are incremental in CARGO_TARGET_DIR: seconds when nothing changed, minutes from nothing on
# 2 cores. A build that does not finish within LAMINAR_BUILD_TIMEOUT_S (default 2700 s) stops
# and fails the set-up, saying which and why.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$LAMINAR_ROOT"

py="$LAMINAR_VENV/bin/python"
limit="${LAMINAR_BUILD_TIMEOUT_S:-2700}"
manifest="$LAMINAR_ROOT/.laminar/artifacts.json"
mkdir -p "$(dirname "$manifest")"
rm -f "$manifest"

# bounded WHAT COMMAND...: runs COMMAND under the time limit; a timeout is a set-up failure.
bounded() {
    local what="$1"
    shift
    local start=$SECONDS rc=0
    timeout --foreground --kill-after=30 "$limit" "$@" || rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "set-up failure: building $what did not finish within ${limit} s" \
            "(LAMINAR_BUILD_TIMEOUT_S); a cold cargo target dir ($CARGO_TARGET_DIR) on a" \
            "loaded machine can take that long: run ./dev build again, or raise the limit" >&2
        return 1
    fi
    if [ "$rc" -ne 0 ]; then
        echo "set-up failure: building $what failed (exit $rc); its output is above" >&2
        return "$rc"
    fi
    laminar_note "built $what in $((SECONDS - start)) s" >&2
}

laminar_header "build: the hotpath harness (cargo build --release --example hotpath)"
messages="$(mktemp)"
trap 'rm -f "$messages"' EXIT
bounded "the hotpath harness" \
    cargo build --release --locked -p laminar_core --example hotpath \
    --message-format=json-render-diagnostics >"$messages"
hotpath="$("$py" - "$messages" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
            and m["target"]["name"] == "hotpath":
        print(m["executable"])
EOF
)"
if [ -z "$hotpath" ] || [ ! -x "$hotpath" ]; then
    echo "set-up failure: cargo built no hotpath executable" >&2
    exit 1
fi

laminar_header "build: the wheel (scripts/wheel.sh)"
wheel_out="$(mktemp)"
trap 'rm -f "$messages" "$wheel_out"' EXIT
bounded "the wheel" bash "$LAMINAR_ROOT/scripts/wheel.sh" >"$wheel_out"
wheel_line="$(tail -n 1 "$wheel_out")"

"$py" - "$manifest" "$hotpath" "$wheel_line" <<'EOF'
import json, sys, time
manifest, hotpath, wheel_line = sys.argv[1:]
wheel, glibc = wheel_line.split("\t")
json.dump(
    {"hotpath": hotpath, "wheel": wheel, "wheel_glibc": glibc, "built_at": time.time()},
    open(manifest, "w"),
    indent=2,
)
EOF
laminar_note "artifacts: $manifest"

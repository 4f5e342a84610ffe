#!/usr/bin/env bash
# Builds the wheel users install, on a Spark client and on a Spark Connect server (its
# PYSPARK_PYTHON): laminar-<version>-cp310-abi3-manylinux2014_<arch>.manylinux_2_17_<arch>.whl, one
# file for every CPython >= 3.10 on any Linux with glibc >= 2.17 (Amazon Linux 2, RHEL/Rocky 8,
# Ubuntu 20.04, Debian 11 and later).
#
#   scripts/wheel.sh [TARGET...]   TARGET: a Rust target triple, by default this machine's
#                                  (x86_64-unknown-linux-gnu); aarch64-unknown-linux-gnu too, its
#                                  standard library added by `rustup target add` when missing.
#
# maturin links the extension with zig (PyPI's `ziglang`) against glibc 2.17's symbols, so this
# machine's newer glibc does not leak into the wheel (a plain `maturin build` on Debian 12 gives
# manylinux_2_34). `auditwheel show` (the dev extras) then checks each wheel: the build fails
# unless it reports manylinux_2_17. Wheels go to dist/ (a target's older wheels are removed
# first); stdout is one line per wheel: its path, a tab, the newest glibc symbol version it needs.
#
# Idempotent and incremental: cargo rebuilds only what changed, in a directory per target under
# CARGO_TARGET_DIR (scripts/common.sh), so a repeated build takes seconds. maturin and zig live in
# a virtualenv of their own at a fixed place in the machine's cache, installed on first use:
# cargo fingerprints the linker, and maturin's zig linker names the paths of maturin and of the
# Python that runs zig — tools inside a fresh clone's .venv would make every clone (CI) rebuild
# every crate.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$LAMINAR_ROOT"

# manylinux2014 = glibc 2.17: the oldest glibc Rust's *-linux-gnu targets support.
policy=manylinux_2_17
dist="$LAMINAR_ROOT/dist"
# ziglang below 0.18: the zig release line this build was tested with (zig's CLI changes often).
tool_requirements=("maturin>=1.9,<2" "ziglang>=0.17,<0.18")

if [ ! -x "$LAMINAR_VENV/bin/auditwheel" ]; then
    echo "wheel: $LAMINAR_VENV/bin/auditwheel is missing: run ./dev bootstrap (the dev extras)" >&2
    exit 1
fi

# -- the build tools ------------------------------------------------------------------------------

# Same cache as scripts/bootstrap.sh's jars; one tools virtualenv per requirement set and Python.
LAMINAR_CACHE="${LAMINAR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/laminar}"
python="${LAMINAR_PYTHON:-python3}"
tools_key="$( (printf '%s\n' "${tool_requirements[@]}" && "$python" -VV) | sha256sum | cut -c1-12)"
tools="$LAMINAR_CACHE/wheel-tools-$tools_key"
if [ ! -f "$tools/.complete" ]; then
    mkdir -p "$LAMINAR_CACHE"
    (
        flock 8
        [ -f "$tools/.complete" ] && exit 0
        laminar_note "installing ${tool_requirements[*]} into $tools" >&2
        rm -rf "$tools"
        "$python" -m venv "$tools"
        "$tools/bin/python" -m pip install --quiet --disable-pip-version-check \
            "${tool_requirements[@]}" >&2
        touch "$tools/.complete"
    ) 8>"$LAMINAR_CACHE/.wheel-tools.lock"
fi
# maturin runs zig as `python3 -m ziglang`, with the first python3 on PATH: the tools'.
export PATH="$tools/bin:$PATH"

# -- the wheels -----------------------------------------------------------------------------------

# A wheel's needs per `auditwheel show`: "<platform tag>\t<newest GLIBC_ version>".
wheel_needs() {
    "$LAMINAR_VENV/bin/auditwheel" show "$1" | "$LAMINAR_VENV/bin/python" -c '
import re, sys
report = " ".join(sys.stdin.read().split())
tag = re.search(r"consistent with the following platform tag: \"([^\"]+)\"", report)
glibc = {tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_(\d+(?:\.\d+)+)", report)}
newest = ".".join(map(str, max(glibc))) if glibc else "none"
print(tag[1] if tag else "none", newest, sep="\t")
'
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("$(rustc -vV | sed -n 's/^host: //p')")

mkdir -p "$dist"
laminar_build_lock
built=()
for target in "${targets[@]}"; do
    arch="${target%%-*}"
    if [ ! -d "$(rustc --print target-libdir --target "$target")" ]; then
        laminar_note "adding the Rust standard library for $target (rustup target add)" >&2
        rustup target add "$target" >&2
    fi
    laminar_header "wheel for $target ($policy, abi3)" >&2
    rm -f "$dist"/laminar-*-abi3-*_"$arch".whl
    maturin build --release --locked --strip --zig --target "$target" \
        --compatibility "$policy" --out "$dist" >&2
    wheels=("$dist"/laminar-*-abi3-*_"$arch".whl)
    if [ ${#wheels[@]} -ne 1 ] || [ ! -f "${wheels[0]}" ]; then
        echo "wheel: expected one wheel for $arch in $dist, found: ${wheels[*]}" >&2
        exit 1
    fi
    needs="$(wheel_needs "${wheels[0]}")"
    if [ "${needs%%$'\t'*}" != "${policy}_$arch" ]; then
        echo "wheel: auditwheel show does not accept ${wheels[0]} as ${policy}_$arch:" >&2
        "$LAMINAR_VENV/bin/auditwheel" show "${wheels[0]}" >&2
        exit 1
    fi
    laminar_note "$(basename "${wheels[0]}"): auditwheel: ${policy}_$arch;" \
        "newest glibc symbol version: GLIBC_${needs##*$'\t'}" >&2
    built+=("${wheels[0]}"$'\t'"${needs##*$'\t'}")
done
printf '%s\n' "${built[@]}"

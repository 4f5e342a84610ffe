# Shared by ./dev and scripts/bootstrap.sh (sourced, not run). Sets:
#   LAMINAR_ROOT   the repository root, whatever the caller's working directory
#   LAMINAR_VENV   the virtualenv (default: $LAMINAR_ROOT/.venv)
#   CARGO_TARGET_DIR, exported for cargo and maturin alike:
#     - kept if the caller set it;
#     - under CI=true, a directory in the machine's cache (~/.cache/laminar/cargo-target), so
#       that a fresh clone reuses compiled dependencies; nothing depends on it being there;
#     - otherwise the workspace's own target/ (each git worktree builds on its own).
LAMINAR_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LAMINAR_VENV="${LAMINAR_VENV:-$LAMINAR_ROOT/.venv}"
export LAMINAR_ROOT LAMINAR_VENV

laminar_in_ci() {
    case "${CI:-}" in
        true | TRUE | True | 1 | yes) return 0 ;;
        *) return 1 ;;
    esac
}

if [ -z "${CARGO_TARGET_DIR:-}" ]; then
    if laminar_in_ci; then
        CARGO_TARGET_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/laminar/cargo-target"
    else
        CARGO_TARGET_DIR="$LAMINAR_ROOT/target"
    fi
fi
export CARGO_TARGET_DIR

# Section headers and notes, to stderr-safe stdout.
laminar_header() {
    printf '\n\033[1m==== %s ====\033[0m\n' "$*"
}

laminar_note() {
    printf '[laminar] %s\n' "$*"
}

# Hold, until the calling script exits, the lock of CARGO_TARGET_DIR's build: cargo locks the
# directory only while it compiles, so two checkouts sharing it (CI=true) could otherwise package
# each other's freshly built extension (maturin copies it out after cargo's lock is released).
laminar_build_lock() {
    mkdir -p "$CARGO_TARGET_DIR"
    exec 7>"$CARGO_TARGET_DIR/.laminar-build.lock"
    flock 7
}

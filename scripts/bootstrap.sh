#!/usr/bin/env bash
# Idempotent set-up of everything the tests, benchmarks and `laminar demo` need, on Debian 12
# with a Rust toolchain and Python >= 3.10:
#   1. system packages, with apt-get, only when missing (no apt-get update otherwise):
#      PostgreSQL 15 server, a Java 17 runtime (Spark), the PostgreSQL JDBC driver (Spark JDBC
#      benchmarks), a C linker for Rust, Python's venv module, Prometheus (the alert rules'
#      tests: promtool and a real server);
#   2. a virtualenv ($LAMINAR_VENV, default .venv) with laminar installed editable with its dev
#      extras; the Rust extension is built in release by maturin. It is rebuilt only when the
#      Rust sources or the packaging changed since the last run;
#   3. Java jars from Maven Central, with mvn, into the machine's cache ($LAMINAR_CACHE, default
#      ~/.cache/laminar), each set resolved once and again only when its pom changed: the Apache
#      Kafka broker the tests run (scripts/kafka/broker/pom.xml → kafka-<version>/libs) and Spark's
#      Kafka connector for the Spark Connect server (scripts/kafka/spark/pom.xml →
#      spark-sql-kafka-<version>/jars). Nothing is downloaded at test time.
# The pip cache (~/.cache/pip) and the cargo target dir (see scripts/common.sh) stay in their
# usual places on the machine; a clean machine works too, just slower.
# Works from any working directory; safe to run concurrently (a lock serialises runs).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$LAMINAR_ROOT"

python="${LAMINAR_PYTHON:-python3}"

# -- 1. system packages ---------------------------------------------------------------------------

missing=()
pg_bindir_ok() {
    local dir="${LAMINAR_PG_BINDIR:-/usr/lib/postgresql/15/bin}"
    [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ]
}
pg_bindir_ok || missing+=(postgresql-15)
command -v java >/dev/null 2>&1 || [ -x "${JAVA_HOME:-/nonexistent}/bin/java" ] ||
    missing+=(openjdk-17-jre-headless)
[ -f /usr/share/java/postgresql.jar ] || missing+=(libpostgresql-jdbc-java)
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v useradd >/dev/null 2>&1 || [ -x /usr/sbin/useradd ] || missing+=(passwd)
"$python" -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
# The benchmark gates count the core's instructions with callgrind (benches/hotpath.py).
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
# The alert rules' tests: promtool and a real Prometheus (laminar.embedded.PrometheusServer).
prometheus_missing=0
command -v promtool >/dev/null 2>&1 || [ -x "${LAMINAR_PROMETHEUS_BIN:-/nonexistent}" ] ||
    { missing+=(prometheus); prometheus_missing=1; }

if [ ${#missing[@]} -gt 0 ]; then
    laminar_note "installing system packages: ${missing[*]}"
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo=(sudo)
        else
            echo "bootstrap: missing system packages (${missing[*]}) and not root; install them with apt-get" >&2
            exit 1
        fi
    fi
    # The Debian postgresql package would otherwise create and start a "main" cluster on
    # port 5432; Laminar starts its own clusters on free ports.
    "${sudo[@]}" mkdir -p /etc/postgresql-common/createcluster.d
    echo "create_main_cluster = false" |
        "${sudo[@]}" tee /etc/postgresql-common/createcluster.d/laminar-no-main-cluster.conf >/dev/null
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # Debian's package enables a prometheus service on :9090; the tests start their own.
    if [ "$prometheus_missing" = 1 ] && [ -d /run/systemd/system ]; then
        "${sudo[@]}" systemctl disable --now prometheus >/dev/null 2>&1 || true
    fi
else
    laminar_note "system packages present (PostgreSQL 15, Java, JDBC driver, C linker, Maven, Prometheus)"
fi

# -- 2. the virtualenv ----------------------------------------------------------------------------

"$python" - <<'EOF'
import sys
if sys.version_info < (3, 10):
    sys.exit(f"bootstrap: Python >= 3.10 needed, {sys.executable} is {sys.version.split()[0]}")
EOF

mkdir -p "$(dirname "$LAMINAR_VENV")"
exec 9>"$LAMINAR_VENV.lock"
flock 9

if [ ! -x "$LAMINAR_VENV/bin/python" ]; then
    laminar_note "creating $LAMINAR_VENV"
    "$python" -m venv "$LAMINAR_VENV"
    "$LAMINAR_VENV/bin/python" -m pip install --quiet --upgrade pip
fi

# What the installed environment was built from: the packaging (pyproject's [build-system],
# [project*] and [tool.maturin] tables; tool settings such as ruff's do not count) and the Rust
# sources (the extension). Either changing triggers the matching reinstall.
packaging() {
    awk '/^\[/ { keep = ($0 ~ /^\[(build-system|project|project\..*|tool\.maturin)\]$/) } keep' \
        "$LAMINAR_ROOT/pyproject.toml"
}
rust_sources() {
    (cd "$LAMINAR_ROOT" && find Cargo.toml Cargo.lock rust -type f \
        \( -name '*.rs' -o -name '*.toml' -o -name 'Cargo.lock' \) -print0 |
        LC_ALL=C sort -z | xargs -0 sha256sum)
}
deps_stamp="$LAMINAR_VENV/.laminar-deps"
ext_stamp="$LAMINAR_VENV/.laminar-ext"
deps_now="$(packaging | sha256sum | cut -d' ' -f1)"
ext_now="$( (packaging; rust_sources) | sha256sum | cut -d' ' -f1)"
deps_was="$(cat "$deps_stamp" 2>/dev/null || true)"
ext_was="$(cat "$ext_stamp" 2>/dev/null || true)"
extension_imports() {
    "$LAMINAR_VENV/bin/python" -c 'import laminar._core' >/dev/null 2>&1
}

laminar_build_lock
if [ "$deps_now" != "$deps_was" ]; then
    laminar_note "installing laminar (editable, dev extras; builds the Rust extension in release)"
    "$LAMINAR_VENV/bin/python" -m pip install --quiet -e ".[dev]"
    echo "$deps_now" >"$deps_stamp"
    echo "$ext_now" >"$ext_stamp"
elif [ "$ext_now" != "$ext_was" ] || ! extension_imports; then
    laminar_note "rebuilding the Rust extension (release)"
    "$LAMINAR_VENV/bin/python" -m pip install --quiet --no-deps -e .
    echo "$ext_now" >"$ext_stamp"
else
    laminar_note "virtualenv up to date ($LAMINAR_VENV)"
fi

# -- 3. Java jars from Maven Central ------------------------------------------------------------

# laminar.embedded reads the same variable, with the same default.
LAMINAR_CACHE="${LAMINAR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/laminar}"
export LAMINAR_CACHE

# maven_jars POM PROPERTY NAME SUBDIR [GOAL]: copies (GOAL unpack-dependencies: unpacks) the
# runtime dependencies of POM into
# $LAMINAR_CACHE/NAME-<PROPERTY's value>/SUBDIR, unless the pom is unchanged since the last
# copy there (its sha256 is kept beside the jars). The copy is made aside and renamed into place,
# under a lock of the cache's own, so concurrent runs (other worktrees) never see half a set.
maven_jars() {
    local pom="$1" property="$2" name="$3" subdir="$4" goal="${5:-copy-dependencies}"
    local version
    version="$(sed -n "s:.*<$property>\(.*\)</$property>.*:\1:p" "$pom" | head -n1)"
    if [ -z "$version" ]; then
        echo "bootstrap: no <$property> in $pom" >&2
        return 1
    fi
    local home="$LAMINAR_CACHE/$name-$version"
    local stamp="$home/.pom-sha256"
    local want
    want="$(sha256sum "$pom" | cut -d' ' -f1)"
    if [ "$(cat "$stamp" 2>/dev/null || true)" = "$want" ] && [ -d "$home/$subdir" ]; then
        laminar_note "$name $version jars present ($home/$subdir)"
        return 0
    fi
    mkdir -p "$LAMINAR_CACHE"
    (
        flock 8
        if [ "$(cat "$stamp" 2>/dev/null || true)" = "$want" ] && [ -d "$home/$subdir" ]; then
            exit 0
        fi
        laminar_note "resolving $name $version with Maven into $home/$subdir"
        local staging="$home.partial"
        rm -rf "$staging"
        mkdir -p "$staging"
        # -B: no progress bars; -q: errors only (Maven 3.8 still prints colour resets: dropped).
        # The local repository (~/.m2) caches the downloads.
        mvn -q -B -f "$pom" "dependency:$goal" -DincludeScope=runtime \
            -DoutputDirectory="$staging/$subdir" 2>&1 | sed 's/\x1b\[[0-9;]*m//g' >&2
        echo "$want" >"$staging/.pom-sha256"
        rm -rf "$home"
        mv "$staging" "$home"
    ) 8>"$LAMINAR_CACHE/.maven.lock"
}

maven_jars scripts/kafka/broker/pom.xml kafka.version kafka libs
maven_jars scripts/kafka/spark/pom.xml spark.kafka.version spark-sql-kafka jars
# Avro tests: Apicurio Registry (its Confluent-compatible API), and Spark's from_avro/to_avro.
maven_jars scripts/registry/pom.xml apicurio.version apicurio-registry app unpack-dependencies
maven_jars scripts/avro/spark/pom.xml spark.avro.version spark-avro jars

# -- summary --------------------------------------------------------------------------------------

"$LAMINAR_VENV/bin/python" - <<'EOF'
import laminar
from laminar.embedded import find_kafka_libs, find_pg_bindir, find_tansu_binary
from laminar.embedded.spark import find_spark_home, find_spark_kafka_jars
import pyspark

print(f"[laminar] laminar {laminar.__version__}; PostgreSQL: {find_pg_bindir()}; "
      f"Tansu: {find_tansu_binary()}; Apache Kafka: {find_kafka_libs()}; "
      f"pyspark {pyspark.__version__}: {find_spark_home()} "
      f"(+ {len(find_spark_kafka_jars())} Kafka connector jars)")
EOF

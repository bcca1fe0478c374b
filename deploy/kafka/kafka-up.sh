#!/usr/bin/env bash
# Start a single-node Apache Kafka 4.x broker (KRaft, combined broker + controller) from the
# official jars on Maven Central, for development, tests and CI. Loopback only.
#
#   deploy/kafka/kafka-up.sh            # works from any directory
#
# Steps: resolve the jars into deploy/kafka/lib/ (Maven, deploy/pom.xml) when missing or
# stale; render server.properties from server.properties.template into the state dir;
# format the storage once (random cluster id); start `kafka.Kafka` in the background with a
# PID file and a log file; wait until the broker answers a metadata request with itself
# in it. Exits 0 at once when the broker of this state dir is already running and healthy.
# On failure it exits non-zero and prints the tail of the broker log.
#
# Environment (all optional):
#   KAFKA_PORT              client listener port, 127.0.0.1 only      (default 9092)
#   KAFKA_CONTROLLER_PORT   KRaft controller listener port           (default 9093)
#   KAFKA_STATE_DIR         data, rendered config, PID and log files (default deploy/kafka/data)
#                           a relative path is taken from the current directory
#   KAFKA_START_TIMEOUT     seconds to wait for readiness             (default 60)
#   KAFKA_HEAP_OPTS         JVM heap flags                            (default -Xmx1g -Xms256m)
#   KAFKA_JVM_OPTS          extra JVM flags
#   KAFKA_LOG_LEVEL         root log level                            (default INFO)
#   KAFKA_EXTRA_PROPERTIES  lines appended to server.properties (a later key wins)
#   KAFKA_PYTHON            Python with confluent_kafka for the readiness check
#                           (default: the repo's .venv, else python3; without
#                           confluent_kafka the check is port open + "Kafka Server started")
#   JAVA                    java binary (default: $JAVA_HOME/bin/java, else java on PATH)
#   MVN                     mvn binary (default mvn)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEPLOY_DIR="$(dirname "$SCRIPT_DIR")"
REPO_ROOT="$(dirname "$DEPLOY_DIR")"
POM="$DEPLOY_DIR/pom.xml"
LIB_DIR="$SCRIPT_DIR/lib"
TEMPLATE="$SCRIPT_DIR/server.properties.template"
LOG4J_CONFIG="$SCRIPT_DIR/log4j2.xml"

KAFKA_PORT="${KAFKA_PORT:-9092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-9093}"
KAFKA_STATE_DIR="${KAFKA_STATE_DIR:-$SCRIPT_DIR/data}"
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-60}"
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx1g -Xms256m}"
KAFKA_JVM_OPTS="${KAFKA_JVM_OPTS:-}"
KAFKA_LOG_LEVEL="${KAFKA_LOG_LEVEL:-INFO}"
KAFKA_EXTRA_PROPERTIES="${KAFKA_EXTRA_PROPERTIES:-}"
MVN="${MVN:-mvn}"

log() { printf 'kafka-up: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

for name in KAFKA_PORT KAFKA_CONTROLLER_PORT KAFKA_START_TIMEOUT; do
    [[ "${!name}" =~ ^[0-9]+$ ]] || die "$name must be a number, got '${!name}'"
done
[[ "$KAFKA_PORT" != "$KAFKA_CONTROLLER_PORT" ]] || die "KAFKA_PORT and KAFKA_CONTROLLER_PORT are both $KAFKA_PORT"

mkdir -p "$KAFKA_STATE_DIR"
STATE_DIR="$(cd "$KAFKA_STATE_DIR" && pwd)"
PROPS="$STATE_DIR/server.properties"
PID_FILE="$STATE_DIR/kafka.pid"
LOG_FILE="$STATE_DIR/kafka.log"
LOG_DIRS="$STATE_DIR/kraft-combined-logs"
BOOTSTRAP="127.0.0.1:$KAFKA_PORT"

# ---------------------------------------------------------------- helpers
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# PID of the broker of this state dir if it is running, else nothing (and no PID file left).
running_pid() {
    local pid
    [[ -f "$PID_FILE" ]] || return 0
    pid="$(tr -dc '0-9' <"$PID_FILE")"
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null \
        && ps -ww -o args= -p "$pid" 2>/dev/null | grep -qF -- "kafka.Kafka $PROPS"; then
        echo "$pid"
    else
        rm -f "$PID_FILE"
    fi
}

pick_python() {
    local candidate
    for candidate in "${KAFKA_PYTHON:-}" "$REPO_ROOT/.venv/bin/python" python3; do
        [[ -n "$candidate" ]] || continue
        if command -v "$candidate" >/dev/null 2>&1 \
            && "$candidate" -c 'import confluent_kafka' >/dev/null 2>&1; then
            echo "$candidate"
            return 0
        fi
    done
    return 0
}

# One readiness probe: a metadata request answered with broker 1 in it (a fenced broker
# is left out of metadata answers, so this also means the controller has unfenced it).
PYTHON="$(pick_python)"
probe() {
    port_open "$KAFKA_PORT" || return 1
    if [[ -n "$PYTHON" ]]; then
        "$PYTHON" - "$BOOTSTRAP" <<'PY' >/dev/null 2>&1
import sys

from confluent_kafka.admin import AdminClient

admin = AdminClient({"bootstrap.servers": sys.argv[1], "log_level": 0})
metadata = admin.list_topics(timeout=5)
sys.exit(0 if 1 in metadata.brokers else 1)
PY
    else
        tail -n 200 "$LOG_FILE" 2>/dev/null | grep -q "Kafka Server started"
    fi
}

show_log_tail() {
    log "last 60 lines of $LOG_FILE:"
    tail -n 60 "$LOG_FILE" >&2 2>/dev/null || true
}

wait_ready() {  # wait_ready PID
    local pid="$1" deadline=$((SECONDS + KAFKA_START_TIMEOUT))
    while ((SECONDS < deadline)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$PID_FILE"
            show_log_tail
            die "the broker (pid $pid) exited during start-up"
        fi
        if probe; then
            return 0
        fi
        sleep 0.5
    done
    show_log_tail
    die "the broker (pid $pid) was not ready on $BOOTSTRAP after ${KAFKA_START_TIMEOUT}s; it is left running (stop it with kafka-down.sh)"
}

# ---------------------------------------------------------------- already running?
exec 8>"$STATE_DIR/.kafka-up.lock"
flock 8 || die "could not lock $STATE_DIR"

pid="$(running_pid)"
if [[ -n "$pid" ]]; then
    running_port="$(sed -n 's/^listeners=PLAINTEXT:\/\/127\.0\.0\.1:\([0-9]*\),.*/\1/p' "$PROPS" | tail -n1)"
    if [[ -n "$running_port" && "$running_port" != "$KAFKA_PORT" ]]; then
        die "the broker of $STATE_DIR (pid $pid) already runs on port $running_port, not $KAFKA_PORT; stop it first (kafka-down.sh)"
    fi
    log "already running (pid $pid, state $STATE_DIR); checking health"
    wait_ready "$pid"
    log "healthy on $BOOTSTRAP"
    echo "$BOOTSTRAP"
    exit 0
fi

for port in "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT"; do
    if port_open "$port"; then
        die "port $port on 127.0.0.1 is already in use by another process (set KAFKA_PORT / KAFKA_CONTROLLER_PORT)"
    fi
done

# ---------------------------------------------------------------- java
if [[ -n "${JAVA:-}" ]]; then
    :
elif [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
    JAVA="$JAVA_HOME/bin/java"
else
    JAVA="java"
fi
command -v "$JAVA" >/dev/null 2>&1 || die "java not found (Kafka 4 needs Java 17 or newer; set JAVA or JAVA_HOME)"
java_major="$({ "$JAVA" -version 2>&1 || true; } | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)"
[[ -n "$java_major" && "$java_major" -ge 17 ]] || die "Kafka 4 needs Java 17 or newer; $JAVA is version '${java_major:-unknown}'"

# ---------------------------------------------------------------- jars
# Resolved again when deploy/pom.xml changes (its hash is kept in lib/.pom.sha256), so a
# version bump never leaves old and new jars side by side.
mkdir -p "$LIB_DIR"
(
    flock 9 || die "could not lock $LIB_DIR"
    pom_hash="$(sha256sum "$POM" | cut -d' ' -f1)"
    if [[ "$(cat "$LIB_DIR/.pom.sha256" 2>/dev/null)" == "$pom_hash" ]] \
        && compgen -G "$LIB_DIR/kafka_2.13-*.jar" >/dev/null; then
        exit 0
    fi
    command -v "$MVN" >/dev/null 2>&1 || die "Maven ($MVN) not found; it resolves the Kafka jars from Maven Central"
    log "resolving the Kafka jars into $LIB_DIR (Maven, $POM)"
    rm -f "$LIB_DIR"/*.jar "$LIB_DIR/.pom.sha256"
    # -q prints only errors (and colour resets, stripped here); shown only on failure.
    if ! mvn_out="$("$MVN" -q -B -f "$POM" dependency:copy-dependencies -Dkafka.lib.dir="$LIB_DIR" </dev/null 2>&1)"; then
        printf '%s\n' "$mvn_out" | sed 's/\x1b\[[0-9;]*m//g' >&2
        die "Maven could not resolve the jars of $POM"
    fi
    compgen -G "$LIB_DIR/kafka_2.13-*.jar" >/dev/null || die "no kafka_2.13 jar in $LIB_DIR after resolving"
    echo "$pom_hash" >"$LIB_DIR/.pom.sha256"
) 9>"$LIB_DIR/.lock"

CLASSPATH_ARG="$LIB_DIR/*"

# ---------------------------------------------------------------- config
rendered="$(sed \
    -e "s|@KAFKA_PORT@|$KAFKA_PORT|g" \
    -e "s|@KAFKA_CONTROLLER_PORT@|$KAFKA_CONTROLLER_PORT|g" \
    -e "s|@KAFKA_LOG_DIRS@|$LOG_DIRS|g" \
    "$TEMPLATE")"
{
    printf '%s\n' "$rendered"
    if [[ -n "$KAFKA_EXTRA_PROPERTIES" ]]; then
        printf '\n# KAFKA_EXTRA_PROPERTIES\n%s\n' "$KAFKA_EXTRA_PROPERTIES"
    fi
} >"$PROPS.tmp"
mv "$PROPS.tmp" "$PROPS"

# ---------------------------------------------------------------- format (once)
if [[ ! -f "$LOG_DIRS/meta.properties" ]]; then
    # What `StorageTool random-uuid` prints (16 random bytes, URL-safe base64 without
    # padding, not starting with '-'), without a second JVM start.
    cluster_id="-"
    while [[ "$cluster_id" == -* ]]; do
        cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    done
    [[ "$cluster_id" =~ ^[A-Za-z0-9_-]{22}$ ]] || die "could not make a cluster id (got '$cluster_id')"
    log "formatting $LOG_DIRS (cluster id $cluster_id)"
    format_out="$("$JAVA" -Dlog4j2.configurationFile="$LOG4J_CONFIG" -Dkafka.root.log.level=WARN \
        -cp "$CLASSPATH_ARG" kafka.tools.StorageTool format \
        --cluster-id "$cluster_id" --config "$PROPS" 2>&1)" \
        || { printf '%s\n' "$format_out" >&2; die "formatting the storage failed"; }
fi

# ---------------------------------------------------------------- start
[[ -f "$LOG_FILE" ]] && mv -f "$LOG_FILE" "$LOG_FILE.1"
printf '=== kafka-up %s: starting on %s (controller %s)\n' \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$BOOTSTRAP" "127.0.0.1:$KAFKA_CONTROLLER_PORT" >"$LOG_FILE"

# shellcheck disable=SC2086  # heap and JVM options are word lists
setsid "$JAVA" $KAFKA_HEAP_OPTS \
    -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
    -XX:+ExplicitGCInvokesConcurrent -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$LOG4J_CONFIG" -Dkafka.root.log.level="$KAFKA_LOG_LEVEL" \
    -Dkafka.logs.dir="$STATE_DIR" -Dlog4j2.shutdownHookEnabled=false \
    $KAFKA_JVM_OPTS \
    -cp "$CLASSPATH_ARG" kafka.Kafka "$PROPS" \
    </dev/null >>"$LOG_FILE" 2>&1 8>&- &
pid=$!
echo "$pid" >"$PID_FILE"
log "started pid $pid (state $STATE_DIR, log $LOG_FILE); waiting up to ${KAFKA_START_TIMEOUT}s"

started_ms=$(($(date +%s%N) / 1000000))
wait_ready "$pid"
elapsed_ms=$(($(date +%s%N) / 1000000 - started_ms))
log "ready on $BOOTSTRAP after $((elapsed_ms / 1000)).$(printf '%03d' $((elapsed_ms % 1000)))s"
echo "$BOOTSTRAP"

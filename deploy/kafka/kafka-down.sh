#!/usr/bin/env bash
# Stop the broker started by kafka-up.sh for a state dir: SIGTERM (a controlled shutdown
# that flushes the logs), wait, SIGKILL after KAFKA_STOP_TIMEOUT seconds; remove the PID
# file. Exits 0 when it was not running.
#
#   deploy/kafka/kafka-down.sh           # keep the data
#   deploy/kafka/kafka-down.sh --wipe    # and delete the state dir (topics, offsets, logs)
#
# Environment (all optional):
#   KAFKA_STATE_DIR       the state dir given to kafka-up.sh (default deploy/kafka/data);
#                         when its broker is not running but another broker started by
#                         kafka-up.sh is, a warning on stderr names its pid and state dir
#   KAFKA_STOP_TIMEOUT    seconds between SIGTERM and SIGKILL (default 30)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KAFKA_STATE_DIR="${KAFKA_STATE_DIR:-$SCRIPT_DIR/data}"
KAFKA_STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"

log() { printf 'kafka-down: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Brokers started by kafka-up.sh (its log4j2.xml and `kafka.Kafka <state dir>/server.properties`
# on the command line) for another state dir: warn, so a forgotten KAFKA_STATE_DIR does not
# pass for "stopped".
warn_other_brokers() {  # warn_other_brokers [STATE_DIR we looked at]
    local line pid props dir
    while read -r line; do
        pid="${line%% *}"
        props="$(sed -n 's/.* kafka\.Kafka \([^ ]*server\.properties\).*/\1/p' <<<"$line")"
        dir="$(dirname "${props:-?}")"
        [[ "$dir" == "${1:-}" ]] && continue
        log "warning: a broker started by kafka-up.sh is still running: pid $pid, state dir $dir"
        log "warning: stop it with: KAFKA_STATE_DIR=$dir $0"
    done < <(ps -ww -eo pid=,args= 2>/dev/null \
        | grep -F -- "-Dlog4j2.configurationFile=$SCRIPT_DIR/log4j2.xml" \
        | grep -F -- " kafka.Kafka " | sed 's/^ *//' || true)
}

wipe=0
for arg in "$@"; do
    case "$arg" in
        --wipe) wipe=1 ;;
        -h | --help)
            sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *) die "unknown argument '$arg' (only --wipe)" ;;
    esac
done
[[ "$KAFKA_STOP_TIMEOUT" =~ ^[0-9]+$ ]] || die "KAFKA_STOP_TIMEOUT must be a number"

if [[ ! -d "$KAFKA_STATE_DIR" ]]; then
    log "not running (no state dir $KAFKA_STATE_DIR)"
    warn_other_brokers
    exit 0
fi
STATE_DIR="$(cd "$KAFKA_STATE_DIR" && pwd)"
PROPS="$STATE_DIR/server.properties"
PID_FILE="$STATE_DIR/kafka.pid"

pid=""
if [[ -f "$PID_FILE" ]]; then
    pid="$(tr -dc '0-9' <"$PID_FILE")"
fi

# Only signal the process if it still is this state dir's broker (PIDs get reused).
if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null \
    && ps -ww -o args= -p "$pid" 2>/dev/null | grep -qF -- "kafka.Kafka $PROPS"; then
    log "stopping pid $pid (SIGTERM, SIGKILL after ${KAFKA_STOP_TIMEOUT}s)"
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + KAFKA_STOP_TIMEOUT))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "still running after ${KAFKA_STOP_TIMEOUT}s: SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    fi
    log "stopped"
else
    log "not running (state $STATE_DIR)"
    warn_other_brokers "$STATE_DIR"
fi
rm -f "$PID_FILE"

if ((wipe)); then
    # Refuse to delete anything that does not look like a kafka-up.sh state dir.
    case "$STATE_DIR" in
        / | "${HOME:-/}" | "$SCRIPT_DIR" | "$(dirname "$SCRIPT_DIR")" | "$(dirname "$(dirname "$SCRIPT_DIR")")")
            die "refusing to wipe $STATE_DIR" ;;
    esac
    if [[ -n "$(ls -A "$STATE_DIR")" && ! -f "$PROPS" && ! -d "$STATE_DIR/kraft-combined-logs" ]]; then
        die "refusing to wipe $STATE_DIR: it is not a kafka-up.sh state dir"
    fi
    rm -rf "$STATE_DIR"
    log "wiped $STATE_DIR"
fi

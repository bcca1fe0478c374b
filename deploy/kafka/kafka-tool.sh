#!/usr/bin/env bash
# Run one of Kafka's operator tools from the jars kafka-up.sh resolved (deploy/kafka/lib),
# as the distribution's bin/*.sh scripts would, against the broker of this project:
#
#   deploy/kafka/kafka-tool.sh transactions list
#   deploy/kafka/kafka-tool.sh transactions find-hanging --broker-id 1
#   deploy/kafka/kafka-tool.sh transactions describe-producers --topic __consumer_offsets --partition 3
#   deploy/kafka/kafka-tool.sh transactions abort --topic T --partition P --start-offset N
#   deploy/kafka/kafka-tool.sh consumer-groups --describe --group G
#
# The first argument names the tool (transactions, consumer-groups, topics); the rest are
# its own arguments. --bootstrap-server is added (127.0.0.1:$KAFKA_PORT) unless given.
#
# Environment (all optional):
#   KAFKA_PORT   the broker's port (default 9092)
#   JAVA         java binary (default: $JAVA_HOME/bin/java, else java on PATH)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LIB_DIR="$SCRIPT_DIR/lib"
die() { printf 'kafka-tool: error: %s\n' "$*" >&2; exit 1; }

[[ $# -ge 1 ]] || die "name a tool: transactions, consumer-groups or topics (see --help)"
case "$1" in
    -h | --help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    transactions) class=org.apache.kafka.tools.TransactionsCommand ;;
    consumer-groups) class=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
    topics) class=org.apache.kafka.tools.TopicCommand ;;
    *) die "unknown tool '$1' (transactions, consumer-groups or topics)" ;;
esac
shift
compgen -G "$LIB_DIR/kafka-tools-*.jar" >/dev/null \
    || die "no kafka-tools jar in $LIB_DIR: run deploy/kafka/kafka-up.sh once (it resolves the jars)"
if [[ -n "${JAVA:-}" ]]; then :
elif [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then JAVA="$JAVA_HOME/bin/java"
else JAVA=java
fi
args=("$@")
given=0  # --bootstrap-server X or --bootstrap-server=X (a second one fails consumer-groups)
for arg in "$@"; do
    [[ $arg == --bootstrap-server || $arg == --bootstrap-server=* ]] && given=1
done
if [[ $given == 0 ]]; then
    args=(--bootstrap-server "127.0.0.1:${KAFKA_PORT:-9092}" "${args[@]}")
fi
exec "$JAVA" -Dlog4j2.configurationFile="$SCRIPT_DIR/log4j2.xml" -Dkafka.root.log.level=WARN \
    -cp "$LIB_DIR/*" "$class" "${args[@]}"

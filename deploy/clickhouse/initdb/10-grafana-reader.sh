# Sourced by the clickhouse/clickhouse-server image's entrypoint (docker/server/entrypoint.sh:
# every /docker-entrypoint-initdb.d/*.sh that is not executable is sourced, with the
# "clickhouseclient" command array logged in as CLICKHOUSE_USER). The compose file sets
# CLICKHOUSE_ALWAYS_RUN_INITDB_SCRIPTS, so this runs on every start: every statement is
# idempotent and a changed password takes effect on the next restart.
#
# Creates the read-only user Grafana connects as (Grafana runs panel SQL as written, so it
# gets SELECT on the warehouse database and nothing else). readonly = 1 with
# max_execution_time changeable: the ClickHouse plugin sets that setting on every query.
# The password is a ClickHouse string literal: backslashes and single quotes are escaped.
grafana_reader_password=${GRAFANA_CLICKHOUSE_PASSWORD:?set GRAFANA_CLICKHOUSE_PASSWORD}
grafana_reader_password=${grafana_reader_password//\\/\\\\}
grafana_reader_password=${grafana_reader_password//\'/\\\'}
"${clickhouseclient[@]}" <<SQL
CREATE SETTINGS PROFILE OR REPLACE grafana_reader
    SETTINGS readonly = 1, max_execution_time CHANGEABLE_IN_READONLY;
CREATE USER OR REPLACE grafana_reader
    IDENTIFIED WITH sha256_password BY '${grafana_reader_password}'
    SETTINGS PROFILE 'grafana_reader';
GRANT SELECT ON ${CLICKHOUSE_DB:-refusal_audit}.* TO grafana_reader;
SQL
unset grafana_reader_password

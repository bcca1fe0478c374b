# Sourced by the clickhouse/clickhouse-server image's entrypoint (docker/server/entrypoint.sh:
# every /docker-entrypoint-initdb.d/*.sh that is not executable is sourced, with the
# "clickhouseclient" command array logged in as CLICKHOUSE_USER). The compose file sets
# CLICKHOUSE_ALWAYS_RUN_INITDB_SCRIPTS, so this runs on every start: every statement is
# idempotent and a changed password takes effect on the next restart.
#
# Creates the read-only user Grafana connects as (Grafana runs panel SQL as written, so it
# gets SELECT on the tables the dashboards read and nothing else). readonly = 1 with
# max_execution_time changeable: the ClickHouse plugin sets that setting on every query;
# do_not_merge_across_partitions_select_final changeable: the panels that read the daily
# aggregates set it (refusal_audit.dashboards.sql.DAILY_SETTINGS).
# The password is a ClickHouse string literal: backslashes and single quotes are escaped.
grafana_reader_password=${GRAFANA_CLICKHOUSE_PASSWORD:?set GRAFANA_CLICKHOUSE_PASSWORD}
grafana_reader_password=${grafana_reader_password//\\/\\\\}
grafana_reader_password=${grafana_reader_password//\'/\\\'}
"${clickhouseclient[@]}" <<SQL
CREATE SETTINGS PROFILE OR REPLACE grafana_reader
    SETTINGS readonly = 1, max_execution_time CHANGEABLE_IN_READONLY,
             do_not_merge_across_partitions_select_final CHANGEABLE_IN_READONLY;
CREATE USER OR REPLACE grafana_reader
    IDENTIFIED WITH sha256_password BY '${grafana_reader_password}'
    SETTINGS PROFILE 'grafana_reader';
SQL
# Only what the dashboards read (and the tables under the views they read, which run with the
# reader's rights): never the reviewers' password hashes (reviewers), the dead letters' raw
# bytes or the migration bookkeeping. tests/test_grafana_dashboards.py keeps this list equal
# to the tables the panels' SQL names.
for grafana_reader_table in \
    ab_event_log alerts assessments calibration_decisions calibration_experiments \
    calibration_runs calibration_variants clarification_steps clarification_verdicts \
    daily_assessment_counts daily_gap_sightings daily_review_agreements daily_review_counts \
    daily_versions dirty_days policy_gap_sightings refusal_events review_verdicts; do
    "${clickhouseclient[@]}" <<SQL
GRANT SELECT ON ${CLICKHOUSE_DB:-refusal_audit}.${grafana_reader_table} TO grafana_reader;
SQL
done
unset grafana_reader_table
unset grafana_reader_password

#!/usr/bin/env bash
# The test suite as `make test` (and so CI) runs it: three parts at once, each with private RabbitMQ nodes of its
# own, so that no part's broker faults (tests that stop, restart or reconfigure a node) reach another.
#   scripts/test.sh [pytest args...]   extra args go to every part
# Part "stack": the DAGs end to end (`airflow dags test`), mostly waiting on Airflow and JVM start-up. Part
# "restore": the restore engine, the command line, the deployed stacks (LocalExecutor, CeleryExecutor), the view,
# the Spark jobs, the broker clients, hooks and operators, and the broker-free codec and storage tests. Part "engine": everything else (capture, the
# backup runs and the repository, reliability), so a new test folder lands there. Each part's output is kept in
# .run/tests/<part>.log; the engine part streams, the others are printed when all are done. Exit status: 0 only if
# every part passed. Every part but "rabbitmq4" runs RabbitMQ 3.10 (the host's package); part "rabbitmq4" runs
# RABBITMQ43_TESTS on RabbitMQ 4.3 and then RABBITMQ40_TESTS on 4.0, one node at a time (scripts/rabbitmq.sh builds
# each series' chroot the first time, about a minute and a half), and prints each series' time. Each part's log ends
# with the exact version it ran against.
set -uo pipefail
cd "$(dirname "$0")/.."

PYTEST="${VENV:-.venv}/bin/pytest"
LOGS=.run/tests
mkdir -p "$LOGS"
STACK_TESTS=(tests/dags)
RESTORE_TESTS=(tests/restore tests/cli tests/deployed tests/ui tests/spark_jobs tests/broker tests/hooks tests/operators
               tests/codec tests/storage)
# Part "rabbitmq4": the capture and backup engine's broker tests, whose expectations follow the version the broker
# reports (tests/broker/behaviour.py; a test of one series only is marked rabbitmq("4.3") etc. and skipped elsewhere),
# the queue-features table row by row among them (tests/capture/test_queue_feature_rows.py), and the restore
# into 4.x (message size limit, 3.10 definitions, the 3.10 -> 4.3 upgrade, also through `airflow dags test`). 4.3,
# the current series, runs them all; 4.0 the capture tests, the broker-state headers and the broker faults.
RABBITMQ43_TESTS=(tests/backup tests/capture tests/reliability/test_broker_faults.py tests/restore/test_message_size.py
                  tests/restore/test_definitions_into_4x.py tests/restore/test_upgrade_to_43.py
                  tests/dags/test_rbak_restore_upgrade_43.py)
RABBITMQ40_TESTS=(tests/capture tests/backup/test_broker_state_headers.py tests/reliability/test_broker_faults.py)
IGNORE=()
for path in "${STACK_TESTS[@]}" "${RESTORE_TESTS[@]}"; do IGNORE+=(--ignore "$path"); done

# Each part's nodes: their own ports, names and folders (the engine part keeps scripts/rabbitmq.sh's defaults).
# A node's TLS listeners take its plain ports + 1, so the nodes of a part are 10 apart.
nodes_env() {  # part amqp mgmt stream
  local part=$1 amqp=$2 mgmt=$3 stream=$4
  echo "RBAK_AMQP_PORT=$amqp RBAK_MGMT_PORT=$mgmt RBAK_STREAM_PORT=$stream" \
       "RBAK_RABBIT_NODE=rabbit-$part@localhost RBAK_RABBIT_DIR=$PWD/.run/rabbitmq-$part" \
       "RBAK_AMQP_PORT2=$((amqp + 10)) RBAK_MGMT_PORT2=$((mgmt + 10)) RBAK_STREAM_PORT2=$((stream + 10))" \
       "RBAK_RABBIT_NODE2=rabbit2-$part@localhost RBAK_RABBIT_DIR2=$PWD/.run/rabbitmq2-$part"
}
read -r -a stack_env <<<"$(nodes_env stack "${RBAK_STACK_AMQP_PORT:-5772}" "${RBAK_STACK_MGMT_PORT:-15772}" \
  "${RBAK_STACK_STREAM_PORT:-5652}")"
read -r -a restore_env <<<"$(nodes_env restore "${RBAK_RESTORE_AMQP_PORT:-5872}" "${RBAK_RESTORE_MGMT_PORT:-15872}" \
  "${RBAK_RESTORE_STREAM_PORT:-5752}")"

rabbitmq4_part() {  # each series on a node of its own ports, name and folder (a folder keeps one series' data)
  local rc=0 series part tests
  # On a fresh machine 4.0's chroot is built while the 4.3 tests run (the script's lock: never twice); a failure
  # shows again, with its reason, when the 4.0 session provisions its node.
  RBAK_RABBITMQ_VERSION=4.0 scripts/rabbitmq.sh provision >/dev/null 2>&1 &
  for series in 4.3 4.0; do
    part="v${series/./}"
    read -r -a series_env <<<"$(nodes_env "$part" "${RBAK_RABBITMQ4_AMQP_PORT:-5972}" "${RBAK_RABBITMQ4_MGMT_PORT:-15972}" \
      "${RBAK_RABBITMQ4_STREAM_PORT:-5852}")"
    if [ "$series" = 4.3 ]; then tests=("${RABBITMQ43_TESTS[@]}"); else tests=("${RABBITMQ40_TESTS[@]}"); fi
    echo "=== RabbitMQ $series"
    local series_started=$SECONDS
    env "${series_env[@]}" RBAK_RABBITMQ_VERSION="$series" "$PYTEST" -q -p no:cacheprovider "${tests[@]}" "$@" || rc=1
    echo "=== RabbitMQ $series: $((SECONDS - series_started)) s"
  done
  return $rc
}

started=$(date +%s)
# Azurite (npm) is installed once here, before the parts start, rather than by whichever part needs it first.
"${VENV:-.venv}/bin/python" -c 'from tests.emulators import azurite_binary; azurite_binary()' >/dev/null 2>&1 || true
env "${stack_env[@]}" "$PYTEST" -q -p no:cacheprovider "${STACK_TESTS[@]}" "$@" >"$LOGS/stack.log" 2>&1 &
stack_pid=$!
env "${restore_env[@]}" "$PYTEST" -q -p no:cacheprovider "${RESTORE_TESTS[@]}" "$@" >"$LOGS/restore.log" 2>&1 &
restore_pid=$!
rabbitmq4_part "$@" >"$LOGS/rabbitmq4.log" 2>&1 &
rabbitmq4_pid=$!
"$PYTEST" -q -p no:cacheprovider "${IGNORE[@]}" "$@" 2>&1 | tee "$LOGS/engine.log"
engine_rc=${PIPESTATUS[0]}
wait "$stack_pid"
stack_rc=$?
wait "$restore_pid"
restore_rc=$?
wait "$rabbitmq4_pid"
rabbitmq4_rc=$?

for part in stack restore rabbitmq4; do
  echo
  echo "=== part $part, log $LOGS/$part.log"
  cat "$LOGS/$part.log"
done
echo
echo "engine: exit $engine_rc; stack: exit $stack_rc; restore: exit $restore_rc; rabbitmq4: exit $rabbitmq4_rc;" \
     "$(( $(date +%s) - started )) s in all"
[ "$engine_rc" -eq 0 ] && [ "$stack_rc" -eq 0 ] && [ "$restore_rc" -eq 0 ] && [ "$rabbitmq4_rc" -eq 0 ]

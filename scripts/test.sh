#!/usr/bin/env bash
# The test suite as `make test` (and so CI) runs it: six parts at once, each with private RabbitMQ nodes of its
# own, so that no part's broker faults (tests that stop, restart or reconfigure a node) reach another.
#   scripts/test.sh [pytest args...]   extra args go to every part
# On RabbitMQ 3.10 (the host's package): part "stack", the DAGs end to end (`airflow dags test`, mostly waiting on
# Airflow and JVM start-up); part "cluster", the three-node cluster (tests/cluster), some of the DAG tests and one
# of the view's; part
# "restore", the restore engine, the command line, the deployed stacks (LocalExecutor, CeleryExecutor), the view, the
# Spark jobs, the broker clients, hooks and operators, and the broker-free codec and storage tests; part "engine",
# everything else (capture, the backup runs and the repository, reliability), so a new test folder lands there. Part
# "rabbitmq43" runs RABBITMQ43_TESTS on RabbitMQ 4.3 (the current series) and part "rabbitmq40" RABBITMQ40_TESTS on
# 4.0 (with the restore's authority tests on a running Airflow), each in a chroot scripts/rabbitmq.sh builds the first time (about a minute and a half). Each part's output is kept in
# .run/tests/<part>.log and ends with the exact RabbitMQ version of every node it ran against; the engine part
# streams, the others are printed when all are done, each with its time. Exit status: 0 only if every part passed.
# Each part's time from a fresh clone on 2 cores is in README.md (RBAK_CI=1 .ci/run, chroots cached).
set -uo pipefail
cd "$(dirname "$0")/.."

PYTEST="${VENV:-.venv}/bin/pytest"
LOGS=.run/tests
mkdir -p "$LOGS"
STACK_TESTS=(tests/dags)
# The DAG tests that run in part "cluster" instead, beside the three-node cluster: the two parts take about as long.
DAGS_IN_CLUSTER_PART=(tests/dags/test_rbak_drill.py tests/dags/test_rbak_restore_selective.py
                      tests/dags/test_rbak_freshness.py tests/dags/test_stream_chains.py tests/dags/test_many_queues.py
                      tests/dags/test_rbak_restore_migration.py tests/dags/test_rbak_restore_threads.py)
# The DAG tests that run in part "rabbitmq40" instead (against a 4.0 broker): the parts then take about as long.
DAGS_IN_RABBITMQ40_PART=(tests/dags/test_rbak_restore_authority.py)
# The view's test with its own api-server and storage connection, beside the freshness DAG's test of the same rule.
UI_IN_CLUSTER_PART=(tests/ui/test_view_storage_connection.py)
# The journal (continuous capture: its broker side on the three-node cluster among it) beside the cluster's tests.
CLUSTER_TESTS=(tests/cluster tests/journal "${DAGS_IN_CLUSTER_PART[@]}" "${UI_IN_CLUSTER_PART[@]}")
RESTORE_TESTS=(tests/restore tests/cli tests/deployed tests/ui tests/spark_jobs tests/broker tests/hooks tests/operators
               tests/codec tests/storage)
# The 4.x parts: the tests whose expectations follow the version the broker reports (tests/broker/behaviour.py; a
# test of one series only is marked rabbitmq("4.3") etc. and skipped elsewhere). 4.3, the current series, runs the
# broker clients, capture (streams among it), backup, broker faults, the three-node cluster, the journal, the restore (the
# migration among it) and the 3.10 -> 4.3 upgrade through `airflow dags test`; 4.0 the capture, the broker-state
# headers, the broker faults, the restore, the message size probe and the journal's routes, gaps and recovery.
RABBITMQ43_TESTS=(tests/broker tests/backup tests/capture tests/cluster tests/reliability/test_broker_faults.py
                  tests/restore tests/dags/test_rbak_restore_upgrade_43.py tests/compat tests/journal)
RABBITMQ40_TESTS=(tests/capture tests/backup/test_broker_state_headers.py tests/reliability/test_broker_faults.py
                  tests/restore tests/broker/test_message_size_limit.py "${DAGS_IN_RABBITMQ40_PART[@]}"
                  tests/journal/test_archive_routes.py tests/journal/test_archive_gaps.py
                  tests/journal/test_point_in_time.py)
IGNORE=()
for path in "${STACK_TESTS[@]}" "${CLUSTER_TESTS[@]}" "${RESTORE_TESTS[@]}"; do IGNORE+=(--ignore "$path"); done

# Each part's nodes: their own ports, names and folders (the engine part keeps scripts/rabbitmq.sh's defaults).
# A node's TLS listeners take its plain ports + 1, so the nodes of a part are 10 apart (a 3.10 node beside a 4.x
# session's takes + 5); a part's three-node cluster takes RBAK_CLUSTER_* ports, its nodes 10 apart too.
nodes_env() {  # part amqp mgmt stream
  local part=$1 amqp=$2 mgmt=$3 stream=$4
  echo "RBAK_AMQP_PORT=$amqp RBAK_MGMT_PORT=$mgmt RBAK_STREAM_PORT=$stream" \
       "RBAK_RABBIT_NODE=rabbit-$part@localhost RBAK_RABBIT_DIR=$PWD/.run/rabbitmq-$part" \
       "RBAK_AMQP_PORT2=$((amqp + 10)) RBAK_MGMT_PORT2=$((mgmt + 10)) RBAK_STREAM_PORT2=$((stream + 10))" \
       "RBAK_RABBIT_NODE2=rabbit2-$part@localhost RBAK_RABBIT_DIR2=$PWD/.run/rabbitmq2-$part" \
       "RBAK_CLUSTER_NODE=rabbit-cluster-$part@localhost RBAK_CLUSTER_DIR=$PWD/.run/cluster-$part"
}
cluster_env() {  # amqp mgmt stream
  echo "RBAK_CLUSTER_AMQP_PORT=$1 RBAK_CLUSTER_MGMT_PORT=$2 RBAK_CLUSTER_STREAM_PORT=$3"
}
read -r -a stack_env <<<"$(nodes_env stack "${RBAK_STACK_AMQP_PORT:-5772}" "${RBAK_STACK_MGMT_PORT:-15772}" \
  "${RBAK_STACK_STREAM_PORT:-5652}")"
read -r -a cluster_env <<<"$(nodes_env cluster "${RBAK_CLUSTER_PART_AMQP_PORT:-6572}" "${RBAK_CLUSTER_PART_MGMT_PORT:-16572}" \
  "${RBAK_CLUSTER_PART_STREAM_PORT:-6652}") $(cluster_env 6172 16172 6272)"
read -r -a restore_env <<<"$(nodes_env restore "${RBAK_RESTORE_AMQP_PORT:-5872}" "${RBAK_RESTORE_MGMT_PORT:-15872}" \
  "${RBAK_RESTORE_STREAM_PORT:-5752}")"
read -r -a rabbitmq43_env <<<"$(nodes_env rabbitmq43 "${RBAK_RABBITMQ43_AMQP_PORT:-5972}" \
  "${RBAK_RABBITMQ43_MGMT_PORT:-15972}" "${RBAK_RABBITMQ43_STREAM_PORT:-5852}") $(cluster_env 6372 16372 6472)"
rabbitmq43_env+=(RBAK_RABBITMQ_VERSION=4.3)
read -r -a rabbitmq40_env <<<"$(nodes_env rabbitmq40 "${RBAK_RABBITMQ40_AMQP_PORT:-6072}" \
  "${RBAK_RABBITMQ40_MGMT_PORT:-16072}" "${RBAK_RABBITMQ40_STREAM_PORT:-5952}")"
rabbitmq40_env+=(RBAK_RABBITMQ_VERSION=4.0)

part() {  # name tests... -- runs one part's pytest session and says how long it took
  local name=$1 rc=0 part_started=$SECONDS
  shift
  "$PYTEST" -q -p no:cacheprovider "$@" || rc=$?
  echo "=== part $name: $((SECONDS - part_started)) s"
  return $rc
}

started=$(date +%s)
# Azurite (npm) is installed once here, before the parts start, rather than by whichever part needs it first.
"${VENV:-.venv}/bin/python" -c 'from tests.emulators import azurite_binary; azurite_binary()' >/dev/null 2>&1 || true
run_part() {  # name tests... (then the extra args): one part in the background, its log in $LOGS/<name>.log
  local name=$1
  shift
  local -n part_env="${name}_env"
  (export "${part_env[@]}"; part "$name" "$@") >"$LOGS/$name.log" 2>&1 &
  pids[$name]=$!
}
declare -A pids=()
PARTS=(stack cluster restore rabbitmq43 rabbitmq40)
stack_ignore=()
for path in "${DAGS_IN_CLUSTER_PART[@]}" "${DAGS_IN_RABBITMQ40_PART[@]}"; do stack_ignore+=(--ignore "$path"); done
run_part stack "${STACK_TESTS[@]}" "${stack_ignore[@]}" "$@"
run_part cluster "${CLUSTER_TESTS[@]}" "$@"
restore_ignore=()
for path in "${UI_IN_CLUSTER_PART[@]}"; do restore_ignore+=(--ignore "$path"); done
run_part restore "${RESTORE_TESTS[@]}" "${restore_ignore[@]}" "$@"
run_part rabbitmq43 "${RABBITMQ43_TESTS[@]}" "$@"
run_part rabbitmq40 "${RABBITMQ40_TESTS[@]}" "$@"
part engine "${IGNORE[@]}" "$@" 2>&1 | tee "$LOGS/engine.log"
engine_rc=${PIPESTATUS[0]}
summary="engine: exit $engine_rc"
failed=$(( engine_rc != 0 ))
for name in "${PARTS[@]}"; do
  wait "${pids[$name]}"
  rc=$?
  echo
  echo "=== part $name, log $LOGS/$name.log"
  cat "$LOGS/$name.log"
  summary+="; $name: exit $rc"
  [ "$rc" -eq 0 ] || failed=1
done
echo
echo "$summary; $(( $(date +%s) - started )) s in all"
[ "$failed" -eq 0 ]

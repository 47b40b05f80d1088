#!/usr/bin/env bash
# The test suite as `make test` (and so CI) runs it: two halves at once, each with private RabbitMQ nodes of its
# own, so that neither half's broker faults (tests that stop, restart or reconfigure a node) reach the other.
#   scripts/test.sh [pytest args...]   extra args go to both halves
# Half "stack": the DAGs end to end (`airflow dags test`, the deployed stack, the UI), mostly waiting on
# Airflow and JVM start-up, plus the codec and storage tests (no broker), which balance the halves' times.
# Half "engine": everything else. Each half's output is kept in .run/tests/<half>.log;
# the engine half streams, the stack half is printed when both are done. Exit status: 0 only if both passed.
set -uo pipefail
cd "$(dirname "$0")/.."

PYTEST="${VENV:-.venv}/bin/pytest"
LOGS=.run/tests
mkdir -p "$LOGS"
STACK_TESTS=(tests/dags tests/deployed tests/ui tests/codec tests/storage)
IGNORE=()
for path in "${STACK_TESTS[@]}"; do IGNORE+=(--ignore "$path"); done

# The stack half's nodes: their own ports, names and folders (the engine half keeps scripts/rabbitmq.sh's defaults).
stack_env=(
  RBAK_AMQP_PORT="${RBAK_STACK_AMQP_PORT:-5772}" RBAK_MGMT_PORT="${RBAK_STACK_MGMT_PORT:-15772}"
  RBAK_STREAM_PORT="${RBAK_STACK_STREAM_PORT:-5652}" RBAK_RABBIT_NODE=rabbit-stack@localhost
  RBAK_RABBIT_DIR="$PWD/.run/rabbitmq-stack"
  RBAK_AMQP_PORT2="${RBAK_STACK_AMQP_PORT2:-5773}" RBAK_MGMT_PORT2="${RBAK_STACK_MGMT_PORT2:-15773}"
  RBAK_STREAM_PORT2="${RBAK_STACK_STREAM_PORT2:-5653}" RBAK_RABBIT_NODE2=rabbit2-stack@localhost
  RBAK_RABBIT_DIR2="$PWD/.run/rabbitmq2-stack"
)

started=$(date +%s)
# Azurite (npm) is installed once here, before the halves start, rather than by whichever half needs it first.
"${VENV:-.venv}/bin/python" -c 'from tests.emulators import azurite_binary; azurite_binary()' >/dev/null 2>&1 || true
env "${stack_env[@]}" "$PYTEST" -q -p no:cacheprovider "${STACK_TESTS[@]}" "$@" >"$LOGS/stack.log" 2>&1 &
stack_pid=$!
"$PYTEST" -q -p no:cacheprovider "${IGNORE[@]}" "$@" 2>&1 | tee "$LOGS/engine.log"
engine_rc=${PIPESTATUS[0]}
wait "$stack_pid"
stack_rc=$?

echo
echo "=== stack half (${STACK_TESTS[*]}), log $LOGS/stack.log"
cat "$LOGS/stack.log"
echo
echo "engine half: exit $engine_rc; stack half: exit $stack_rc; $(( $(date +%s) - started )) s in all"
[ "$engine_rc" -eq 0 ] && [ "$stack_rc" -eq 0 ]

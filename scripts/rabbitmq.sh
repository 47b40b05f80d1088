#!/usr/bin/env bash
# Private RabbitMQ node on loopback for tests, the demo and CI.
#   scripts/rabbitmq.sh start|stop|status|env
# Ports: RBAK_AMQP_PORT (5672), RBAK_MGMT_PORT (15672), RBAK_STREAM_PORT (5552).
# Folder: RBAK_RABBIT_DIR (default <repo>/.run/rabbitmq). Node: RBAK_RABBIT_NODE (rabbit@localhost).
# TLS too when RBAK_TLS_DIR holds ca.pem, server.pem, server.key: RBAK_AMQPS_PORT, RBAK_MGMT_TLS_PORT,
# RBAK_STREAM_TLS_PORT (default: each plain port + 1).
# Needs root (the server drops to the rabbitmq user).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${RBAK_RABBIT_DIR:-$REPO/.run/rabbitmq}"
AMQP_PORT="${RBAK_AMQP_PORT:-5672}"
MGMT_PORT="${RBAK_MGMT_PORT:-15672}"
STREAM_PORT="${RBAK_STREAM_PORT:-5552}"
NODE="${RBAK_RABBIT_NODE:-rabbit@localhost}"
# Distribution port = AMQP + 20000 by default; keep it on loopback too.
DIST_PORT="${RBAK_DIST_PORT:-$((AMQP_PORT + 20000))}"

export RABBITMQ_CONFIG_FILE="$DIR/rabbitmq.conf"
export RABBITMQ_ENABLED_PLUGINS_FILE="$DIR/enabled_plugins"
export RABBITMQ_MNESIA_BASE="$DIR/mnesia"
export RABBITMQ_LOG_BASE="$DIR/log"
export RABBITMQ_NODENAME="$NODE"
export RABBITMQ_PID_FILE="$DIR/rabbit.pid"
export RABBITMQ_DIST_PORT="$DIST_PORT"
export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
export ERL_EPMD_ADDRESS=127.0.0.1

ctl() { rabbitmqctl -n "$NODE" "$@"; }

is_running() { ctl status >/dev/null 2>&1; }

write_config() {
  mkdir -p "$DIR/mnesia" "$DIR/log"
  cat >"$DIR/rabbitmq.conf" <<CONF
listeners.tcp.default = 127.0.0.1:$AMQP_PORT
management.tcp.ip = 127.0.0.1
management.tcp.port = $MGMT_PORT
stream.listeners.tcp.1 = 127.0.0.1:$STREAM_PORT
loopback_users = none
CONF
  if [[ -n "${RBAK_TLS_DIR:-}" ]]; then
    # TLS listeners beside the plain ones: certificates (ca.pem, server.pem, server.key) from RBAK_TLS_DIR,
    # copied into the node's folder so the rabbitmq user can read them.
    mkdir -p "$DIR/tls" && cp "$RBAK_TLS_DIR"/{ca.pem,server.pem,server.key} "$DIR/tls/"
    cat >>"$DIR/rabbitmq.conf" <<CONF
listeners.ssl.default = 127.0.0.1:${RBAK_AMQPS_PORT:-$((AMQP_PORT + 1))}
ssl_options.cacertfile = $DIR/tls/ca.pem
ssl_options.certfile = $DIR/tls/server.pem
ssl_options.keyfile = $DIR/tls/server.key
ssl_options.verify = verify_none
ssl_options.fail_if_no_peer_cert = false
management.ssl.ip = 127.0.0.1
management.ssl.port = ${RBAK_MGMT_TLS_PORT:-$((MGMT_PORT + 1))}
management.ssl.cacertfile = $DIR/tls/ca.pem
management.ssl.certfile = $DIR/tls/server.pem
management.ssl.keyfile = $DIR/tls/server.key
stream.listeners.ssl.1 = 127.0.0.1:${RBAK_STREAM_TLS_PORT:-$((STREAM_PORT + 1))}
CONF
  fi
  echo '[rabbitmq_management,rabbitmq_stream,rabbitmq_stream_management,rabbitmq_federation,rabbitmq_shovel].' >"$DIR/enabled_plugins"
  chown -R rabbitmq:rabbitmq "$DIR"
}

start() {
  if is_running; then echo "rabbitmq: already running ($NODE)"; return 0; fi
  write_config
  nohup rabbitmq-server >"$DIR/log/stdout.log" 2>&1 &
  if ! timeout 90 rabbitmqctl -n "$NODE" wait "$RABBITMQ_PID_FILE" --timeout 60 >/dev/null 2>&1; then
    echo "rabbitmq: failed to start; see $DIR/log" >&2; tail -n 20 "$DIR/log/stdout.log" >&2 || true; exit 1
  fi
  # Management listener comes up after the node reports ready.
  for _ in $(seq 1 60); do
    if curl -fsS -o /dev/null "http://127.0.0.1:$MGMT_PORT/api/overview" -u guest:guest 2>/dev/null; then break; fi
    sleep 0.5
  done
  echo "rabbitmq: running ($NODE amqp=$AMQP_PORT mgmt=$MGMT_PORT stream=$STREAM_PORT)"
}

stop() {
  if is_running; then
    # With a pid file, rabbitmqctl also waits for the OS process to exit; without one (a node whose file was
    # removed) it would wait for the file forever, so stop by name and poll. Never wait unbounded either way.
    if [[ -f "$RABBITMQ_PID_FILE" ]]; then
      timeout 120 rabbitmqctl -n "$NODE" stop "$RABBITMQ_PID_FILE" >/dev/null 2>&1 || true
    else
      timeout 120 rabbitmqctl -n "$NODE" stop >/dev/null 2>&1 || true
    fi
    for _ in $(seq 1 120); do is_running || break; sleep 0.5; done
    if is_running; then echo "rabbitmq: $NODE did not stop within 2 minutes" >&2; exit 1; fi
  fi
  if [[ "${1:-}" == "--purge" ]]; then rm -rf "$DIR"; fi
  echo "rabbitmq: stopped"
}

case "${1:-}" in
  start) start ;;
  stop) shift; stop "$@" ;;
  status) if is_running; then echo "running"; else echo "stopped"; exit 3; fi ;;
  env) echo "RBAK_AMQP_PORT=$AMQP_PORT RBAK_MGMT_PORT=$MGMT_PORT RBAK_STREAM_PORT=$STREAM_PORT RBAK_RABBIT_DIR=$DIR" ;;
  *) echo "usage: $0 start|stop [--purge]|status|env" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Private RabbitMQ node on loopback for tests, the demo and CI.
#   scripts/rabbitmq.sh start|stop [--purge]|status|env|version|provision|ctl ARGS...
# Version: RBAK_RABBITMQ_VERSION = 3.10 (default: the host's Debian package), 4.0 (Debian 13's rabbitmq-server) or
# 4.3 (Debian unstable's), the 4.x ones in a chroot built once and cached (scripts/rabbitmq-chroot.sh).
# Ports: RBAK_AMQP_PORT (5672), RBAK_MGMT_PORT (15672), RBAK_STREAM_PORT (5552), RBAK_DIST_PORT (AMQP + 20000);
# a 4.x node also has its own EPMD: RBAK_EPMD_PORT (4.0: 4371, 4.3: 4372; the host's 3.10 nodes use 4369).
# Folder: RBAK_RABBIT_DIR (default <repo>/.run/rabbitmq, or .run/rabbitmq-<version> for 4.x). Node: RBAK_RABBIT_NODE
# (rabbit@localhost). A folder keeps the series it was made with: a node of another series refuses it.
# TLS too when RBAK_TLS_DIR holds ca.pem, server.pem, server.key: RBAK_AMQPS_PORT, RBAK_MGMT_TLS_PORT,
# RBAK_STREAM_TLS_PORT (default: each plain port + 1).
# `provision` builds what the version needs (the 4.x chroot; nothing for 3.10) and fails with the reason if it cannot;
# `version` prints the running node's exact RabbitMQ version; `ctl` runs rabbitmqctl against the node (in its chroot).
# Clusters: the nodes of one series share the rabbitmq user's Erlang cookie (and a 4.x chroot's nodes the port mapper of
# RBAK_EPMD_PORT), so `ctl join_cluster` joins them; tests/cluster/nodes.py starts three and joins them.
# Needs root (the server drops to the rabbitmq user; the chroot needs mounts).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION="${RBAK_RABBITMQ_VERSION:-3.10}"
ROOT=""  # the chroot a 4.x node runs in; empty for the host's 3.10
case "$VERSION" in
  3.10) DEFAULT_DIR="$REPO/.run/rabbitmq" ;;
  4.0|4.3)
    # shellcheck source=rabbitmq-chroot.sh
    source "$REPO/scripts/rabbitmq-chroot.sh"
    ROOT="$(rbak_chroot_path "$VERSION")"
    DEFAULT_DIR="$REPO/.run/rabbitmq-$VERSION"
    case "$VERSION" in 4.0) export ERL_EPMD_PORT="${RBAK_EPMD_PORT:-4371}" ;; 4.3) export ERL_EPMD_PORT="${RBAK_EPMD_PORT:-4372}" ;; esac
    ;;
  *) echo "rabbitmq: RBAK_RABBITMQ_VERSION=$VERSION is not one of 3.10, 4.0, 4.3" >&2; exit 2 ;;
esac
if [[ -z "$ROOT" && -n "${RBAK_EPMD_PORT:-}" ]]; then export ERL_EPMD_PORT="$RBAK_EPMD_PORT"; fi
DIR="${RBAK_RABBIT_DIR:-$DEFAULT_DIR}"
DIR="$(realpath -m "$DIR")"  # absolute: a 4.x node sees it at the same path in its chroot
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

# A command on the node's side: on the host for 3.10, in the chroot (with the rabbitmq user's home, where its
# Erlang cookie is) for 4.x.
on_node() {
  if [[ -z "$ROOT" ]]; then "$@"; else HOME=/var/lib/rabbitmq chroot "$ROOT" "$@"; fi
}
ctl() { on_node rabbitmqctl -n "$NODE" "$@"; }

is_running() {
  if [[ -n "$ROOT" ]]; then
    [[ -f "$ROOT/.rbak-ready" ]] || return 1
    # No port mapper, no node; and rabbitmqctl would start one in the chroot just to ask.
    (exec 3<>"/dev/tcp/127.0.0.1/$ERL_EPMD_PORT") 2>/dev/null || return 1
  fi
  ctl status >/dev/null 2>&1
}

provision() {
  if [[ -z "$ROOT" ]]; then
    command -v rabbitmq-server >/dev/null 2>&1 || {
      echo "rabbitmq: RabbitMQ 3.10 needs the host's rabbitmq-server (apt-get install rabbitmq-server)" >&2; return 1; }
    return 0
  fi
  rbak_chroot_build "$VERSION" >/dev/null
}

# The chroot's mounts for a node: /proc (shared by the chroot's nodes; under a lock, since a cluster's nodes start
# together) and the node's folder at its own path.
mount_chroot() {
  (flock 9; mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc") 9>"$ROOT.mount.lock"
  cp /etc/hosts /etc/resolv.conf "$ROOT/etc/" 2>/dev/null || true
  mkdir -p "$DIR" "$ROOT$DIR"
  mountpoint -q "$ROOT$DIR" || mount --bind "$DIR" "$ROOT$DIR"
}

# Undo mount_chroot once the node is down; /proc only when no node of this chroot runs any more.
unmount_chroot() {
  if mountpoint -q "$ROOT$DIR"; then umount "$ROOT$DIR" || umount -l "$ROOT$DIR"; fi
  rmdir "$ROOT$DIR" 2>/dev/null || true
  local root pid
  root="$(cd "$ROOT" && pwd -P)"
  for pid in $(pgrep -x beam.smp || true); do
    [[ "$(readlink "/proc/$pid/root" 2>/dev/null)" == "$root" ]] && return 0
  done
  if mountpoint -q "$ROOT/proc"; then umount "$ROOT/proc" || umount -l "$ROOT/proc"; fi
}

write_config() {
  mkdir -p "$DIR/mnesia" "$DIR/log"
  local series_file="$DIR/rbak-series"
  if [[ -f "$series_file" && "$(cat "$series_file")" != "$VERSION" ]]; then
    echo "rabbitmq: $DIR holds a RabbitMQ $(cat "$series_file") node's data, not $VERSION: use another RBAK_RABBIT_DIR" \
         "or remove it (scripts/rabbitmq.sh stop --purge with RBAK_RABBITMQ_VERSION=$(cat "$series_file"))" >&2
    exit 1
  fi
  echo "$VERSION" >"$series_file"
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
  # The chroot's rabbitmq user may have other ids than the host's: chown by the ids the node runs as.
  if [[ -z "$ROOT" ]]; then chown -R rabbitmq:rabbitmq "$DIR"; else on_node chown -R rabbitmq:rabbitmq "$DIR"; fi
}

start() {
  if is_running; then echo "rabbitmq: already running ($NODE, RabbitMQ $VERSION)"; return 0; fi
  provision
  local started
  started=$(date +%s)
  if [[ -n "$ROOT" ]]; then mount_chroot; fi
  write_config
  nohup bash -c "$(declare -f on_node); ROOT='$ROOT'; on_node rabbitmq-server" >"$DIR/log/stdout.log" 2>&1 &
  if ! timeout 120 "$BASH" -c "$(declare -f on_node); ROOT='$ROOT'; on_node rabbitmqctl -n '$NODE' wait '$RABBITMQ_PID_FILE' --timeout 100" >/dev/null 2>&1; then
    echo "rabbitmq: RabbitMQ $VERSION failed to start; see $DIR/log" >&2; tail -n 20 "$DIR/log/stdout.log" >&2 || true; exit 1
  fi
  # Management listener comes up after the node reports ready.
  for _ in $(seq 1 60); do
    if curl -fsS -o /dev/null "http://127.0.0.1:$MGMT_PORT/api/overview" -u guest:guest 2>/dev/null; then break; fi
    sleep 0.5
  done
  echo "rabbitmq: running ($NODE RabbitMQ $(node_version) amqp=$AMQP_PORT mgmt=$MGMT_PORT stream=$STREAM_PORT," \
       "ready in $(( $(date +%s) - started )) s)"
}

node_version() {
  curl -fsS "http://127.0.0.1:$MGMT_PORT/api/overview?columns=rabbitmq_version" -u guest:guest 2>/dev/null \
    | sed -n 's/.*"rabbitmq_version":"\([^"]*\)".*/\1/p'
}

stop() {
  if is_running; then
    # With a pid file, rabbitmqctl also waits for the OS process to exit; without one (a node whose file was
    # removed) it would wait for the file forever, so stop by name and poll. Never wait unbounded either way.
    if [[ -f "$RABBITMQ_PID_FILE" ]]; then
      timeout 120 "$BASH" -c "$(declare -f on_node); ROOT='$ROOT'; on_node rabbitmqctl -n '$NODE' stop '$RABBITMQ_PID_FILE'" >/dev/null 2>&1 || true
    else
      timeout 120 "$BASH" -c "$(declare -f on_node); ROOT='$ROOT'; on_node rabbitmqctl -n '$NODE' stop" >/dev/null 2>&1 || true
    fi
    for _ in $(seq 1 120); do is_running || break; sleep 0.5; done
    if is_running; then echo "rabbitmq: $NODE did not stop within 2 minutes" >&2; exit 1; fi
  fi
  if [[ -n "$ROOT" && -d "$ROOT" ]]; then unmount_chroot; fi
  if [[ "${1:-}" == "--purge" ]]; then rm -rf --one-file-system "$DIR"; fi
  echo "rabbitmq: stopped"
}

case "${1:-}" in
  start) start ;;
  stop) shift; stop "$@" ;;
  status) if is_running; then echo "running"; else echo "stopped"; exit 3; fi ;;
  env) echo "RBAK_RABBITMQ_VERSION=$VERSION RBAK_AMQP_PORT=$AMQP_PORT RBAK_MGMT_PORT=$MGMT_PORT" \
            "RBAK_STREAM_PORT=$STREAM_PORT RBAK_RABBIT_DIR=$DIR${ERL_EPMD_PORT:+ RBAK_EPMD_PORT=$ERL_EPMD_PORT}" ;;
  version) if is_running; then echo "$(node_version)"; else echo "rabbitmq: $NODE is not running" >&2; exit 3; fi ;;
  provision) provision ;;
  ctl) shift; ctl "$@" ;;
  *) echo "usage: $0 start|stop [--purge]|status|env|version|provision|ctl ARGS..." >&2; exit 2 ;;
esac

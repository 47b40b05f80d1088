#!/usr/bin/env bash
# The Debian/Ubuntu packages `make demo` and `make test` need, installed with apt-get when missing.
#   scripts/system-deps.sh demo|test|docs
# demo: python3-venv, Java 17 (Spark), curl, and rabbitmq-server unless RABBITMQ_URL names a broker.
# docs: python3-venv and graphviz (`make docs` renders docs/diagrams/*.dot with it, scripts/diagrams.py).
# test: the same with rabbitmq-server always, docker-compose (validates docker-compose.yml, no engine needed),
#       chromium with chromium-driver (the browser test of the backups view, tests/ui/test_browser.py), and nodejs
#       with npm (the tests install the Azurite emulator with npm into .run/azurite, tests/emulators.py), and
#       postgresql (the CeleryExecutor test's metadata database: a private cluster, tests/postgres.py), and
#       debootstrap (the RabbitMQ 4.x nodes run in chroots of later Debian releases, scripts/rabbitmq-chroot.sh), and
#       graphviz (tests/test_diagrams.py renders every diagram and compares it with the committed SVG).
# Needs root only when something is missing. The packaged RabbitMQ service is not started by the install:
# the demo and the tests run a private node of their own (scripts/rabbitmq.sh).
set -euo pipefail

purpose="${1:-}"
[[ "$purpose" == demo || "$purpose" == test || "$purpose" == docs ]] || { echo "usage: $0 demo|test|docs" >&2; exit 2; }
have() { command -v "$1" >/dev/null 2>&1; }

need=()
python3 -c 'import ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
if [[ "$purpose" == docs || "$purpose" == test ]]; then have dot || need+=(graphviz); fi
if [[ "$purpose" != docs ]]; then
  have java || need+=(openjdk-17-jre-headless)
  have curl || need+=(curl)
  if [[ "$purpose" == test || -z "${RABBITMQ_URL:-}" ]]; then have rabbitmq-server || need+=(rabbitmq-server); fi
  if [[ "$purpose" == test ]]; then have docker-compose || need+=(docker-compose); fi
  # RabbitMQ 4.x runs in chroots of later Debian releases that scripts/rabbitmq-chroot.sh builds with debootstrap
  if [[ "$purpose" == test || "${RBAK_RABBITMQ_VERSION:-3.10}" != 3.10 ]]; then have debootstrap || need+=(debootstrap); fi
  if [[ "$purpose" == test ]]; then have chromium || need+=(chromium); have chromedriver || need+=(chromium-driver); fi
  if [[ "$purpose" == test ]]; then have node || need+=(nodejs); have npm || need+=(npm); fi
  # Debian keeps initdb and pg_ctl under /usr/lib/postgresql/<version>/bin, off PATH
  if [[ "$purpose" == test ]] && ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null && ! have initdb; then
    need+=(postgresql)
  fi
fi
[[ ${#need[@]} -eq 0 ]] && exit 0

if [[ "$(id -u)" -ne 0 ]] || ! have apt-get; then
  echo "missing: ${need[*]}; install them (apt-get install ${need[*]}) and run again" >&2
  exit 1
fi
echo "installing ${need[*]} (apt-get)"
# Keep the packaged rabbitmq-server and postgresql services from starting (policy-rc.d 101: "action forbidden").
policy=/usr/sbin/policy-rc.d
if [[ ! -e "$policy" ]]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy"
  trap 'rm -f "$policy"' EXIT
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null

#!/usr/bin/env bash
# The RabbitMQ team's own command line tool, rabbitmqadmin v2 (Debian's package rabbitmqadmin-ng), for the tests that
# compare the migration's transformations with its `definitions export --transformations`.
#   scripts/rabbitmqadmin-ng.sh provision     make sure it is installed (once) and print the binary's path
#   scripts/rabbitmqadmin-ng.sh version       print its version (2.29.0)
#   scripts/rabbitmqadmin-ng.sh run ARGS...   run it: rabbitmqadmin ARGS...
# Debian unstable (sid) packages it (rabbitmq-server depends on it), so it comes from the cached sid chroot that
# scripts/rabbitmq-chroot.sh builds for RabbitMQ 4.3. It must run inside that chroot: the binary links the
# chroot's libmimalloc.so.3, which the host's Debian 12 does not have. The chroot shares the host's loopback, so
# `run --host 127.0.0.1 --port <management port>` reaches any node of the host. A chroot cached before the package
# was listed gets it here, under the chroot's lock. The printed path is the binary as the host sees it
# (<chroot>/usr/bin/rabbitmqadmin), to say which file ran; run it with `run`. Needs root (chroot, apt).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=rabbitmq-chroot.sh
source "$REPO/scripts/rabbitmq-chroot.sh"
BINARY=/usr/bin/rabbitmqadmin

rbak_admin_provision() {
  local root lockfd
  root="$(rbak_chroot_build 4.3)"
  if [[ ! -x "$root$BINARY" ]]; then
    exec {lockfd}>"$RBAK_CHROOT_CACHE/sid.lock"
    flock "$lockfd"
    if [[ ! -x "$root$BINARY" ]]; then
      echo "rabbitmqadmin-ng: installing it in the sid chroot $root (once)" >&2
      mount -t proc proc "$root/proc"
      if ! chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive sh -c \
           "apt-get -o Acquire::Check-Valid-Until=false update -qq &&
            apt-get -o Acquire::Check-Valid-Until=false install -y -qq --no-install-recommends rabbitmqadmin-ng &&
            apt-get clean" >>"$RBAK_CHROOT_CACHE/sid.build.log" 2>&1; then
        umount "$root/proc" || true
        tail -n 5 "$RBAK_CHROOT_CACHE/sid.build.log" >&2 || true
        echo "rabbitmqadmin-ng: installing rabbitmqadmin-ng in $root failed; see $RBAK_CHROOT_CACHE/sid.build.log" >&2
        flock -u "$lockfd"; return 1
      fi
      umount "$root/proc"
    fi
    flock -u "$lockfd"
  fi
  echo "$root$BINARY"
}

rbak_admin_run() {
  local root
  root="$(rbak_chroot_path 4.3)"
  [[ -x "$root$BINARY" ]] || { echo "rabbitmqadmin-ng: not installed; run $0 provision (needs root)" >&2; return 1; }
  chroot "$root" "$BINARY" "$@"
}

case "${1:-}" in
  provision) rbak_admin_provision ;;
  version) shift; rbak_admin_run --help | sed -n 's/.*Version: \([0-9][0-9.]*\).*/\1/p' | head -n 1 ;;
  run) shift; rbak_admin_run "$@" ;;
  *) echo "usage: $0 provision | version | run ARGS..." >&2; exit 2 ;;
esac

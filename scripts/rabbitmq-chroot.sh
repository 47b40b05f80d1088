#!/usr/bin/env bash
# RabbitMQ 4.x for the suite and the demo: Debian's later releases package it, and their Erlang needs a newer libc
# than the host's Debian 12, so it runs in a chroot of that release rather than beside the host's packages.
#   scripts/rabbitmq-chroot.sh build 4.0|4.3     build (once) and print the chroot's folder
#   scripts/rabbitmq-chroot.sh path 4.0|4.3      print the folder it would use
#   scripts/rabbitmq-chroot.sh mirror            print the Debian mirror read from the host's apt sources
# 4.0 is Debian 13 (trixie, rabbitmq-server 4.0.x, Erlang 27); 4.3 is Debian unstable (sid, 4.3.x, Erlang 29).
# The chroot comes from `debootstrap --variant=minbase` with the mirror the host's apt already uses (never a
# hard-coded host; RBAK_DEBIAN_MIRROR overrides it, RBAK_APT_DIR names another /etc/apt), is cached outside the checkout in
# RBAK_CHROOT_CACHE/<release> (default /var/cache/airflow-rbak/chroots) and reused by every later run. A lock
# (flock on <release>.lock) keeps two test parts starting at once from building the same chroot twice: the second
# waits for the first and then uses its result. A build is made in <release>.partial and renamed only when
# complete, so an interrupted build never leaves a chroot that looks ready. Needs root.
# Sourced by scripts/rabbitmq.sh for its functions; run directly for the commands above.
set -euo pipefail

RBAK_CHROOT_CACHE="${RBAK_CHROOT_CACHE:-/var/cache/airflow-rbak/chroots}"

# The Debian release that packages a RabbitMQ series; empty for a series no release packages.
rbak_release_for() {
  case "$1" in
    4.0) echo trixie ;;
    4.3) echo sid ;;
    *) echo "" ;;
  esac
}

rbak_chroot_path() { echo "$RBAK_CHROOT_CACHE/$(rbak_release_for "$1")"; }

# The packages a release's chroot installs: rabbitmq-server, and in sid the broker team's rabbitmqadmin v2
# (rabbitmqadmin-ng, which the tests compare the migration's transformations with; scripts/rabbitmqadmin-ng.sh).
rbak_chroot_packages() {
  case "$1" in
    sid) echo "rabbitmq-server rabbitmqadmin-ng" ;;
    *) echo "rabbitmq-server" ;;
  esac
}

# The first Debian archive URI of the host's apt sources (deb822 .sources files first, then sources.list), skipping
# the security archive: the chroot is made from the same mirror the host already trusts and reaches.
rbak_debian_mirror() {
  if [[ -n "${RBAK_DEBIAN_MIRROR:-}" ]]; then echo "$RBAK_DEBIAN_MIRROR"; return 0; fi
  local uri="" f apt="${RBAK_APT_DIR:-/etc/apt}"
  for f in "$apt"/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    uri="$(awk '
      /^[[:space:]]*$/ { if (uris != "" && suites !~ /-security/ && types ~ /(^|[[:space:]])deb([[:space:]]|$)/) { print uris; exit }
                         uris = ""; suites = ""; types = ""; next }
      /^#/ { next }
      tolower($1) == "types:" { $1 = ""; types = $0 }
      tolower($1) == "uris:" { uris = $2 }
      tolower($1) == "suites:" { $1 = ""; suites = $0 }
      END { if (uris != "" && suites !~ /-security/ && types ~ /(^|[[:space:]])deb([[:space:]]|$)/) print uris }
    ' "$f" | head -n 1)"
    [[ -n "$uri" ]] && break
  done
  if [[ -z "$uri" ]]; then
    for f in "$apt"/sources.list "$apt"/sources.list.d/*.list; do
      [[ -f "$f" ]] || continue
      # deb [options] URI suite components...
      uri="$(awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                                 if ($(i + 1) !~ /-security/) { print $i; exit } }' "$f")"
      [[ -n "$uri" ]] && break
    done
  fi
  if [[ -z "$uri" ]]; then
    echo "rabbitmq: no Debian mirror in $apt/sources.list.d/*.sources or sources.list; set RBAK_DEBIAN_MIRROR" >&2
    return 1
  fi
  echo "${uri%/}"
}

# Build the chroot for a series unless the cache holds a complete one; print its folder.
rbak_chroot_build() {
  local version="$1" release root lock partial mirror started apt_options
  release="$(rbak_release_for "$version")"
  if [[ -z "$release" ]]; then echo "rabbitmq: no chroot for RabbitMQ $version (known: 4.0, 4.3)" >&2; return 2; fi
  root="$RBAK_CHROOT_CACHE/$release"
  if [[ -f "$root/.rbak-ready" ]]; then echo "$root"; return 0; fi
  if [[ "$(id -u)" -ne 0 ]]; then echo "rabbitmq: building the $release chroot needs root" >&2; return 1; fi
  command -v debootstrap >/dev/null 2>&1 || {
    echo "rabbitmq: debootstrap is missing (apt-get install debootstrap; scripts/system-deps.sh test does it)" >&2; return 1; }
  mkdir -p "$RBAK_CHROOT_CACHE"
  lock="$RBAK_CHROOT_CACHE/$release.lock"
  exec {lockfd}>"$lock"
  flock "$lockfd"
  if [[ -f "$root/.rbak-ready" ]]; then flock -u "$lockfd"; echo "$root"; return 0; fi  # built while we waited
  mirror="$(rbak_debian_mirror)"
  partial="$RBAK_CHROOT_CACHE/$release.partial"
  rbak_unmount_under "$partial"
  started=$(date +%s)
  echo "rabbitmq: building the $release chroot for RabbitMQ $version in $root from $mirror (once; a few minutes)" >&2
  # A base system a failed build already made is kept: only the package step runs again.
  if [[ ! -f "$partial/.rbak-base" ]]; then
    rm -rf --one-file-system "$partial"
    if ! debootstrap --variant=minbase --include=ca-certificates "$release" "$partial" "$mirror" \
         >"$RBAK_CHROOT_CACHE/$release.build.log" 2>&1; then
      tail -n 5 "$RBAK_CHROOT_CACHE/$release.build.log" >&2 || true
      echo "rabbitmq: debootstrap $release from $mirror failed; see $RBAK_CHROOT_CACHE/$release.build.log" >&2
      flock -u "$lockfd"; return 1
    fi
    touch "$partial/.rbak-base"
  fi
  cp /etc/hosts /etc/resolv.conf "$partial/etc/" 2>/dev/null || true
  # The package's service must not start inside the chroot (it cannot: no init system) nor try to.
  printf '#!/bin/sh\nexit 101\n' >"$partial/usr/sbin/policy-rc.d" && chmod +x "$partial/usr/sbin/policy-rc.d"
  mount -t proc proc "$partial/proc"
  # Unstable's Release file is valid for a week only; a mirror that serves a dated snapshot (as the host's apt
  # sources may name) serves one past that date. Its signature is still checked.
  apt_options="-o Acquire::Check-Valid-Until=false"
  if ! chroot "$partial" /usr/bin/env DEBIAN_FRONTEND=noninteractive sh -c \
       "apt-get $apt_options update -qq && apt-get $apt_options install -y -qq --no-install-recommends $(rbak_chroot_packages "$release") && apt-get clean" \
       >>"$RBAK_CHROOT_CACHE/$release.build.log" 2>&1; then
    umount "$partial/proc" || true
    tail -n 5 "$RBAK_CHROOT_CACHE/$release.build.log" >&2 || true
    echo "rabbitmq: installing $(rbak_chroot_packages "$release") in the $release chroot failed; see $RBAK_CHROOT_CACHE/$release.build.log" >&2
    flock -u "$lockfd"; return 1
  fi
  umount "$partial/proc"
  chroot "$partial" dpkg-query -W -f '${Version}\n' rabbitmq-server >"$partial/.rbak-ready"
  rm -rf --one-file-system "$root"
  mv "$partial" "$root"
  echo "rabbitmq: $release chroot ready in $(( $(date +%s) - started )) s, $(du -sh --one-file-system "$root" | cut -f1)," \
       "rabbitmq-server $(cat "$root/.rbak-ready")" >&2
  flock -u "$lockfd"
  echo "$root"
}

# Unmount whatever is mounted at or below a folder (a build or node interrupted while /proc was mounted).
rbak_unmount_under() {
  local dir="$1" m
  [[ -d "$dir" ]] || return 0
  dir="$(cd "$dir" && pwd -P)"
  while read -r m; do umount -l "$m" 2>/dev/null || true; done < <(awk -v d="$dir" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/mounts | sort -r)
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  case "${1:-}" in
    build) rbak_chroot_build "${2:?version}" ;;
    path) rbak_chroot_path "${2:?version}" ;;
    mirror) rbak_debian_mirror ;;
    *) echo "usage: $0 build|path 4.0|4.3 | mirror" >&2; exit 2 ;;
  esac
fi

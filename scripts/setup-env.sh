#!/usr/bin/env bash
# Everything the tests and the demo need outside the venv, installed where it can be.
# Idempotent: a second run finds everything in place and returns in seconds.
set -euo pipefail
bin=${1:-.venv/bin}
in_ci() { [[ "${CI:-}" =~ ^(1|true|yes)$ ]]; }

apt_install() {  # apt_install PKG... (only as root with apt-get; quiet)
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq "$@" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "$@" >/dev/null; }
  else
    echo "setup-env: cannot install $* (need root and apt-get)" >&2; return 1
  fi
}

need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v chromium >/dev/null || need+=(chromium)  # headless browser for the HTML report tests
command -v runsc >/dev/null || need+=(runsc)  # gVisor, for the sandbox runtime option's test
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)  # capped sandbox disks
((${#need[@]})) && { echo "setup-env: installing ${need[*]}" >&2; apt_install "${need[@]}" || true; }

rc=0; bash scripts/ensure-docker.sh || rc=$?
if ((rc != 0)); then
  if in_ci; then echo "setup-env: CI=true and no Docker engine: failing" >&2; exit 1; fi
  echo "setup-env: no Docker engine; docker-marked tests will be SKIPPED (loudly)" >&2
  # The local (bubblewrap) backend's base root filesystem: the demo and its tests run on it.
  "$bin/coding-agent-rl" images base --backend local || echo "setup-env: no local base" >&2
else
  "$bin/coding-agent-rl" images base
fi
"$bin/coding-agent-rl" agents fetch

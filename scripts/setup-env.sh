#!/usr/bin/env bash
# What runs outside the venv, installed where it can be. Usage: setup-env.sh [BIN] [PROFILE]
#   demo: a Docker engine, the base image (built with debootstrap) and Claude Code (`make demo`);
#         without an engine, bubblewrap for the local backend instead.
#   test: (default) all of the above plus what the tests use (`make test`).
# Idempotent: a second run finds everything in place and returns in seconds. Each step's time
# is printed ("setup-env: STEP took Ns").
set -euo pipefail
bin=${1:-.venv/bin}
profile=${2:-test}
[[ $profile == demo || $profile == test ]] || { echo "setup-env: profile demo or test, not $profile" >&2; exit 2; }
in_ci() { [[ "${CI:-}" =~ ^(1|true|yes)$ ]]; }

step() {  # step NAME CMD...: run CMD, print how long it took
  local name=$1 t0=$SECONDS rc=0; shift
  "$@" || rc=$?
  echo "setup-env: $name took $((SECONDS - t0))s" >&2
  return $rc
}

apt_install() {  # apt_install PKG... (only as root with apt-get; quiet)
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq "$@" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "$@" >/dev/null; }
  else
    echo "setup-env: cannot install $* (need root and apt-get)" >&2; return 1
  fi
}

packages() {  # the system packages this profile needs and lacks
  local need=()
  command -v debootstrap >/dev/null || need+=(debootstrap)  # the base image's root filesystem
  if [[ $profile == test ]] || ((rc != 0)); then  # rc: the engine step's
    command -v bwrap >/dev/null || need+=(bubblewrap)  # the local backend
  fi
  if [[ $profile == test ]]; then
    command -v chromium >/dev/null || need+=(chromium)  # headless browser for the HTML report tests
    command -v runsc >/dev/null || need+=(runsc)  # gVisor, for the sandbox runtime option's test
    command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)  # capped sandbox disks
  fi
  ((${#need[@]})) || return 0
  echo "setup-env: installing ${need[*]}" >&2
  apt_install "${need[@]}" || true
}

rc=0; step engine bash scripts/ensure-docker.sh || rc=$?
step packages packages
if ((rc != 0)); then
  if in_ci; then echo "setup-env: CI=true and no Docker engine: failing" >&2; exit 1; fi
  echo "setup-env: no Docker engine; docker-marked tests will be SKIPPED (loudly)" >&2
  # The local (bubblewrap) backend's base root filesystem: the demo and its tests run on it.
  step base "$bin/coding-agent-rl" images base --backend local || echo "setup-env: no local base" >&2
else
  step base "$bin/coding-agent-rl" images base
fi
if [[ $profile == demo ]]; then
  step agents "$bin/coding-agent-rl" agents fetch claude_code
else
  step agents "$bin/coding-agent-rl" agents fetch
fi

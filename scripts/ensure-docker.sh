#!/usr/bin/env bash
# Make a Docker engine answer on this machine, or say clearly why not.
# Exit 0: an engine answers. Exit 3: none could be had (tests marked `docker` will skip loudly,
# or fail when CI=true). Any other exit: a real error.
set -u
log=${DOCKERD_LOG:-/tmp/coding-agent-rl-dockerd.log}

if docker info >/dev/null 2>&1; then exit 0; fi

if ! command -v dockerd >/dev/null 2>&1; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-docker: installing Debian's docker.io ..." >&2
    export DEBIAN_FRONTEND=noninteractive
    (apt-get update -qq && apt-get install -y -qq docker.io >/dev/null) || {
      echo "ensure-docker: could not install docker.io with apt-get" >&2; exit 3; }
  else
    echo "ensure-docker: no Docker engine and cannot install one (need root and apt-get)" >&2
    exit 3
  fi
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "ensure-docker: dockerd is installed but not running, and we are not root to start it" >&2
  exit 3
fi

echo "ensure-docker: starting dockerd (log: $log) ..." >&2
# setsid: the engine must outlive this script (and the make/pytest process that called it).
setsid dockerd --host unix:///var/run/docker.sock >"$log" 2>&1 < /dev/null &
for _ in $(seq 1 120); do
  if docker info >/dev/null 2>&1; then echo "ensure-docker: engine is up" >&2; exit 0; fi
  sleep 0.5
done
echo "ensure-docker: dockerd did not answer within 60 s; last log lines:" >&2
tail -n 20 "$log" >&2
exit 3

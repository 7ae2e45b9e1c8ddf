#!/usr/bin/env bash
# Waits until every running container of the compose project $1 that has a
# health check reports healthy, for at most $2 seconds (default 180).
# `up -d` returns once the containers start, before the services listen,
# and a first call then fails ("server closed idle connection": the
# engine's port forwarder accepts and finds nothing behind it). Compose
# v2's `up --wait` would do this, but 1.29 has no such flag, so this asks
# the engine, which works with both.
set -euo pipefail
project=${1:?usage: wait-healthy.sh PROJECT [SECONDS]}
deadline=$((SECONDS + ${2:-180}))
while :; do
  # On a line of its own, so that an engine that does not answer fails
  # the wait rather than passing it with no containers.
  ids=$(docker ps -q --filter "label=com.docker.compose.project=$project")
  waiting=()
  for id in $ids; do
    # A container gone since it was listed has nothing to wait for.
    read -r health service < <(docker inspect -f \
      '{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}} {{index .Config.Labels "com.docker.compose.service"}}' "$id" 2>/dev/null || echo "gone -")
    case $health in
      healthy | none | gone) ;;
      *) waiting+=("$service ($health)") ;;
    esac
  done
  if ((${#waiting[@]} == 0)); then
    exit 0
  fi
  if ((SECONDS >= deadline)); then
    echo "wait-healthy: not healthy after ${2:-180} s: ${waiting[*]}" >&2
    "$(dirname "$0")/show-unhealthy.sh" "$project"
    exit 1
  fi
  sleep 1
done

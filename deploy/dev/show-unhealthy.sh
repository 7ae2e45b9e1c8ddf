#!/usr/bin/env bash
# Prints, for every container of the compose project $1 that is not running
# and healthy (exited, restarting, unhealthy, still starting), its state and
# the last lines of its log: a service that refuses its settings says why
# there ("MESHWORK_MAX_JOURNEYS_PER_CALLER="lots": not a whole number"),
# while Compose itself only says that a dependency failed to start.
set -uo pipefail
project=${1:?usage: show-unhealthy.sh PROJECT}
for id in $(docker ps -aq --filter "label=com.docker.compose.project=$project" --filter label=com.docker.compose.oneoff=False); do
  read -r state health service < <(docker inspect -f \
    '{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}} {{index .Config.Labels "com.docker.compose.service"}}' "$id" 2>/dev/null) || continue
  case "$state/$health" in
    running/healthy | running/none) continue ;;
    created/*) continue ;; # never started: the service it waited for is the one to read
    exited/none) # a one-shot service (migrate) that finished well is fine
      [[ $(docker inspect -f '{{.State.ExitCode}}' "$id" 2>/dev/null) == 0 ]] && continue ;;
  esac
  [[ $health == none ]] && health="" || health=" ($health)"
  echo "--- $service: $state$health; the end of its log (docker logs $id):" >&2
  docker logs --tail 15 "$id" 2>&1 | sed 's/^/    /' >&2
done

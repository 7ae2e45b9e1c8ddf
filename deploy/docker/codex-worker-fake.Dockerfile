# TEST IMAGE: mesh-exec with a FAKE `codex` (the test double
# services/mesh-exec/testdata/fakeagents, which plays the CLI its file is
# named after) in place of the real CLI. It exists so the Codex worker can be
# tested with no registry, no npm and no credentials; it is never a default:
# it is tagged meshwork/codex-worker-fake:test and only tests and
# `make up/offline` use it. Its agent does no work: it answers every task
# with the reply of the script make writes (bin/test/fakecodex-script.json).
# Built by `make test-images`.
ARG BASE=scratch
FROM ${BASE}
# The binaries of the target architecture (make passes bin/linux_$GOARCH).
ARG BIN=bin/linux_amd64
COPY ${BIN}/mesh-exec /usr/local/bin/app
# mesh-exec's codex backend runs "codex" from PATH.
COPY bin/test/fakeagents /usr/local/bin/codex
COPY bin/test/fakecodex-script.json /usr/local/share/fakeagents/script.json
COPY --chown=1000:1000 deploy/docker/workspace/ /workspace/
# The users, the agent's 1000 named as the real agent images (node) name it:
# the engine looks up the owner of every file it archives from a workspace
# (service.Dockerfile says why).
COPY deploy/docker/etc/agent/passwd deploy/docker/etc/agent/group /etc/
ENV PATH=/usr/local/bin HOME=/workspace/.meshwork/home MESH_EXEC_BACKEND=codex \
    FAKEAGENT_SCRIPT=/usr/local/share/fakeagents/script.json
WORKDIR /workspace
USER 1000:1000
ENTRYPOINT ["/usr/local/bin/app"]

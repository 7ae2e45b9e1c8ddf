# TEST IMAGE: mesh-exec with the FAKE `claude` (a test double from
# services/mesh-exec/testdata/fakeclaude) in place of the real CLI. It exists
# so the agent worker can be tested with no registry and no credentials; it is
# never a default: it is tagged meshwork/claude-worker-fake:test and only
# tests use it. Built by `make test-images`.
ARG BASE=scratch
FROM ${BASE}
# The binaries of the target architecture (make passes bin/linux_$GOARCH).
ARG BIN=bin/linux_amd64
COPY ${BIN}/mesh-exec /usr/local/bin/app
# The agent's hook command: asks mesh-exec to check each tool call.
COPY ${BIN}/mesh-exec-hook /usr/local/bin/mesh-exec-hook
COPY bin/test/fakeclaude /usr/local/bin/claude
COPY --chown=1000:1000 deploy/docker/workspace/ /workspace/
# The users, the agent's 1000 named as the real agent images (node) name it:
# the engine looks up the owner of every file it archives from a workspace
# (service.Dockerfile says why).
COPY deploy/docker/etc/agent/passwd deploy/docker/etc/agent/group /etc/
ENV PATH=/usr/local/bin HOME=/workspace/.meshwork/home
WORKDIR /workspace
USER 1000:1000
ENTRYPOINT ["/usr/local/bin/app"]

# The Claude Code worker image for users: Node, the @anthropic-ai/claude-code
# CLI at CLAUDE_CODE_VERSION, and mesh-exec, running as a non-root user.
# Credentials come from ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN at run
# time, never from the image. Build context: the repository root, after
# `make build`:
#   docker build -f deploy/docker/claude-worker.Dockerfile -t meshwork/claude-worker:latest .
# (`make image-claude-worker`). It needs a registry (the Node base) and the
# npm registry; machines without them use the test image instead.
ARG NODE_IMAGE=node:22-bookworm-slim
FROM ${NODE_IMAGE}
ARG CLAUDE_CODE_VERSION=2.1.330
RUN npm install -g "@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}" && npm cache clean --force \
 && mkdir -p /workspace && chown 1000:1000 /workspace
# The binaries of the target architecture (make passes bin/linux_$GOARCH).
ARG BIN=bin/linux_amd64
COPY ${BIN}/mesh-exec /usr/local/bin/app
# The agent's hook command: asks mesh-exec to check each tool call.
COPY ${BIN}/mesh-exec-hook /usr/local/bin/mesh-exec-hook
# The node image's user "node" is uid 1000, as the worker definition says.
USER 1000:1000
ENV HOME=/workspace/.meshwork/home
WORKDIR /workspace
ENTRYPOINT ["/usr/local/bin/app"]

# The Codex worker image for users (worker codex_assistant_v1,
# meshwork/codex-worker:latest): Node, the @openai/codex CLI at
# CODEX_VERSION, and mesh-exec, running as a non-root user. Credentials come
# from OPENAI_API_KEY or CODEX_API_KEY at run time, never from the image.
# Build context: the repository root, after `make build`:
#   docker build -f deploy/docker/codex-worker.Dockerfile -t meshwork/codex-worker:latest .
# (`make image-codex-worker`). It needs a registry (the Node base) and the
# npm registry; machines without them use the test image instead
# (codex-worker-fake.Dockerfile).
ARG NODE_IMAGE=node:22-bookworm-slim
FROM ${NODE_IMAGE}
ARG CODEX_VERSION=0.106.0
RUN npm install -g "@openai/codex@${CODEX_VERSION}" && npm cache clean --force \
 && mkdir -p /workspace && chown 1000:1000 /workspace
# The binaries of the target architecture (make passes bin/linux_$GOARCH).
ARG BIN=bin/linux_amd64
COPY ${BIN}/mesh-exec /usr/local/bin/app
# The node image's user "node" is uid 1000, as the worker definition says.
USER 1000:1000
# Codex keeps its sessions under $HOME/.codex: on the workspace volume, so
# they survive the container. The marketplace passes --backend codex; the
# environment makes it the default when mesh-exec is run by hand.
ENV HOME=/workspace/.meshwork/home MESH_EXEC_BACKEND=codex
WORKDIR /workspace
ENTRYPOINT ["/usr/local/bin/app"]

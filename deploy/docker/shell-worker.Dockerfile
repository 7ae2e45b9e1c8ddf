# The shell worker image (worker shell_v1, meshwork/shell-worker:latest):
# meshworker in a Debian userland with Go and git, running the definition's
# allowlisted commands (go test, go build, go vet, git status, git diff) in
# /workspace as the non-root user 65532. Build context: the repository root,
# after `make build`. One Dockerfile, two bases:
#   - for users, the official Go image (needs a registry):
#       make image-shell-worker
#       (docker build -f deploy/docker/shell-worker.Dockerfile -t meshwork/shell-worker:latest .)
#   - with no registry, a Debian root made with debootstrap holding Debian's
#     golang-go, git and ca-certificates, given as GO_IMAGE by
#     deploy/offline/shell-worker/build.sh (`make offline-images`).
ARG GO_IMAGE=golang:1.26-bookworm
FROM ${GO_IMAGE}
# meshworker runs commands as argv with PATH=/usr/local/bin:/usr/bin:/bin:
# the official image keeps go in /usr/local/go/bin, so it is linked from
# /usr/local/bin (Debian's is /usr/bin/go already). git ignores Meshwork's
# private part of the workspace, .meshwork/, in every repository; the base
# must have git (the official Go images on Debian do). The worker's user is
# named in /etc/passwd and /etc/group: the engine looks up the owner of every
# file it archives from a workspace (service.Dockerfile says why).
RUN set -eu; \
    git --version >/dev/null; \
    for tool in go gofmt; do \
      path="$(command -v "$tool")"; \
      case "$path" in /usr/local/bin/*|/usr/bin/*|/bin/*) ;; *) ln -s "$path" "/usr/local/bin/$tool" ;; esac; \
    done; \
    mkdir -p /etc/meshwork; \
    echo '/.meshwork/' >/etc/meshwork/gitignore; \
    git config --system core.excludesFile /etc/meshwork/gitignore; \
    grep -q '^[^:]*:[^:]*:65532:' /etc/passwd || echo 'nonroot:x:65532:65532:nonroot:/home/nonroot:/usr/sbin/nologin' >>/etc/passwd; \
    grep -q '^[^:]*:[^:]*:65532:' /etc/group || echo 'nonroot:x:65532:' >>/etc/group
# The binaries of the target architecture (make passes bin/linux_$GOARCH).
ARG BIN=bin/linux_amd64
COPY ${BIN}/meshworker /usr/local/bin/app
# A fresh workspace volume takes this directory's owner, so the worker,
# running as 65532, can write its own workspace.
COPY --chown=65532:65532 deploy/docker/workspace/ /workspace/
# The worker runs with a read-only root filesystem, a small noexec /tmp, no
# network and no home. Go therefore keeps its build cache, its modules and
# its work directory (GOTMPDIR: where go test links test binaries and runs
# them, so not /tmp) in the workspace's Meshwork-private part, .meshwork/,
# which workspace diffs leave out. meshworker passes these settings on to
# the commands it runs (and nothing else of its environment: they get
# HOME=/tmp, as here), and creates GOTMPDIR before each. Modules come only
# from that cache or a vendor directory (GOPROXY=off), and a go.mod never
# makes go download a toolchain (GOTOOLCHAIN=local). Go's telemetry has no
# environment setting (GOTELEMETRY is read-only); its default mode, local,
# never uploads, and the worker has no network anyway.
ENV HOME=/tmp \
    GOPATH=/workspace/.meshwork/go \
    GOMODCACHE=/workspace/.meshwork/go/pkg/mod \
    GOCACHE=/workspace/.meshwork/go/cache \
    GOTMPDIR=/workspace/.meshwork/go/tmp \
    GOTOOLCHAIN=local \
    GOPROXY=off
WORKDIR /workspace
USER 65532:65532
# The marketplace starts the container as `app idle` and runs `app serve`
# beside it (services/marketplace/cmd/meshworker).
ENTRYPOINT ["/usr/local/bin/app"]

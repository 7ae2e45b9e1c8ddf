# One Dockerfile for every Meshwork service image: it copies a prebuilt static
# binary (`make build`, CGO_ENABLED=0) onto BASE. The default base is public
# (distroless static: CA certificates, tzdata, a nonroot user); with no
# registry, build with --build-arg BASE=scratch (`make offline-images`), which
# needs nothing pulled. The build context is the repository root.
ARG BASE=gcr.io/distroless/static-debian12:nonroot
FROM ${BASE}
ARG BINARY
COPY ${BINARY} /usr/local/bin/app
# A fresh workspace volume takes this directory's owner, so workers running
# as 65532 can write their own workspace.
COPY --chown=65532:65532 deploy/docker/workspace/ /workspace/
WORKDIR /workspace
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/app"]

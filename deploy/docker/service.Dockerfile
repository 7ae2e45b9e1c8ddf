# One Dockerfile for every Meshwork service image: it copies a prebuilt static
# binary (`make build`, CGO_ENABLED=0) onto BASE. The default base is public
# (distroless static: CA certificates, tzdata, a nonroot user); with no
# registry, build with --build-arg BASE=scratch (`make offline-images`), which
# needs nothing pulled. The build context is the repository root.
ARG BASE=gcr.io/distroless/static-debian12:nonroot
FROM ${BASE}
ARG BINARY
COPY ${BINARY} /usr/local/bin/app
# The users, as distroless names them (root, nobody, nonroot 65532), so that
# scratch names them too: the engine looks a file's owner up in the image's
# /etc/passwd for every file it archives (a workspace's export, diff and
# archive), and a uid it cannot name costs it a failed lookup per file, two to
# four times the whole export's time.
COPY deploy/docker/etc/passwd deploy/docker/etc/group /etc/
# A fresh workspace volume takes this directory's owner, so workers running
# as 65532 can write their own workspace.
COPY --chown=65532:65532 deploy/docker/workspace/ /workspace/
WORKDIR /workspace
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/app"]

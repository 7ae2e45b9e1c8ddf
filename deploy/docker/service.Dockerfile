# One Dockerfile for every Meshwork service image: it copies a prebuilt static
# binary (`make build`, CGO_ENABLED=0) onto BASE. The default base is public
# (distroless static: CA certificates, tzdata, a nonroot user); with no
# registry, build with --build-arg BASE=scratch (`make offline-images`), which
# needs nothing pulled. The build context is the repository root.
ARG BASE=gcr.io/distroless/static-debian12:nonroot
FROM ${BASE}
ARG BINARY
COPY ${BINARY} /usr/local/bin/app
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/app"]

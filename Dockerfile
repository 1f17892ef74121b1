# syntax=docker/dockerfile:1
#
# Two images from one build:
#   docker build --target stickydrain -t ghcr.io/stickydrain/stickydrain:v0.1.0 .
#   docker build --target drainctl    -t ghcr.io/stickydrain/drainctl:v0.1.0 .
# stickydrain holds /webhook and /controller (the manifests' commands) and
# /stickydrain-haproxy (the HAProxy sample's reload sidecar);
# drainctl holds /drainctl alone, for the init container the webhook adds to
# pods whose image lacks it (it runs `/drainctl install /stickydrain/bin`).
#
# Bases are pinned by exact version; a release pins them by digest too
# (--build-arg GO_IMAGE=golang:1.26.8-trixie@sha256:…).
ARG GO_IMAGE=golang:1.26.8-trixie
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian13:nonroot

FROM ${GO_IMAGE} AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -tags nethttpomithttp2 -ldflags "-s -w -X github.com/stickydrain/stickydrain/drainctl/cli.Version=${VERSION}" -o /out/drainctl ./drainctl && \
    go build -ldflags "-s -w" -o /out/webhook ./webhook && \
    go build -ldflags "-s -w" -o /out/controller ./controller && \
    go build -ldflags "-s -w" -o /out/stickydrain-haproxy ./controller/cmd/stickydrain-haproxy

# The webhook and the controller: static binaries on distroless, non-root.
FROM ${RUNTIME_IMAGE} AS stickydrain
COPY --from=build /out/webhook /out/controller /out/stickydrain-haproxy /
USER 65532:65532
ENTRYPOINT ["/controller"]

# drainctl alone (about 8 MiB): nothing else is needed to copy it into a
# pod, so the image is from scratch.
FROM scratch AS drainctl
COPY --from=build /out/drainctl /drainctl
USER 65532:65532
ENTRYPOINT ["/drainctl"]

# syntax=docker/dockerfile:1
#
# The case worker image: `worker` (the entrypoint) and the `pyrula` CLI,
# static binaries on a distroless base, run as a non-root user.
#
#   docker build --build-arg VERSION="$(git describe --tags --always --dirty)" -t caseworker .
#   docker run --rm caseworker version
#
# scripts/test runs the same go build line (and deploy/manifests_test.go
# checks that the two stay the same), so a broken build line fails CI even
# where no Docker engine is available.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# The version shown by `worker version`, the pyrula_worker_build_info metric
# and the pyrula_version of saved bundles.
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/pyrula/caseworker/version.Version=${VERSION}" -o /out/ ./cmd/worker ./cmd/pyrula
RUN test "$(/out/worker version)" = "${VERSION}"

# Static binaries need no libc: distroless/static has CA certificates,
# tzdata and a nonroot user (65532), and no shell.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/worker /out/pyrula /usr/local/bin/
USER 65532:65532
# PYRULA_HTTP_ADDR: /healthz, /readyz and /metrics.
EXPOSE 9090
ENTRYPOINT ["/usr/local/bin/worker"]
CMD ["serve"]

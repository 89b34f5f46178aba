# syntax=docker/dockerfile:1

# Images of paritysync. One build stage compiles every command; each final stage is a
# target holding what one service runs, on the one runtime stage they share:
#
#   docker build --target worker -t paritysync/worker .   # worker + starter
#   docker build --target otasim -t paritysync/otasim .   # the OTA channel simulator
#   docker build --target intake -t paritysync/intake .   # the PMS-facing HTTP API
#
# docker-compose.yml builds the three targets.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# Static binaries: the final images have no libc. probe is each image's healthcheck
# (no shell, wget or curl in distroless): docker-compose.yml runs it.
ENV CGO_ENABLED=0
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    mkdir -p /out && \
    go build -trimpath -ldflags="-s -w" -o /out/ ./worker ./starter ./otasim ./intake ./deploy/probe

# What every image runs on: no shell, no libc, not root, and the probe binary its
# healthcheck runs.
FROM gcr.io/distroless/static-debian12:nonroot AS runtime
COPY --from=build /out/probe /usr/local/bin/probe
USER nonroot:nonroot

# The simulator: a demo target and test double, never part of production.
FROM runtime AS otasim
COPY --from=build /out/otasim /usr/local/bin/otasim
ENV OTASIM_ADDR=:8090
EXPOSE 8090
ENTRYPOINT ["/usr/local/bin/otasim"]

# The PMS-facing HTTP API. The API keys file (tenant:<sha256 of the key>[:admin]
# per line) is mounted, never baked in: PARITYSYNC_API_KEYS_FILE names it.
FROM runtime AS intake
COPY --from=build /out/intake /usr/local/bin/intake
ENV PARITYSYNC_INTAKE_ADDR=:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/intake"]

# The worker, with the operator command line beside it:
#   docker compose exec worker /usr/local/bin/starter dlq list
# Last, so a plain `docker build .` produces it.
FROM runtime AS worker
COPY --from=build /out/worker /usr/local/bin/worker
COPY --from=build /out/starter /usr/local/bin/starter
# The image default listens on every interface, so the metrics can be scraped from
# outside the container.
ENV PARITYSYNC_METRICS_ADDR=:9464
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/worker"]

# The etcd-hook image: a static binary on distroless, running as nonroot.
#
#   make docker-build IMAGE=registry.example.com/etcd-hook:dev

FROM golang:1.26 AS build
WORKDIR /src

# Dependencies first, so that source edits reuse this layer.
COPY go.mod go.sum ./
RUN go mod download

COPY . .
RUN CGO_ENABLED=0 GOFLAGS=-buildvcs=false \
    go build -trimpath -ldflags="-s -w" -o /out/etcd-hook ./cmd/etcd-hook

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/etcd-hook /etcd-hook
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/etcd-hook"]

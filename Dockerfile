# syntax=docker/dockerfile:1
# svcproxy's image: a drop-in for kube-proxy's. kubeadm's DaemonSet runs
# /usr/local/bin/kube-proxy, which here is a symlink to svcproxy.
#
#   docker buildx build --platform linux/amd64,linux/arm64 --build-arg VERSION=$(hack/version.sh) \
#     --build-arg COMMIT=$(git rev-parse HEAD) -t svcproxy:$(hack/version.sh) .
#
# Without a container engine, `make image` (hack/image.sh) builds the same image as an OCI
# layout from Debian's packages and tests it; keep the package list in step with it.

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd/ cmd/
COPY internal/ internal/
COPY pkg/ pkg/
ARG VERSION=v0.0.0-dev
ARG COMMIT=""
ARG TARGETOS TARGETARCH
# As hack/version.sh ldflags: svcproxy's version and, for kubernetes_build_info, component-base's.
ARG CB=k8s.io/component-base/version
# Static and reproducible: no cgo (svcproxy talks netlink itself and runs nft/iptables as
# programs), no local paths; the commit comes from a build argument since .git is not in
# the build context.
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH:-amd64} go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/svcproxy/svcproxy/internal/app.Version=${VERSION} -X github.com/svcproxy/svcproxy/internal/app.gitCommit=${COMMIT} \
        -X ${CB}.gitVersion=${VERSION} -X ${CB}.gitCommit=${COMMIT}" \
      -o /out/svcproxy ./cmd/svcproxy

FROM debian:bookworm-slim
# nftables 1.0.6 (knftables needs >= 1.0.1; an nft older than the host's is safer than a
# newer one). iptables ships both flavours: iptables-legacy-* and iptables-nft-*. svcproxy does
# not use the image's /usr/sbin/iptables alternative: in iptables and ipvs mode it detects the
# host's flavour itself, as upstream's iptables-wrapper does (kubelet's KUBE-IPTABLES-HINT
# chain, else whichever flavour holds rules), and runs iptables-<flavour>-restore directly.
# ipset and the iptables rules serve ipvs mode; conntrack is for debugging (svcproxy deletes
# flows over netlink); kmod lets it load modules from the host's /lib/modules.
RUN apt-get update \
 && apt-get upgrade -y \
 && apt-get install -y --no-install-recommends nftables iptables ipset conntrack kmod \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/svcproxy /usr/local/bin/svcproxy
RUN ln -s svcproxy /usr/local/bin/kube-proxy
ARG VERSION=v0.0.0-dev
LABEL org.opencontainers.image.title="svcproxy" \
      org.opencontainers.image.source="https://github.com/svcproxy/svcproxy" \
      org.opencontainers.image.version="${VERSION}"
ENTRYPOINT ["/usr/local/bin/svcproxy"]

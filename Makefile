# svcproxy — a thin menu over the scripts in hack/. Run as root on Debian.
#
#   make build    build _output/bin/svcproxy (version from git: hack/version.sh)
#   make release  static binaries for linux/amd64 and linux/arm64, a two-architecture OCI image
#                 index with an SPDX SBOM per image, under _output/release/ (root; docs/user/release.md)
#   make test     install missing apt packages, then every Go test (unit, fuzz seeds, kernel)
#   make verify   gofmt, go vet, staticcheck, import rules; the committed eBPF objects against
#                 their source where clang is installed
#   make bpf      regenerate the committed eBPF objects (hack/update-bpf.sh; needs clang:
#                 hack/update-bpf.sh --install installs Debian's)
#   make bench    the nftables benchmark (test/bench/nftables)
#   make bench-nodeport  packets through a node port from outside: packets/s and CPU per packet,
#                 and new TCP connections/s, per backend (ebpf: tc and XDP) at 1k and 50k Services
#                 (test/bench/nodeport; root, minutes)
#   make bench-e2e  10k Services × 10 endpoints through a real API server: first sync,
#                 network programming latency under churn, peak RSS (hack/bench-e2e.sh)
#   make bench-100k  the same at 100k Services × 10, ebpf beside nftables (root; the better part of an hour)
#   make footprint  the binary's sections, its inits' heap and an idle process's RSS by
#                 mapping (hack/footprint.sh; root, 20 s)
#   make demo     a throwaway cluster in network namespaces: real kube-apiserver, two nodes
#                 running svcproxy, pods, a client; shows load balancing, then tears it down
#   make demo-down  remove what a demo left (killed hard, or still running): its namespaces
#   make cluster-up / cluster-down  a real 2-node cluster (kubelet, containerd) in network
#                 namespaces with svcproxy as the kube-proxy DaemonSet from deploy/
#   make e2e-upstream MODE=nftables|iptables|ebpf PROXY=svcproxy|kube-proxy  upstream's sig-network
#                 e2e suite (e2e.test v1.37.1) on that cluster; results in _output/cluster/e2e/
#                 (MODE=ebpf TC=eth0 ACCEL=native: with the tc programs and XDP on the nodes' eth0)
#   make clean    remove _output/ (including the cached control-plane binaries)

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
OUTPUT := _output
GO ?= go
# Version, commit and build date go in with -X (hack/version.sh), as in a release.
LDFLAGS = $(shell hack/version.sh ldflags)

.PHONY: all build release test verify bench bench-nodeport bench-e2e bench-100k footprint demo demo-down controlplane deps clean help e2e

all: build

help:
	@sed -n '3,27p' Makefile

# Static, as the image builds it (Dockerfile): a cgo build also maps libc and
# the dynamic loader, 1.3 MiB more resident memory than what ships.
build:
	@mkdir -p $(OUTPUT)/bin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(OUTPUT)/bin/svcproxy ./cmd/svcproxy

deps:
	hack/deps.sh

test: deps
	hack/test.sh

.PHONY: test-ipvs
test-ipvs: # the IPVS backend's real-kernel tests inside a qemu VM (this kernel has no IPVS)
	hack/ipvs-vm.sh

verify:
	hack/verify.sh

.PHONY: bpf
bpf:
	hack/update-bpf.sh

release: ; hack/release.sh # binaries, image index, SBOMs under _output/release; root, minutes; not in make test

image: ; hack/image.sh all # OCI layout _output/image/oci, tested in a chroot; root, debootstrap on first run (minutes); not in make test

bench:
	$(GO) run ./test/bench/nftables
	$(GO) run ./test/bench/iptables

bench-nodeport: ; $(GO) run ./test/bench/nodeport # node-port packet path per backend; root, minutes; not in make test

footprint: ; hack/footprint.sh

bench-e2e: deps ; hack/bench-e2e.sh # end-to-end scale benchmark (test/e2e/bench, tag benche2e); root, minutes; not in make test

# The eBPF issue's 100k run: 1k Services through the API, 99k written into each run's etcd
# once its API server is up; ebpf mode beside nftables, one run each, the 1k datapath
# reference in the same invocation. Any BENCH_E2E_* knob still applies.
bench-100k: deps
	BENCH_E2E_SERVICES=100000 BENCH_E2E_SEED_API=$${BENCH_E2E_SEED_API:-1000} \
	BENCH_E2E_MODES="$${BENCH_E2E_MODES:-ebpf nftables}" BENCH_E2E_RUNS=$${BENCH_E2E_RUNS:-1} \
	BENCH_E2E_LIST_FLOORS=$${BENCH_E2E_LIST_FLOORS:-false} \
	hack/bench-e2e.sh

controlplane:
	hack/build-controlplane.sh

e2e: deps ; hack/e2e.sh # end-to-end suite (test/e2e): real kube-apiserver, nodes running svcproxy in netns, nftables + iptables; also part of make test

demo: deps
	hack/demo.sh

demo-down:
	hack/demo.sh down

# The real cluster (hack/cluster.sh): PROXY=svcproxy|kube-proxy, MODE=nftables|iptables|ebpf
# (ebpf: svcproxy only).
# Root; the first run builds kubelet, kcm, scheduler, kubectl, agnhost, e2e.test (~17 min on a
# quiet 2-core machine) and `make image`. Not part of make test.
.PHONY: cluster-up cluster-down e2e-upstream
PROXY ?= svcproxy
MODE ?= nftables
cluster-up: ; PROXY=$(PROXY) MODE=$(MODE) hack/cluster.sh up
cluster-down: ; hack/cluster.sh down
SUITE ?= all
e2e-upstream: ; PROXY=$(PROXY) MODE=$(MODE) SUITE=$(SUITE) hack/e2e-upstream.sh

clean:
	rm -rf $(OUTPUT)

package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/nodeport"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/iptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/test/bench/internal/benchkit"
)

// firstNodePort is service 0's node port in benchkit's cluster; service i
// has firstNodePort+i.
const firstNodePort = 10000

// benchState is benchkit's cluster of n Services on this node, with the
// first targets turned into UDP Services whose endpoints are on ep0: the
// ones the sender addresses; and the next one a TCP Service with the same
// endpoints, the one the connectors address (connTarget). The rest only
// fill the tables. The pod CIDR
// is narrowed to 198.18.0.0/16, so that the sender (198.19.254.2) is a
// client from outside, which externalTrafficPolicy Cluster masquerades.
func benchState(n, targets int) (*desired.State, error) {
	st, err := benchkit.BuildState(n, nodeIP)
	if err != nil {
		return nil, err
	}
	st.Masquerade.Local.CIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/16")}
	services := model.NewPortMapEditor(st.Services)
	for i := 0; i <= targets; i++ {
		sp := *benchkit.MakeServicePort(i)
		if sp.NodePort != uint16(firstNodePort+i) {
			return nil, fmt.Errorf("service %d has node port %d, want %d", i, sp.NodePort, firstNodePort+i)
		}
		services.Remove(sp.Name)
		if i < targets {
			sp.Name.Protocol, sp.Protocol = proxy.UDP, proxy.UDP
		}
		eps := make([]desired.Endpoint, len(endpoints))
		for k, ip := range endpoints {
			eps[k] = desired.Endpoint{IP: ip, Port: serverPort}
		}
		d := desired.Dispatch{Endpoints: eps, Empty: desired.Reject}
		sp.Internal, sp.External, sp.Cluster = d, d, d
		services.Set(sp.Name, &sp)
	}
	st.Services = services.Done()
	return st, nil
}

// A mode programs the node namespace from a State and returns what
// removes it again.
type mode struct {
	name    string
	program func(t *topo, st *desired.State) (func(), error)
}

func modes(flavour kiptables.Flavour) []mode {
	return []mode{
		{"nftables", programNFT},
		{"iptables", func(t *topo, st *desired.State) (func(), error) { return programIPT(t, st, flavour) }},
		{"ebpf-tc", func(t *topo, st *desired.State) (func(), error) { return programTC(t, st, "") }},
		{"ebpf-xdp", func(t *topo, st *desired.State) (func(), error) {
			return programTC(t, st, nodeport.AccelerationNative)
		}},
	}
}

func programNFT(t *topo, st *desired.State) (func(), error) {
	var p *nftables.Proxier
	err := t.node.Do(func() error {
		var err error
		if p, err = nftables.New(proxy.IPv4, nftables.Options{}); err != nil {
			return err
		}
		return p.Sync(context.Background(), st, proxy.FullSync)
	})
	if p == nil {
		return nil, err
	}
	return p.Close, err
}

func programIPT(t *topo, st *desired.State, flavour kiptables.Flavour) (func(), error) {
	ctx := context.Background()
	err := t.node.Do(func() error {
		p, err := iptables.New(ctx, proxy.IPv4, iptables.Options{Flavour: flavour})
		if err != nil {
			return err
		}
		if err := p.Init(ctx); err != nil {
			return err
		}
		return p.Sync(ctx, st, proxy.FullSync)
	})
	// The rules go with the namespace.
	return func() {}, err
}

// programTC attaches the tc programs to both of the node's links, and
// np_xdp in front of them as accel says: the endpoints are then on
// "another node", reached by redirect, as most endpoints of a node port
// are.
func programTC(t *topo, st *desired.State, accel nodeport.Acceleration) (func(), error) {
	pins, err := os.MkdirTemp("", "bench-nodeport-bpf")
	if err != nil {
		return nil, err
	}
	if err := unix.Mount("none", pins, "bpf", 0, ""); err != nil {
		_ = os.Remove(pins)
		return nil, fmt.Errorf("mount a bpffs: %w", err)
	}
	unmount := onExit(func() {
		_ = unix.Unmount(pins, 0)
		_ = os.Remove(pins)
	})
	// A directory of the bpffs, as svcproxy's own (<pin dir>/tc): a load
	// removes what it does not own from its directory, and the root of a
	// bpffs holds the kernel's own files (maps.debug, progs.debug).
	p, err := nodeport.New(nodeport.Options{PinDir: filepath.Join(pins, "tc"), Interfaces: []string{extIf, intIf}, Acceleration: accel})
	if err != nil {
		unmount()
		return nil, err
	}
	remove := func() {
		_ = t.node.Do(p.Cleanup)
		unmount()
	}
	err = t.node.Do(func() error { return p.Sync(context.Background(), st, proxy.FullSync) })
	return remove, err
}

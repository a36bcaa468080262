package localnodeport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The tests bind real sockets on the host's loopback (nothing else): the
// "node ports" are free ports the kernel picked, and the endpoints are
// echo servers that name themselves.

// backend is an endpoint that answers every connection with its name,
// then echoes what it reads until the client half-closes.
func backend(t *testing.T, addr netip.Addr, name string) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintf(c, "%s\n", name)
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String())
}

// freePort returns a TCP port nothing listens on at addr.
func freePort(t *testing.T, addr netip.Addr) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return netip.MustParseAddrPort(ln.Addr().String()).Port()
}

// ask connects to addr:port, sends a line, and returns the endpoint's name
// and whether the line came back.
func ask(t *testing.T, addr netip.Addr, port uint16) (string, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", netip.AddrPortFrom(addr, port).String(), 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return "", err
	}
	_ = c.(*net.TCPConn).CloseWrite()
	r := bufio.NewReader(c)
	name, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("reading the endpoint's name: %w", err)
	}
	rest, err := io.ReadAll(r)
	if err != nil || string(rest) != "ping\n" {
		return "", fmt.Errorf("echo %q, %v: want \"ping\\n\" and EOF", rest, err)
	}
	return strings.TrimSpace(name), nil
}

var lo4 = netip.MustParseAddr("127.0.0.1")

// value reads a gauge or counter child.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if out.Gauge != nil {
		return out.GetGauge().GetValue()
	}
	return out.GetCounter().GetValue()
}

func newTestProxy(t *testing.T, family proxy.IPFamily) (*Proxy, *clocktesting.FakeClock) {
	t.Helper()
	return newBoundedTestProxy(t, family, Options{})
}

// newBoundedTestProxy is newTestProxy with opts instead of the defaults.
func newBoundedTestProxy(t *testing.T, family proxy.IPFamily, opts Options) (*Proxy, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Now())
	p := newProxy(context.Background(), family, clk, opts)
	t.Cleanup(p.Close)
	return p, clk
}

func TestServesOverEveryEndpoint(t *testing.T) {
	p, _ := newTestProxy(t, proxy.IPv4)
	a, b := backend(t, lo4, "a"), backend(t, lo4, "b")
	port := freePort(t, lo4)
	p.Sync([]Spec{{Port: port, Endpoints: []netip.AddrPort{a, b}}})
	seen := map[string]int{}
	for range 40 {
		name, err := ask(t, lo4, port)
		if err != nil {
			t.Fatal(err)
		}
		seen[name]++
	}
	if seen["a"] == 0 || seen["b"] == 0 {
		t.Errorf("40 connections reached %v, want both endpoints", seen)
	}
}

func TestAffinityPinsUntilIdle(t *testing.T) {
	p, clk := newTestProxy(t, proxy.IPv4)
	eps := []netip.AddrPort{backend(t, lo4, "a"), backend(t, lo4, "b"), backend(t, lo4, "c")}
	port := freePort(t, lo4)
	p.Sync([]Spec{{Port: port, Endpoints: eps, Affinity: 10 * time.Second}})
	first, err := ask(t, lo4, port)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		clk.Step(9 * time.Second) // each connection renews the pin
		if got, err := ask(t, lo4, port); err != nil || got != first {
			t.Fatalf("within the affinity window: %q, %v; want %q", got, err, first)
		}
	}
	// Idle past the timeout: a new pick, which over enough tries leaves
	// the first endpoint.
	moved := false
	for range 30 {
		clk.Step(11 * time.Second)
		if got, _ := ask(t, lo4, port); got != first {
			moved = true
			break
		}
	}
	if !moved {
		t.Errorf("after idling past the timeout every connection still went to %q", first)
	}
}

func TestAffinityFollowsEndpointChanges(t *testing.T) {
	p, _ := newTestProxy(t, proxy.IPv4)
	a, b := backend(t, lo4, "a"), backend(t, lo4, "b")
	port := freePort(t, lo4)
	spec := Spec{Port: port, Endpoints: []netip.AddrPort{a}, Affinity: time.Hour}
	p.Sync([]Spec{spec})
	if got, err := ask(t, lo4, port); err != nil || got != "a" {
		t.Fatalf("got %q, %v; want a", got, err)
	}
	// The pinned endpoint goes: the next connection picks among the rest.
	spec.Endpoints = []netip.AddrPort{b}
	p.Sync([]Spec{spec})
	if got, err := ask(t, lo4, port); err != nil || got != "b" {
		t.Fatalf("after the pinned endpoint went: %q, %v; want b", got, err)
	}
}

// TestListenersFollowSpecs: a port without endpoints, or no longer
// listed, has no listener, so the kernel refuses its connections; a port
// whose endpoints change keeps its listener and uses the new ones.
func TestListenersFollowSpecs(t *testing.T) {
	p, _ := newTestProxy(t, proxy.IPv4)
	a, b := backend(t, lo4, "a"), backend(t, lo4, "b")
	port, empty := freePort(t, lo4), freePort(t, lo4)
	p.Sync([]Spec{{Port: port, Endpoints: []netip.AddrPort{a}}, {Port: empty}})
	if got := p.Ports(); !slices.Equal(got, []uint16{port}) {
		t.Fatalf("listeners %v, want [%d]", got, port)
	}
	if got := value(t, metrics.LocalhostNodePortListeners.WithLabelValues("IPv4")); got != 1 {
		t.Errorf("listeners gauge %v, want 1", got)
	}
	if _, err := ask(t, lo4, empty); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("port without endpoints: %v, want connection refused", err)
	}
	p.Sync([]Spec{{Port: port, Endpoints: []netip.AddrPort{b}}})
	if got, err := ask(t, lo4, port); err != nil || got != "b" {
		t.Errorf("after the endpoints changed: %q, %v; want b", got, err)
	}
	p.Sync(nil)
	if _, err := ask(t, lo4, port); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("after the node port went: %v, want connection refused", err)
	}
	if got := value(t, metrics.LocalhostNodePortListeners.WithLabelValues("IPv4")); got != 0 {
		t.Errorf("listeners gauge %v, want 0", got)
	}
}

// TestBindFailureIsCountedAndRetried: a port someone else holds is
// counted as a failure and bound at a later Sync once it is free.
func TestBindFailureIsCountedAndRetried(t *testing.T) {
	p, _ := newTestProxy(t, proxy.IPv4)
	a := backend(t, lo4, "a")
	squatter, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := netip.MustParseAddrPort(squatter.Addr().String()).Port()
	failures := metrics.LocalhostNodePortListenerCreationFailuresTotal.WithLabelValues("IPv4")
	before := value(t, failures)
	spec := []Spec{{Port: port, Endpoints: []netip.AddrPort{a}}}
	p.Sync(spec)
	if got := value(t, failures) - before; got != 1 {
		t.Errorf("creation failures +%v, want +1", got)
	}
	_ = squatter.Close()
	p.Sync(spec)
	if got, err := ask(t, lo4, port); err != nil || got != "a" {
		t.Errorf("after the port was freed: %q, %v; want a", got, err)
	}
}

// TestCloseCutsOpenConnections: an idle connection does not keep its
// goroutines (or the endpoint's connection) once the proxy closes.
func TestCloseCutsOpenConnections(t *testing.T) {
	p, _ := newTestProxy(t, proxy.IPv4)
	port := freePort(t, lo4)
	p.Sync([]Spec{{Port: port, Endpoints: []netip.AddrPort{backend(t, lo4, "a")}}})
	c, err := net.Dial("tcp", netip.AddrPortFrom(lo4, port).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if name, err := r.ReadString('\n'); err != nil || name != "a\n" {
		t.Fatalf("greeting %q, %v", name, err)
	}
	p.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("the connection stayed open after Close")
	}
}

func TestIPv6ListensOnIPv6Loopback(t *testing.T) {
	lo6 := netip.IPv6Loopback()
	if ln, err := net.Listen("tcp", "[::1]:0"); err != nil {
		t.Fatalf("this host has no IPv6 loopback: %v", err)
	} else {
		_ = ln.Close()
	}
	p, _ := newTestProxy(t, proxy.IPv6)
	port := freePort(t, lo6)
	p.Sync([]Spec{{Port: port, Endpoints: []netip.AddrPort{backend(t, lo6, "six")}}})
	if got, err := ask(t, lo6, port); err != nil || got != "six" {
		t.Errorf("[::1]:%d: %q, %v; want six", port, got, err)
	}
	if _, err := ask(t, lo4, port); err == nil {
		t.Errorf("the IPv6 proxy answered on 127.0.0.1:%d", port)
	}
}

// TestSpecsFromState: TCP node ports only, with the endpoints node-port
// traffic uses (External: local only under eTP=Local) and the affinity.
func TestSpecsFromState(t *testing.T) {
	ep := func(s string) desired.Endpoint {
		ap := netip.MustParseAddrPort(s)
		return desired.Endpoint{IP: ap.Addr(), Port: ap.Port()}
	}
	name := func(n string, p proxy.Protocol) proxy.ServicePortName {
		return proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "ns", Name: n}, Port: "p", Protocol: p}
	}
	cluster := desired.Dispatch{Endpoints: []desired.Endpoint{ep("10.0.1.1:80"), ep("10.0.2.1:80")}}
	local := desired.Dispatch{Endpoints: []desired.Endpoint{ep("10.0.1.1:80")}}
	st := &desired.State{Family: proxy.IPv4, NodePorts: desired.NodePortAddrs{Localhost: desired.LocalhostProxied}, Services: model.NewPortMap(map[proxy.ServicePortName]*desired.ServicePort{
		name("web", proxy.TCP):     {Name: name("web", proxy.TCP), Protocol: proxy.TCP, NodePort: 30080, Cluster: cluster, External: cluster, AffinitySeconds: 30},
		name("local", proxy.TCP):   {Name: name("local", proxy.TCP), Protocol: proxy.TCP, NodePort: 30081, Cluster: cluster, External: local, ExternalLocal: true},
		name("dns", proxy.UDP):     {Name: name("dns", proxy.UDP), Protocol: proxy.UDP, NodePort: 30053, Cluster: cluster, External: cluster},
		name("cluster", proxy.TCP): {Name: name("cluster", proxy.TCP), Protocol: proxy.TCP, Cluster: cluster, External: cluster},
	})}
	got := Specs(st)
	slices.SortFunc(got, func(a, b Spec) int { return int(a.Port) - int(b.Port) })
	want := []Spec{
		{Name: name("web", proxy.TCP), Port: 30080, Endpoints: []netip.AddrPort{netip.MustParseAddrPort("10.0.1.1:80"), netip.MustParseAddrPort("10.0.2.1:80")}, Affinity: 30 * time.Second},
		{Name: name("local", proxy.TCP), Port: 30081, Endpoints: []netip.AddrPort{netip.MustParseAddrPort("10.0.1.1:80")}},
	}
	if !slices.EqualFunc(got, want, func(a, b Spec) bool {
		return a.Name == b.Name && a.Port == b.Port && a.Affinity == b.Affinity && slices.Equal(a.Endpoints, b.Endpoints)
	}) {
		t.Errorf("Specs() = %+v\nwant %+v", got, want)
	}
	for _, l := range []desired.LocalhostNodePorts{desired.LocalhostOff, desired.LocalhostReject, desired.LocalhostDNAT} {
		st.NodePorts.Localhost = l
		if got := Specs(st); len(got) != 0 {
			t.Errorf("localhost decision %s: Specs() = %+v, want none (not handed to the proxy)", l, got)
		}
	}
}

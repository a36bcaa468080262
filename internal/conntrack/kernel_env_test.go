package conntrack_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/conntrack"
	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// The topology: a client on the fabric sends through node1, which runs the
// nftables backend and the reconciler; pod-a and pod-b behind node1 run
// TCP, UDP and SCTP echo servers on podPort.
const (
	podPort  = 8080
	svcPort  = 80
	nodePort = 30080 // UDP; TCP +1, SCTP +2
	nodeName = "node1"
)

var clusterIP = netip.MustParseAddr("172.30.0.10")

type env struct {
	t       *testing.T
	node    *netnstest.Node
	pods    map[string]*netnstest.Pod
	servers map[string]map[proxy.Protocol]*netnstest.Server
	client  *netnstest.NS
	ct      *kconntrack.Client // in the node's namespace
	proxier *nftables.Proxier
	tracker *model.Tracker
	state   *desired.State
}

// requireKernel fails, never skips: without root these tests prove nothing.
func requireKernel(t *testing.T) { t.Helper(); netnstest.RequireKernel(t) }

func newEnv(t *testing.T) *env {
	t.Helper()
	requireKernel(t)
	lab := netnstest.New(t)
	cluster, err := netnstest.NewCluster(lab, 1)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, node: cluster.Nodes[0], pods: map[string]*netnstest.Pod{},
		servers: map[string]map[proxy.Protocol]*netnstest.Server{}}
	for _, name := range []string{"pod-a", "pod-b"} {
		pod, err := e.node.AddPod(name)
		if err != nil {
			t.Fatal(err)
		}
		e.pods[name] = pod
		e.servers[name] = map[proxy.Protocol]*netnstest.Server{}
		for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP, proxy.SCTP} {
			if e.servers[name][proto], err = pod.NS.Serve(name, proto, podPort); err != nil {
				t.Fatal(err)
			}
		}
	}
	if e.client, _, err = cluster.AddClient("client", e.node, 1); err != nil {
		t.Fatal(err)
	}
	h, err := netns.GetFromPath(e.node.NS.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if e.ct, err = kconntrack.NewAt(h); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.ct.Close() })
	e.restartProxier()
	return e
}

// restartProxier starts a fresh Proxier and tracker, as a daemon restart
// does; the kernel keeps its table and flows.
func (e *env) restartProxier() {
	err := e.node.NS.Do(func() (err error) {
		e.proxier, err = nftables.New(proxy.IPv4, nftables.Options{})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.tracker, e.state = model.NewTracker(proxy.IPv4), nil
}

func (e *env) service() *v1.Service {
	return proxytest.MakeService("ct", "svc", func(svc *v1.Service) {
		svc.Spec.Type = v1.ServiceTypeNodePort
		svc.Spec.ClusterIP = clusterIP.String()
		svc.Spec.ClusterIPs = []string{clusterIP.String()}
		svc.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol}
		for i, proto := range []v1.Protocol{v1.ProtocolUDP, v1.ProtocolTCP, v1.ProtocolSCTP} {
			svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: string(proto), Protocol: proto,
				Port: svcPort, NodePort: nodePort + int32(i)})
		}
	})
}

// serve programs the node so the service is served by the named pods (none:
// the service rejects), and returns what the syncer would hand AfterSync.
func (e *env) serve(pods ...string) (*desired.State, model.Changes) {
	e.t.Helper()
	var ports []proxytest.SlicePort
	for _, proto := range []v1.Protocol{v1.ProtocolUDP, v1.ProtocolTCP, v1.ProtocolSCTP} {
		ports = append(ports, proxytest.SlicePort{Name: string(proto), Port: podPort, Protocol: proto})
	}
	var eps []proxytest.EP
	for _, p := range pods {
		eps = append(eps, proxytest.EP{IP: e.pods[p].IPv4, Node: nodeName})
	}
	e.tracker.OnServiceUpdate(nil, e.service())
	e.tracker.OnEndpointSliceUpdate(nil, proxytest.Slice("ct", "svc", ports, eps...))
	return e.sync()
}

// sync commits the tracker, computes and programs the State.
func (e *env) sync() (*desired.State, model.Changes) {
	e.t.Helper()
	snap, changes := e.tracker.Commit()
	n := e.node
	node := desired.Node{Name: nodeName, IPs: []netip.Addr{n.IPv4}, PodCIDRs: []netip.Prefix{n.PodsV4},
		HostAddrs: []netip.Addr{n.IPv4}}
	e.state = desired.Compute(e.state, snap, changes, node, desired.Options{Family: proxy.IPv4,
		MasqueradeBit: 14, DetectLocalMode: "ClusterCIDR", ClusterCIDRs: []netip.Prefix{netnstest.ClusterCIDRv4}})
	if err := n.NS.Do(func() error { return e.proxier.Sync(context.Background(), e.state, proxytest.ModeOf(e.state)) }); err != nil {
		e.t.Fatalf("sync: %v", err)
	}
	return e.state, changes
}

// flowsTo lists the node's flows of proto whose original destination is dst.
func (e *env) flowsTo(proto uint8, dst netip.AddrPort) []kconntrack.Flow {
	e.t.Helper()
	var out []kconntrack.Flow
	err := e.ct.List(context.Background(), proxy.IPv4, func(f kconntrack.Flow) {
		if f.Proto == proto && f.Orig.Dst == dst {
			out = append(out, f)
		}
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// sender keeps one UDP socket (one flow) sending to dst, as a DNS or
// statsd client does, and remembers who answered last.
type sender struct {
	dst  netip.AddrPort
	conn *net.UDPConn

	mu      sync.Mutex
	last    string // server name, or the error's outcome
	answers map[string]int
}

func (e *env) startSender(dst netip.AddrPort) *sender {
	e.t.Helper()
	s := &sender{dst: dst, answers: map[string]int{}}
	err := e.client.Do(func() (err error) {
		s.conn, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	e.t.Cleanup(func() { cancel(); s.conn.Close(); <-done })
	go func() { defer close(done); s.loop(ctx) }()
	return s
}

func (s *sender) loop(ctx context.Context) {
	buf := make([]byte, 1500)
	for ctx.Err() == nil {
		_ = s.conn.SetDeadline(time.Now().Add(100 * time.Millisecond))
		got := ""
		if _, err := s.conn.Write([]byte("hello\n")); err != nil {
			got = string(netnstest.OutcomeOf(err))
		} else if n, err := s.conn.Read(buf); err != nil {
			got = string(netnstest.OutcomeOf(err))
		} else {
			var name string
			fmt.Sscan(string(buf[:n]), &name)
			got = name
		}
		s.mu.Lock()
		s.last = got
		s.answers[got]++
		s.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *sender) lastAnswer() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// waitFor waits until the sender's last answer is from server, and
// returns how long that took.
func (s *sender) waitFor(t *testing.T, server string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for s.lastAnswer() != server {
		if time.Since(start) > within {
			t.Fatalf("%s: still answered by %q after %v, want %s", s.dst, s.lastAnswer(), within, server)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// neverFor checks that the sender does not reach server for d: the flow is
// stuck, which is what the reconciler is for.
func (s *sender) neverFor(t *testing.T, server string, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if got := s.lastAnswer(); got == server {
			t.Fatalf("%s reached %s without the reconciler: the test proves nothing", s.dst, server)
		}
	}
}

// runReconciler starts a Reconciler in the background, as the daemon does.
func (e *env) runReconciler(opts conntrack.Options) *conntrack.Reconciler {
	r := conntrack.New(proxy.IPv4, e.ct, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-done })
	return r
}

// lastAnswerOnce waits for the sender's first answer from a pod and
// returns that pod's name.
func (s *sender) lastAnswerOnce(t *testing.T) string {
	t.Helper()
	for start := time.Now(); time.Since(start) < oneRound; time.Sleep(10 * time.Millisecond) {
		if got := s.lastAnswer(); got == "pod-a" || got == "pod-b" {
			return got
		}
	}
	t.Fatalf("%s: no pod answered", s.dst)
	return ""
}

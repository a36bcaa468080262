package nodeport

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// The real-packet tests of direct server return: the kernel tests' rig,
// with node2 running the programs too, each node its own Proxier and pins,
// each the other's peer. The client reaches the Services through node1;
// their one endpoint is pod-b, on node2. node1 tunnels the client's
// packets to node2 unchanged, node2 delivers them to pod-b with the
// client's address, and pod-b's answers go from node2 to the client
// directly, with the frontend as their source.

// dsrLBIP is the Services' LB IP, routed by the client through node1.
var dsrLBIP = netip.MustParseAddr("198.18.200.10")

// The Services' node ports: TCP's, UDP's, and the upload sink's.
const (
	dsrTCPPort  = 30080
	dsrUDPPort  = 30081
	dsrSinkPort = 30090
)

type dsrRig struct {
	*rig
	p1, p2 *Proxier
	// pins1 and pins2 are the nodes' pin directories.
	pins1, pins2 string
	// sink is pod-b's upload sink port.
	sink uint16
}

func newDSRKernelRig(t *testing.T) *dsrRig {
	r := &dsrRig{rig: newRig(t), sink: 9090}
	r.pins1, r.pins2 = filepath.Join(r.pins, "node1"), filepath.Join(r.pins, "node2")
	for _, p := range []**Proxier{&r.p1, &r.p2} {
		dir := r.pins1
		if p == &r.p2 {
			dir = r.pins2
		}
		var err error
		*p, err = New(Options{PinDir: dir, Interfaces: []string{"fab0"}})
		must(t, err)
		t.Cleanup((*p).Close)
	}
	serveSink(t, r.podB.NS, r.sink)
	return r
}

// ports are the Services as each node's State has them: pod-b their one
// endpoint; node1 tunnels to node2 where node2 is its peer, and node2
// serves what node1 tunnels with pod-b.
func (r *dsrRig) ports(onNode2 bool, peer bool) []*desired.ServicePort {
	b := r.ep(r.podB)
	sink := ep(r.podB.IPv4, r.sink)
	web, dns, bulk := port("web", proxy.TCP, dsrTCPPort, b), port("dns", proxy.UDP, dsrUDPPort, b), port("bulk", proxy.TCP, dsrSinkPort, sink)
	bulk.Port = 90
	for _, sp := range []*desired.ServicePort{web, dns, bulk} {
		sp.LoadBalancerIPs = []netip.Addr{dsrLBIP}
		d := &desired.DSR{}
		switch {
		case onNode2:
			d.In = sp.External
		case peer:
			d.Tunnels = []desired.Tunnel{{Endpoint: r.podB.IPv4, Node: r.node2.IPv4}}
		}
		sp.DSR = d
	}
	return []*desired.ServicePort{web, dns, bulk}
}

// syncDSR syncs node1 (with node2 as its peer, or none) and node2 (with
// node1 as its peer), each in its own namespace; both know the cluster's
// sources, the nodes and their pods.
func (r *dsrRig) syncDSR(t *testing.T, node2IsPeer bool) {
	t.Helper()
	sources := []netip.Prefix{r.node1.PodsV4, r.node2.PodsV4, netip.PrefixFrom(r.node1.IPv4, 32), netip.PrefixFrom(r.node2.IPv4, 32)}
	slices.SortFunc(sources, netip.Prefix.Compare)
	st1 := stateOf(r.node1.IPv4, r.ports(false, node2IsPeer)...)
	if node2IsPeer {
		st1.Peers = []netip.Addr{r.node2.IPv4}
	}
	st2 := stateOf(r.node2.IPv4, r.ports(true, true)...)
	st2.Peers = []netip.Addr{r.node1.IPv4}
	st1.ClusterSources, st2.ClusterSources = sources, sources
	must(t, r.node1.NS.Do(func() error { return r.p1.Sync(context.Background(), st1, proxy.FullSync) }))
	must(t, r.node2.NS.Do(func() error { return r.p2.Sync(context.Background(), st2, proxy.FullSync) }))
}

// TestKernelDSRRealPackets: TCP and UDP to node1's node port and to the
// LB IP reach pod-b with the client's address, and the client's connected
// sockets get the answers, from the frontend; every answer reached the
// client from node2 (its Ethernet source), and node1 holds no reply
// entry, only the tunnel's: the replies did not pass node1.
func TestKernelDSRRealPackets(t *testing.T) {
	r := newDSRKernelRig(t)
	r.syncDSR(t, true)
	frames, err := r.client.NS.Capture("fab0")
	must(t, err)
	frontends := []netip.AddrPort{}
	for _, c := range []struct {
		proto proxy.Protocol
		dst   netip.AddrPort
	}{
		{proxy.TCP, netip.AddrPortFrom(r.node1.IPv4, dsrTCPPort)}, {proxy.UDP, netip.AddrPortFrom(r.node1.IPv4, dsrUDPPort)},
		{proxy.TCP, netip.AddrPortFrom(dsrLBIP, 80)}, {proxy.UDP, netip.AddrPortFrom(dsrLBIP, 80)},
	} {
		frontends = append(frontends, c.dst)
		seen := r.ask(t, c.proto, c.dst, 3, map[string]func(netip.AddrPort) bool{"pod-b": r.keptSource})
		if seen["pod-b"] != 3 {
			t.Errorf("%s to %v: answers %v, want 3 from pod-b", c.proto, c.dst, seen)
		}
	}
	must(t, frames.Close())
	r.repliesFromNode2(t, frames, frontends)

	n1, err := Entries(r.pins1)
	must(t, err)
	tunnels := 0
	for _, e := range n1 {
		if e.Reply || e.At != ctAtTunnel || e.ToDst.Addr() != r.node2.IPv4 {
			t.Errorf("node1 holds %v: want only entries tunnelling to node2", e)
		}
		tunnels++
	}
	if tunnels == 0 {
		t.Error("node1 holds no tunnel entry")
	}
	n2, err := Entries(r.pins2)
	must(t, err)
	for _, e := range n2 {
		if !e.Tunnelled {
			t.Errorf("node2 holds %v: want only flows tunnelled in", e)
		}
	}
}

// TestKernelDSRMasqueradesClientsInsideTheCluster: a pod beside the
// endpoint (pod-c, on node2) and node2 itself reach node1's node ports
// as an outside client does, but node1 masquerades their flows
// instead of tunnelling them: pod-b would answer them on node2 directly,
// where no tc program translates the answer back to the frontend, and
// the client would reset it.
func TestKernelDSRMasqueradesClientsInsideTheCluster(t *testing.T) {
	r := newDSRKernelRig(t)
	podC, err := r.node2.AddPod("pod-c")
	must(t, err)
	r.syncDSR(t, true)
	for name, c := range map[string]netnstest.Client{"pod-c": {NS: podC.NS, Timeout: time.Second}, "node2": {NS: r.node2.NS, Timeout: time.Second}} {
		for _, q := range []struct {
			proto proxy.Protocol
			dst   netip.AddrPort
		}{
			{proxy.TCP, netip.AddrPortFrom(r.node1.IPv4, dsrTCPPort)}, {proxy.UDP, netip.AddrPortFrom(r.node1.IPv4, dsrUDPPort)},
		} {
			a, err := c.Ask(q.proto, q.dst)
			if err != nil || a.Server != "pod-b" || !r.masqueraded(a.Peer) {
				t.Errorf("%s: %s to %v: %v, %v (%s); want pod-b seeing node1", name, q.proto, q.dst, a, err, netnstest.OutcomeOf(err))
			}
		}
	}
	n1, err := Entries(r.pins1)
	must(t, err)
	for _, e := range n1 {
		if e.At == ctAtTunnel {
			t.Errorf("node1 tunnelled %v", e)
		}
	}
}

// TestKernelDSRPartialSyncTakesPeersAndSources: a partial sync whose
// State changes only the peers and the cluster sources (no port changed:
// the syncer does not make it full) writes them, and one without them
// deletes them.
func TestKernelDSRPartialSyncTakesPeersAndSources(t *testing.T) {
	r := newRig(t)
	p := r.proxier(t, "partial")
	st := stateOf(r.node1.IPv4, port("web", proxy.TCP, dsrTCPPort, r.ep(r.podB)))
	r.sync(t, p, st, proxy.FullSync)
	with := *st
	with.Changed = map[proxy.ServicePortName]struct{}{}
	with.Peers = []netip.Addr{r.node2.IPv4}
	with.ClusterSources = []netip.Prefix{r.node2.PodsV4}
	r.sync(t, p, &with, proxy.PartialSync)
	maps := p.kernel.coll.Maps
	var one uint32
	if err := maps[mapPeers].Lookup(r.node2.IPv4.As4(), &one); err != nil {
		t.Errorf("np_peers after the partial sync: %v, want node2", err)
	}
	if err := maps[mapRanges].Lookup(sourceKey[[4]byte](inClusterID, r.node2.PodsV4), &one); err != nil {
		t.Errorf("np_ranges after the partial sync: %v, want node2's pods under the in-cluster ID", err)
	}
	without := *st
	without.Changed = map[proxy.ServicePortName]struct{}{}
	r.sync(t, p, &without, proxy.PartialSync)
	if n := countEntries(t, maps[mapPeers]) + countEntries(t, maps[mapRanges]); n != 0 {
		t.Errorf("%d entries left in np_peers and np_ranges, want none", n)
	}
}

// repliesFromNode2 checks that the client received answers from every
// frontend of frontends, each frame from node2's fabric interface.
func (r *dsrRig) repliesFromNode2(t *testing.T, c *netnstest.Capture, frontends []netip.AddrPort) {
	t.Helper()
	node1MAC, err := r.node1.NS.HardwareAddr("fab0")
	must(t, err)
	node2MAC, err := r.node2.NS.HardwareAddr("fab0")
	must(t, err)
	frames, err := c.Frames()
	must(t, err)
	from := map[netip.AddrPort]int{}
	for _, f := range frames {
		_, src, dst, ok := f.Flow()
		if !ok || f.Outgoing || dst.Addr() != r.clientIP || !slices.Contains(frontends, src) {
			continue
		}
		from[src]++
		if got := f.Source().String(); got != node2MAC.String() {
			t.Errorf("an answer from %v reached the client from %s, want node2's %v (node1's is %v)", src, got, node2MAC, node1MAC)
		}
	}
	for _, fe := range frontends {
		if from[fe] == 0 {
			t.Errorf("no answer from %v captured (%d frames)", fe, len(frames))
		}
	}
}

// TestKernelDSRFailSafe: once node2 is no longer node1's peer, node1's next
// connection is masqueraded to pod-b (which sees node1), while a
// connection open through the tunnel still answers, tunnelled, and a UDP
// client's next datagram from the same port, its tunnelled flow deleted,
// is masqueraded too.
func TestKernelDSRFailSafe(t *testing.T) {
	r := newDSRKernelRig(t)
	r.syncDSR(t, true)
	lb := netip.AddrPortFrom(dsrLBIP, 80)
	open, err := r.client.DialTCP(lb)
	must(t, err)
	defer open.Close()
	if a, err := open.Ask(); err != nil || a.Server != "pod-b" || !r.keptSource(a.Peer) {
		t.Fatalf("the connection through the tunnel: %v, %v; want pod-b seeing the client", a, err)
	}
	udp := r.client
	udp.SourcePort = 40999
	if a, err := udp.Ask(proxy.UDP, lb); err != nil || !r.keptSource(a.Peer) {
		t.Fatalf("the UDP flow through the tunnel: %v, %v; want pod-b seeing the client", a, err)
	}

	r.syncDSR(t, false)
	r.p1.background.Wait()
	r.ask(t, proxy.TCP, lb, 3, map[string]func(netip.AddrPort) bool{"pod-b": r.masqueraded})
	if a, err := udp.Ask(proxy.UDP, lb); err != nil || !r.masqueraded(a.Peer) {
		t.Errorf("the UDP client's next datagram from the same port: %v, %v; want pod-b seeing node1", a, err)
	}
	if a, err := open.Ask(); err != nil || a.Server != "pod-b" || !r.keptSource(a.Peer) {
		t.Errorf("the connection opened through the tunnel, after: %v, %v; want pod-b seeing the client still", a, err)
	}
}

// TestKernelDSRTooBig: a datagram that fills the link's MTU, sent with
// "don't fragment" through the tunnel, has no room for the tunnel's
// header: node1 answers it with fragmentation needed, and the client's
// socket learns a path MTU 20 bytes below the link's.
func TestKernelDSRTooBig(t *testing.T) {
	r := newDSRKernelRig(t)
	r.syncDSR(t, true)
	var mtu int
	must(t, r.client.NS.Do(func() (err error) {
		mtu, err = pathMTU(netip.AddrPortFrom(dsrLBIP, 80), 1500-28)
		return err
	}))
	if mtu != 1480 {
		t.Errorf("after a full-size datagram through the tunnel the path MTU to the LB IP is %d, want 1480", mtu)
	}
}

// TestKernelDSRUpload: 8 MiB uploaded through the tunnel, GRO on node2's
// fabric interface (so node2 may receive merged IPIP packets), arrive
// whole at pod-b, which sees the client; then, node2 no longer a peer,
// masqueraded, for comparison. It logs both uploads' times.
func TestKernelDSRUpload(t *testing.T) {
	netnstest.RequireKernel(t, "ethtool")
	r := newDSRKernelRig(t)
	_, err := r.node2.NS.Run(context.Background(), "ethtool", "-K", "fab0", "gro", "on")
	must(t, err)
	for _, c := range []struct {
		what string
		peer bool
		saw  netip.Addr
	}{{"through the tunnel", true, r.clientIP}, {"masqueraded", false, r.node1.IPv4}} {
		r.syncDSR(t, c.peer)
		start := time.Now()
		got := r.upload(t, dsrUploadSize)
		t.Logf("8 MiB %s in %v", c.what, time.Since(start).Round(time.Millisecond))
		if want := fmt.Sprintf("%d %v:", dsrUploadSize, c.saw); !strings.HasPrefix(got, want) {
			t.Errorf("%s: pod-b's sink says %q, want %q and a port", c.what, strings.TrimSpace(got), want)
		}
	}
}

const dsrUploadSize = 8 << 20

// upload sends size random bytes from the client to the sink's LB IP
// port and returns the sink's answer.
func (r *dsrRig) upload(t *testing.T, size int64) string {
	t.Helper()
	var got string
	must(t, r.client.NS.Do(func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(dsrLBIP, 90).String(), 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		if err := c.SetDeadline(time.Now().Add(60 * time.Second)); err != nil {
			return err
		}
		if _, err := io.CopyN(c, rand.Reader, size); err != nil {
			return fmt.Errorf("uploading: %w", err)
		}
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			return err
		}
		got, err = bufio.NewReader(c).ReadString('\n')
		return err
	}))
	return got
}

// serveSink listens on port in ns: each connection is read to its end, then
// answered with the byte count and the peer's address.
func serveSink(t *testing.T, ns *netnstest.NS, port uint16) {
	t.Helper()
	var ln net.Listener
	must(t, ns.Do(func() (err error) {
		ln, err = net.Listen("tcp4", fmt.Sprintf(":%d", port))
		return err
	}))
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				n, _ := io.Copy(io.Discard, c)
				fmt.Fprintf(c, "%d %v\n", n, c.RemoteAddr())
			}()
		}
	}()
}

package ipvs

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/svcproxy/svcproxy/pkg/kipset"
	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/klink"
)

// The kernel records no owner on a virtual server, and a node may hold
// others' beside IPVS mode's: keepalived's or kube-vip's control-plane
// VIPs, an LVS director's. Cleanup therefore deletes only the virtual
// servers that IPVS mode's own objects (svcproxy's or upstream's, which
// share every name) vouch for, one family at a time:
//
//   - its address is on kube-ipvs0 or in KUBE-IPVS-IPS: cluster, external
//     and LB IPs, which IPVS mode binds there and nobody else does;
//   - its address, protocol and port are a member of KUBE-CLUSTER-IP,
//     KUBE-EXTERNAL-IP(-LOCAL), KUBE-LOAD-BALANCER(-LOCAL) or, for SCTP
//     node ports, KUBE-NODE-PORT(-LOCAL)-SCTP-HASH: the same frontends,
//     found even when kube-ipvs0 is already gone;
//   - a TCP or UDP node port: its port is in that protocol's
//     KUBE-NODE-PORT(-LOCAL)-{TCP,UDP} and its address is one of the
//     host's. Those sets are bitmap:port, port numbers without addresses,
//     so the address must at least be one IPVS mode binds node ports to:
//     a peer's VIP that merely uses the same port number is not ours.
//
// The residue: a foreign virtual server on a host address and a port that
// is also a node port of the same protocol looks exactly like ours. IPVS
// mode programs that very key on every host address anyway (unless
// nodePortAddresses narrows them), so such a port is contested already.
//
// The evidence is read before anything is deleted, and Cleanup deletes the
// virtual servers before the sets and the link: a cleanup that stops half
// way leaves the proof of ownership of whatever it did not delete.
// Missing evidence only ever spares a virtual server.

// ownership is one family's evidence of which virtual servers are ours.
type ownership struct {
	bound     map[netip.Addr]bool       // on kube-ipvs0 or in KUBE-IPVS-IPS
	frontends map[kipvs.ServiceKey]bool // members of the address·port sets
	nodePorts map[nodePort]bool         // members of the bitmap:port node-port sets
	hostAddrs map[netip.Addr]bool       // where node ports can be bound
}

type nodePort struct {
	protocol kipvs.Protocol
	port     uint16
}

// Which sets say what (base names; setName gives the family's).
var (
	boundSets    = []string{setIPVSIPs}
	frontendSets = []string{setClusterIP, setExternalIP, setExternalIPLocal, setLoadBalancer,
		setLoadBalancerLocal, setNodePortSCTP, setNodePortLocalSCTP}
	portSets = map[string]kipvs.Protocol{setNodePortTCP: kipvs.TCP, setNodePortLocalTCP: kipvs.TCP,
		setNodePortUDP: kipvs.UDP, setNodePortLocalUDP: kipvs.UDP}
)

// readOwnership gathers the evidence from the kernel. What cannot be read
// is reported and left out: it can only spare virtual servers.
func (p *Proxier) readOwnership() (*ownership, error) {
	o := &ownership{bound: map[netip.Addr]bool{}, frontends: map[kipvs.ServiceKey]bool{},
		nodePorts: map[nodePort]bool{}, hostAddrs: map[netip.Addr]bool{}}
	var errs []error
	addrs, err := p.c.Link.ListAddrs(DummyLink)
	if err != nil && !errors.Is(err, klink.ErrNotFound) {
		errs = append(errs, fmt.Errorf("reading %s: %w", DummyLink, err))
	}
	addTo(o.bound, addrs)
	host, err := p.c.Link.HostAddrs("")
	if err != nil {
		errs = append(errs, err)
	}
	addTo(o.hostAddrs, host)
	for _, base := range boundSets {
		errs = append(errs, p.eachEntry(base, func(e kipset.Entry) { o.bound[e.IP] = true }))
	}
	for _, base := range frontendSets {
		errs = append(errs, p.eachEntry(base, func(e kipset.Entry) {
			o.frontends[kipvs.ServiceKey{Addr: e.IP, Protocol: kipvs.Protocol(e.Protocol), Port: e.Port}] = true
		}))
	}
	for base, proto := range portSets {
		errs = append(errs, p.eachEntry(base, func(e kipset.Entry) { o.nodePorts[nodePort{proto, e.Port}] = true }))
	}
	return o, errors.Join(errs...)
}

// eachEntry calls add for every member of this family's set base; a
// missing set has none.
func (p *Proxier) eachEntry(base string, add func(kipset.Entry)) error {
	name := setName(p.family, base)
	entries, err := p.c.IPSet.ListEntries(name)
	if errors.Is(err, kipset.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading ipset %s: %w", name, err)
	}
	for _, e := range entries {
		add(e)
	}
	return nil
}

func addTo(m map[netip.Addr]bool, addrs []netip.Addr) {
	for _, a := range addrs {
		m[a] = true
	}
}

// owns reports whether the evidence vouches for the virtual server k.
func (o *ownership) owns(k kipvs.ServiceKey) bool {
	return o.bound[k.Addr] || o.frontends[k] ||
		(o.nodePorts[nodePort{k.Protocol, k.Port}] && o.hostAddrs[k.Addr])
}

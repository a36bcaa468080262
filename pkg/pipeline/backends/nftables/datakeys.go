package nftables

import (
	"net/netip"
	"strings"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The store keys the elements of the sets in dataLayouts by their data
// (knft's elemdata.go: the bytes the kernel holds, a concatenation's
// fields each padded to 4 bytes), which render makes from typed values
// (addresses, protocol, port) and knft sends to the kernel as it is; the
// read-back asks for them in the same layout. No such element is spelled
// on its way to netlink or parsed back into bytes. nft's spelling is made
// from the data where text is needed (spellKey: objects sent through nft,
// messages, tests). An interval set's key is its range's first key and
// then its last (an allow set: the frontend and a source prefix's first
// address, the frontend and the prefix's last address). The endpoint maps
// are data too (epLayouts): an element's key is its frontend's data (the
// slot group's store key, slots.go) and the slot's, its value the
// endpoint's address · port (appendEndpointData). A verdict map's value
// stays spelled ("goto <chain>"), as knft takes it.

// Element types of the sets whose keys are data.
const (
	frontendKeyType = " . inet_proto . inet_service" // after the address type
	portKeyType     = "inet_proto . inet_service"
	verdictType     = " : verdict"
)

// frontendType is the type of the frontend address · protocol · port,
// for addresses of type addr.
func frontendType(addr string) string { return addr + frontendKeyType }

// allowType is an allow set's (firewallAllowSet): a frontend's address
// and port, and a source prefix.
func allowType(addr string) string { return addr + " . inet_service . " + addr }

// allowFlags are the allow sets' flags: their sources are prefixes.
var allowFlags = []knftables.SetFlag{knftables.IntervalFlag}

// dataLayouts are the layouts, IPv4 and IPv6, of the sets whose store
// keys are data.
var dataLayouts = func() map[string][2]*knft.Layout {
	declared := func(typ func(addr string) string, flags []knftables.SetFlag, isMap bool) [2]*knft.Layout {
		return [2]*knft.Layout{knft.DeclaredLayout(typ("ipv4_addr"), "", flags, isMap),
			knft.DeclaredLayout(typ("ipv6_addr"), "", flags, isMap)}
	}
	both := func(typ func(addr string) string, isMap bool) [2]*knft.Layout { return declared(typ, nil, isMap) }
	addr := func(a string) string { return a }
	port := func(string) string { return portKeyType + verdictType }
	m := map[string][2]*knft.Layout{
		setClusterIPs:       both(addr, false),
		setNodePortIPs:      both(addr, false),
		mapServiceIPs:       both(func(a string) string { return frontendType(a) + verdictType }, true),
		mapServiceNodePorts: both(port, true),
		mapLocalhostReject:  both(port, true),
		setFirewallGuards:   both(frontendType, false),
	}
	for _, p := range firewallProtocols {
		m[firewallAllowSet(p)] = declared(allowType, allowFlags, false)
	}
	for _, set := range hairpinSets {
		m[set] = both(func(a string) string { return a + " . " + a }, false)
	}
	return m
}()

// epLayouts are the layouts of the endpoint maps, by their declaration
// (epMapTypeOf: of either frontend kind, in either family).
var epLayouts = func() map[string]*knft.Layout {
	m := map[string]*knft.Layout{}
	for _, f := range []proxy.IPFamily{proxy.IPv4, proxy.IPv6} {
		for _, kind := range []frontendKind{ipFrontend, nodePortFrontend} {
			typeOf := epMapTypeOf(specFor(f).ip, kind)
			m[typeOf] = knft.DeclaredLayout("", typeOf, nil, true)
		}
	}
	return m
}()

// epMapLayout is the layout of endpoint map set in family's table, or
// nil when set is no endpoint map.
func epMapLayout(set string, family proxy.IPFamily) *knft.Layout {
	if _, ok := endpointMapSlots(set); !ok {
		return nil
	}
	kind := ipFrontend
	if strings.Contains(set, "-nodeport-endpoints-") {
		kind = nodePortFrontend
	}
	return epLayouts[epMapTypeOf(specFor(family).ip, kind)]
}

// readLayout is the layout in which the read-back asks for set's
// elements in family's table: as the store keys them; nil: spelled.
func readLayout(set string, family proxy.IPFamily) *knft.Layout {
	if l := epMapLayout(set, family); l != nil {
		return l
	}
	ls, ok := dataLayouts[set]
	if !ok {
		return nil
	}
	if family == proxy.IPv6 {
		return ls[1]
	}
	return ls[0]
}

// keyLayout is the layout of set's store key key when it is data, else
// nil (spelled). The key's length tells the family; a catch-all element
// read back (none render makes) has no key, spelled "*" in either.
func keyLayout(set string, key string) *knft.Layout {
	ls, ok := dataLayouts[set]
	if !ok {
		return nil
	}
	if key == "" {
		return ls[0]
	}
	for _, l := range ls {
		if l.KeyLen() == len(key) {
			return l
		}
	}
	return nil
}

// unitLayout is the layout of the keys of a run of elements of set: an
// endpoint map's as declared (spec, its desired set), else that of key,
// the run's first key that is not empty (a catch-all's tells no family).
func unitLayout(set string, spec *setSpec, key string) *knft.Layout {
	if spec != nil && spec.typeOf != "" {
		if l := epLayouts[spec.typeOf]; l != nil {
			return l
		}
	}
	return keyLayout(set, key)
}

// spellKey is a store key of set as nft spells it.
func spellKey(set, key string) string {
	if l := keyLayout(set, key); l != nil {
		return l.SpellKey(key)
	}
	return key
}

// appendAddrData appends the data of a (an address set's key).
func appendAddrData(b []byte, a netip.Addr) []byte {
	if a = a.Unmap(); a.Is4() {
		v := a.As4()
		return append(b, v[:]...)
	}
	v := a.As16()
	return append(b, v[:]...)
}

// appendAllowKey appends the store key of an allow set's element of
// frontend (its address · port data, allowFrontend) and source prefix
// src: an interval set's key, the frontend and src's first address, then
// the frontend and src's last.
func appendAllowKey(b []byte, frontend string, src netip.Prefix) []byte {
	src = src.Masked()
	first, bits := src.Addr(), src.Bits()
	if first.Is4In6() {
		first, bits = first.Unmap(), bits-96
	}
	b = appendAddrData(append(b, frontend...), first)
	b = appendAddrData(append(b, frontend...), first)
	last := b[len(b)-first.BitLen()/8:]
	for i := range last {
		switch {
		case bits <= 8*i:
			last[i] = 0xff
		case bits < 8*(i+1):
			last[i] |= 0xff >> (bits - 8*i)
		}
	}
	return b
}

// appendHairpinKey appends the store key of the hairpin element a . a.
func appendHairpinKey(b []byte, a netip.Addr) []byte {
	n := len(b)
	b = appendAddrData(b, a)
	return append(b, b[n:]...)
}

// appendEndpointData appends the data of an endpoint map's value, the
// endpoint's address · port: the address and the port in network byte
// order padded to 4 bytes.
func appendEndpointData(b []byte, ep desired.Endpoint) []byte {
	return append(appendAddrData(b, ep.IP), byte(ep.Port>>8), byte(ep.Port), 0, 0)
}

// appendPortData appends the data of protocol · port, each field
// padded to 4 bytes: the protocol's number, the port in network byte
// order.
func appendPortData(b []byte, p proxy.Protocol, port uint16) []byte {
	return append(b, protoNumber(p), 0, 0, 0, byte(port>>8), byte(port), 0, 0)
}

// protoNumber is p's IP protocol number (0 for a protocol the API does
// not have, which no packet matches, as nft would refuse its name).
func protoNumber(p proxy.Protocol) byte {
	switch p {
	case proxy.TCP:
		return unix.IPPROTO_TCP
	case proxy.UDP:
		return unix.IPPROTO_UDP
	case proxy.SCTP:
		return unix.IPPROTO_SCTP
	}
	return 0
}

// allowFrontend is the address · port data of frontend, the data of an
// address · protocol · port key (frontendData): an allow set's frontend,
// the protocol being the set's.
func allowFrontend(frontend string) string {
	addrLen := len(frontend) - 8
	return frontend[:addrLen] + frontend[addrLen+4:]
}

package iptables

import (
	"crypto/sha256"
	"encoding/base32"
	"net/netip"
	"strconv"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Chain names. They are upstream's, byte for byte: other tools, and a
// kube-proxy run before or after us, find them by name.
const (
	chainServices         = "KUBE-SERVICES"
	chainExternalServices = "KUBE-EXTERNAL-SERVICES"
	chainNodePorts        = "KUBE-NODEPORTS"
	chainPostrouting      = "KUBE-POSTROUTING"
	chainMarkMasq         = "KUBE-MARK-MASQ"
	chainForward          = "KUBE-FORWARD"
	chainProxyFirewall    = "KUBE-PROXY-FIREWALL"
	chainCanary           = "KUBE-PROXY-CANARY"
	// chainKubeletFirewall duplicates kubelet's chain holding the
	// CVE-2020-8558 rule; we fill it but never delete it.
	chainKubeletFirewall = "KUBE-FIREWALL"
)

// Prefixes of the per-service-port and per-endpoint chains.
const (
	prefixSVC = "KUBE-SVC-"
	prefixSVL = "KUBE-SVL-"
	prefixEXT = "KUBE-EXT-"
	prefixFW  = "KUBE-FW-"
	prefixSEP = "KUBE-SEP-"
)

// isServiceChain reports whether name is one of our per-service chains.
func isServiceChain(name string) bool {
	for _, p := range []string{prefixSVC, prefixSVL, prefixEXT, prefixFW, prefixSEP} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// chainName is prefix followed by upstream's chain hash of the parts
// joined: the first 16 characters of base32(sha256(parts)). iptables
// chain names are at most 28 characters. The input, digest and encoding
// stay in stack buffers and only the name is allocated: a sync names a
// chain per endpoint, and the intermediate strings were most of its
// garbage.
func chainName(prefix string, parts ...string) string {
	var buf [256]byte
	in := buf[:0]
	for _, p := range parts {
		in = append(in, p...)
	}
	sum := sha256.Sum256(in)
	var enc [56]byte // base32 of 32 bytes, padded
	base32.StdEncoding.Encode(enc[:], sum[:])
	var name [32]byte
	return string(append(append(name[:0], prefix...), enc[:16]...))
}

// portNames are the chain names of one service port.
type portNames struct {
	display           string // "ns/svc:port", as comments spell it
	proto             string // "tcp", "udp", "sctp"
	svc, svl, ext, fw string
}

func namesOf(n proxy.ServicePortName) portNames {
	display := n.String()
	proto := strings.ToLower(string(n.Protocol))
	svc := chainName(prefixSVC, display, proto)
	h := svc[len(prefixSVC):]
	return portNames{display: display, proto: proto,
		svc: svc, svl: prefixSVL + h, ext: prefixEXT + h, fw: prefixFW + h}
}

// sepChain names an endpoint's chain: the hash covers the service port and
// "ip:port" ("[ip]:port" for IPv6).
func (pn portNames) sepChain(endpoint string) string {
	return chainName(prefixSEP, pn.display, pn.proto, endpoint)
}

// endpointString spells an endpoint as DNAT and the SEP hash want it.
func endpointString(ep netip.AddrPort) string {
	a := ep.Addr().Unmap()
	port := strconv.Itoa(int(ep.Port()))
	if a.Is4() {
		return a.String() + ":" + port
	}
	return "[" + a.String() + "]:" + port
}

// probabilities caches the "%0.10f" strings of 1/n; formatting floats is
// the most expensive part of rendering big services.
type probabilities []string

func (p *probabilities) of(n int) string {
	for len(*p) <= n {
		i := len(*p)
		s := "<bad value>"
		if i > 0 {
			s = strconv.FormatFloat(1/float64(i), 'f', 10, 64)
		}
		*p = append(*p, s)
	}
	return (*p)[n]
}

// ChainNames are the names of one service port's own nat chains, as Sync
// writes them: for `svcproxy explain`, so that only this package spells
// upstream's hashes.
type ChainNames struct {
	SVC, SVL, EXT, FW string
	// SEP names an endpoint's chain.
	SEP func(ep netip.AddrPort) string
}

// ChainNamesOf returns the chain names of the service port n.
func ChainNamesOf(n proxy.ServicePortName) ChainNames {
	pn := namesOf(n)
	return ChainNames{SVC: pn.svc, SVL: pn.svl, EXT: pn.ext, FW: pn.fw,
		SEP: func(ep netip.AddrPort) string { return pn.sepChain(endpointString(ep)) }}
}

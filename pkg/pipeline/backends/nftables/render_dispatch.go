package nftables

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
)

// frontendKind tells IP frontends (cluster, external and LB IPs: keyed by
// address, protocol and port) from node ports (keyed by protocol and port).
type frontendKind uint8

const (
	ipFrontend frontendKind = iota
	nodePortFrontend
)

// emptyVerdict is the statement for a dispatch without endpoints.
func emptyVerdict(v desired.Verdict) string {
	if v == desired.Drop {
		return "drop"
	}
	return "goto " + chainReject
}

// emptyName spells an empty dispatch inside shared chain names.
func emptyName(d desired.Dispatch) string {
	if len(d.Endpoints) > 0 {
		return strconv.Itoa(len(d.Endpoints))
	}
	if d.Empty == desired.Drop {
		return "drop"
	}
	return "reject"
}

// dnatFromMap is the one rule that balances over a frontend's endpoints:
// numgen picks a slot and the endpoint map, keyed by the frontend and the
// slot, yields the endpoint. One such rule serves every service port with
// n endpoints, so the number of chains grows with the number of distinct
// endpoint counts, not with the number of services.
func (c *config) dnatFromMap(kind frontendKind, epMap string, n int) string {
	key := fmt.Sprintf("%s daddr . meta l4proto . th dport", c.fs.ip)
	if kind == nodePortFrontend {
		key = "meta l4proto . th dport"
	}
	return fmt.Sprintf("meta l4proto { tcp, udp, sctp } dnat %s to %s . numgen random mod %d map @%s",
		c.fs.ip, key, n, epMap)
}

// epMapType is the typeof declaration of an endpoint map: typeof, because
// the slot component is numgen's integer type, which has no "type" name.
func (c *config) epMapType(kind frontendKind) string { return epMapTypeOf(c.fs.ip, kind) }

// epMapTypeOf is the typeof declaration of an endpoint map for frontends
// of kind, in a table whose address expression is ip ("ip", "ip6").
func epMapTypeOf(ip string, kind frontendKind) string {
	if kind == nodePortFrontend {
		return fmt.Sprintf("meta l4proto . th dport . numgen random mod 1 : %s daddr . th dport", ip)
	}
	return fmt.Sprintf("%[1]s daddr . meta l4proto . th dport . numgen random mod 1 : %[1]s daddr . th dport", ip)
}

// dispatchChain returns the chain "<class>[-nodeport]-[variant]<n>-s<k>":
// rules pre, then the DNAT from its own endpoint map
// "<class>[-nodeport]-endpoints-[variant]<n>-s<k>". The chain and map are
// shared by every frontend of that class, kind, endpoint count and shard
// k (serviceShard); the map is this chain's alone because nft can only add
// a rule that reads a numgen map in the transaction that creates the map.
func (c *config) dispatchChain(class string, kind frontendKind, variant string, n, shard int, pre ...string) *chainSpec {
	base := class
	if kind == nodePortFrontend {
		base += "-nodeport"
	}
	suffix := shardName(variant+strconv.Itoa(n), shard)
	name := base + "-" + suffix
	// One spec per chain and sync, shared by every service port using it:
	// 10k services would otherwise format the same rules 10k times.
	if ch := c.dispatch[name]; ch != nil {
		// Routes depend on the State's masquerade policy and the port's
		// traffic policy, which the chain's class names: ports sharing a
		// chain share its marks. Fail rather than share a wrong one.
		if !slices.Equal(ch.rules[:len(ch.rules)-1], pre) {
			c.fail(fmt.Errorf("dispatch chain %s is shared by routes that masquerade differently (%q, %q)", name, ch.rules[:len(ch.rules)-1], pre))
		}
		return ch
	}
	m := &setSpec{name: base + "-endpoints-" + suffix, isMap: true, typeOf: c.epMapType(kind), bound: true}
	rules := append(append([]string{}, pre...), c.dnatFromMap(kind, m.name, n))
	ch := &chainSpec{name: name, rules: rules, epMap: m, jump: "goto " + name}
	if c.dispatch == nil {
		c.dispatch = map[string]*chainSpec{}
	}
	c.dispatch[name] = ch
	return ch
}

// endpointMapSlots reports whether set is a shared dispatch chain's
// endpoint map (its elements are slot groups in the store; per-service
// names hold a "/"), and its endpoint count n: the n of
// "…-endpoints-[variant]<n>-s<k>" (dispatchChain), the slots its rule's
// numgen picks from. No slot group of the map holds more than n slots.
func endpointMapSlots(set string) (n int, ok bool) {
	if !strings.Contains(set, "-endpoints-") || strings.HasPrefix(set, setHairpin) || strings.Contains(set, "/") {
		return 0, false
	}
	rest, _, ok := cutLast(set, "-s") // the shard
	if !ok {
		return 0, false
	}
	_, count, ok := cutLast(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(count)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

// cutLast slices s around the last instance of sep.
func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// internalChain: cluster-IP traffic; pre marks what its routes masquerade.
func (c *config) internalChain(_ frontendKind, n, shard int, pre ...string) *chainSpec {
	return c.dispatchChain("internal", ipFrontend, "", n, shard, pre...)
}

// externalChain: external traffic that every source class sends to the
// same dispatch (externalTrafficPolicy Cluster); pre marks what its routes
// masquerade.
func (c *config) externalChain(kind frontendKind, n, shard int, pre ...string) *chainSpec {
	return c.dispatchChain("external", kind, "", n, shard, pre...)
}

// clusterChain: the cluster-wide dispatch of an entry chain (the eTP=Local
// short-cut); masquerade is marked in the entry chain.
func (c *config) clusterChain(kind frontendKind, n, shard int, _ ...string) *chainSpec {
	return c.dispatchChain("cluster", kind, "", n, shard)
}

// localChain: an entry chain's dispatch to the local endpoints
// (externalTrafficPolicy Local from outside).
func (c *config) localChain(kind frontendKind, n, shard int, _ ...string) *chainSpec {
	return c.dispatchChain("external", kind, "local-", n, shard)
}

// affinityRules balance over eps remembering each client's endpoint for the
// service's timeout: first the endpoint the client used before, then a
// uniform random pick (rule i wins with probability 1/(n-i), as
// iptables' statistic rules do) that records the client.
func (c *config) affinityRules(st *svcContext, eps []desired.Endpoint) []string {
	ip := c.fs.ip
	proto := protoName(st.sp.Protocol)
	dnat := func(ep desired.Endpoint) string {
		set := affinitySet(st.sp.Name, ep.AddrPort())
		return fmt.Sprintf("update @%s { %s saddr } meta l4proto %s dnat %s to %s",
			set, ip, proto, ip, endpointString(ep.AddrPort()))
	}
	rules := make([]string, 0, 2*len(eps))
	for _, ep := range eps {
		rules = append(rules, fmt.Sprintf("%s saddr @%s ", ip, affinitySet(st.sp.Name, ep.AddrPort()))+dnat(ep))
	}
	for i, ep := range eps {
		if i < len(eps)-1 {
			rules = append(rules, fmt.Sprintf("numgen random mod %d == 0 ", len(eps)-i)+dnat(ep))
		} else {
			rules = append(rules, dnat(ep))
		}
	}
	return rules
}

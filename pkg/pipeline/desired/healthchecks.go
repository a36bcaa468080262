package desired

import (
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// healthChecks lists one healthCheckNodePort server per service of this
// family that has one. LocalReady counts the distinct ready endpoints
// (address and port) on this node over all the service's ports, which is
// what upstream's LocalReadyEndpoints reports: serving-but-terminating
// endpoints are left out so load balancers drain the node. Each family
// counts its own endpoints; the health server adds the families up.
func healthChecks(services model.PortMap[*ServicePort], snap *model.Snapshot, family proxy.IPFamily, node Node) []HealthCheck {
	type check struct {
		port  uint16
		ready map[netip.AddrPort]struct{}
	}
	checks := map[proxy.ServiceName]*check{}
	for name, sp := range services.All() {
		if sp.HealthCheckNodePort == 0 {
			continue
		}
		c := checks[name.ServiceName]
		if c == nil {
			c = &check{port: sp.HealthCheckNodePort, ready: map[netip.AddrPort]struct{}{}}
			checks[name.ServiceName] = c
		}
		eps, _ := snap.Endpoints.Get(name)
		for i, info := range eps.Infos() {
			if e := eps.Addrs()[i]; info.Ready && node.Name != "" && info.NodeName == node.Name && family.Contains(e.IP) {
				c.ready[e.AddrPort()] = struct{}{}
			}
		}
	}
	if len(checks) == 0 {
		return nil
	}
	out := make([]HealthCheck, 0, len(checks))
	for svc, c := range checks {
		out = append(out, HealthCheck{Service: svc, Port: c.port, LocalReady: len(c.ready)})
	}
	slices.SortFunc(out, func(a, b HealthCheck) int {
		return proxy.ServicePortName{ServiceName: a.Service}.Compare(proxy.ServicePortName{ServiceName: b.Service})
	})
	return out
}

// touchesHealthChecks reports whether a change to name can change the health
// check list: only when the port had or has a health check node port.
func touchesHealthChecks(name proxy.ServicePortName, prev, next model.PortMap[*ServicePort]) bool {
	if sp, _ := prev.Get(name); sp != nil && sp.HealthCheckNodePort != 0 {
		return true
	}
	if sp, _ := next.Get(name); sp != nil && sp.HealthCheckNodePort != 0 {
		return true
	}
	return false
}

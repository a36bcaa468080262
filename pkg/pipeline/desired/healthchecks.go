package desired

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// portReady is one service port's share of its service's health check:
// its ready endpoints on this node.
type portReady struct {
	name  proxy.ServicePortName
	check uint16 // the port's healthCheckNodePort
	ready []netip.AddrPort
}

// healthChecks lists one healthCheckNodePort server per service of this
// family that has one, and each one's ports (State.healthPorts).
// LocalReady counts the distinct ready endpoints (address and port) on
// this node over all the service's ports, which is what upstream's
// LocalReadyEndpoints reports: serving-but-terminating endpoints are left
// out so load balancers drain the node. Each family counts its own
// endpoints; the health server adds the families up.
func healthChecks(services model.PortMap[*ServicePort], snap *model.Snapshot, family proxy.IPFamily, node Node) ([]HealthCheck, [][]portReady) {
	ports := map[proxy.ServiceName][]portReady{}
	for name, sp := range services.All() {
		if sp.HealthCheckNodePort != 0 {
			ports[name.ServiceName] = append(ports[name.ServiceName], readyOf(name, sp, snap, family, node))
		}
	}
	var l healthList
	for svc, p := range ports {
		l.add(svc, p)
	}
	l.sort()
	return l.checks, l.ports
}

// updateHealthChecks is healthChecks after the changed ports: it recounts
// the services of changed ports that had or have a health check and keeps
// every other entry of prev, so that an endpoint change costs its service,
// not every service. prev is not modified.
func updateHealthChecks(prev *State, changed map[proxy.ServicePortName]struct{}, services model.PortMap[*ServicePort],
	snap *model.Snapshot, node Node) ([]HealthCheck, [][]portReady) {
	dirty := map[proxy.ServiceName][]proxy.ServicePortName{}
	for name := range changed {
		if touchesHealthChecks(name, prev.Services, services) {
			dirty[name.ServiceName] = append(dirty[name.ServiceName], name)
		}
	}
	if len(dirty) == 0 {
		return prev.HealthChecks, prev.healthPorts
	}
	if len(prev.healthPorts) != len(prev.HealthChecks) {
		// A State not made by Compute (decoded from a dump) lacks the ports.
		return healthChecks(services, snap, prev.Family, node)
	}
	names := slices.SortedFunc(maps.Keys(dirty), func(a, b proxy.ServiceName) int {
		return compareHealthChecks(HealthCheck{Service: a}, HealthCheck{Service: b})
	})
	n := len(prev.HealthChecks) + len(dirty)
	out := healthList{checks: make([]HealthCheck, 0, n), ports: make([][]portReady, 0, n)}
	kept := 0 // prev's entries before kept are copied or recounted
	for _, svc := range names {
		at, found := slices.BinarySearchFunc(prev.HealthChecks[kept:], svc, searchHealthCheck)
		at += kept
		out.checks = append(out.checks, prev.HealthChecks[kept:at]...)
		out.ports = append(out.ports, prev.healthPorts[kept:at]...)
		var ports []portReady
		if found {
			ports = slices.DeleteFunc(slices.Clone(prev.healthPorts[at]), func(p portReady) bool { return slices.Contains(dirty[svc], p.name) })
			at++
		}
		for _, name := range dirty[svc] {
			if sp, _ := services.Get(name); sp != nil && sp.HealthCheckNodePort != 0 {
				ports = append(ports, readyOf(name, sp, snap, prev.Family, node))
			}
		}
		out.add(svc, ports)
		kept = at
	}
	out.checks = append(out.checks, prev.HealthChecks[kept:]...)
	out.ports = append(out.ports, prev.healthPorts[kept:]...)
	if len(out.checks) == 0 {
		return nil, nil
	}
	return out.checks, out.ports
}

// healthList is a list of health checks with each one's ports, in step.
type healthList struct {
	checks []HealthCheck
	ports  [][]portReady
}

func (l *healthList) append(hc HealthCheck, ports []portReady) {
	l.checks = append(l.checks, hc)
	l.ports = append(l.ports, ports)
}

// add appends service svc's health check counted over ports, when it has
// any port left.
func (l *healthList) add(svc proxy.ServiceName, ports []portReady) {
	if len(ports) == 0 {
		return
	}
	slices.SortFunc(ports, func(a, b portReady) int { return a.name.Compare(b.name) })
	hc := HealthCheck{Service: svc, Port: ports[0].check, LocalReady: len(ports[0].ready)}
	if len(ports) > 1 {
		// Ports share endpoints; one port's endpoints are already distinct.
		distinct := map[netip.AddrPort]struct{}{}
		for _, p := range ports {
			for _, a := range p.ready {
				distinct[a] = struct{}{}
			}
		}
		hc.LocalReady = len(distinct)
	}
	l.append(hc, ports)
}

// sort orders the list by service.
func (l *healthList) sort() {
	order := make([]int, len(l.checks))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return compareHealthChecks(l.checks[a], l.checks[b]) })
	var sorted healthList
	for _, i := range order {
		sorted.append(l.checks[i], l.ports[i])
	}
	*l = sorted
}

// readyOf lists port name's ready endpoints on this node.
func readyOf(name proxy.ServicePortName, sp *ServicePort, snap *model.Snapshot, family proxy.IPFamily, node Node) portReady {
	p := portReady{name: name, check: sp.HealthCheckNodePort}
	if node.Name == "" {
		return p
	}
	eps, _ := snap.Endpoints.Get(name)
	for i, info := range eps.Infos() {
		if e := eps.Addrs()[i]; info.Ready && info.NodeName == node.Name && family.Contains(e.IP) {
			p.ready = append(p.ready, e.AddrPort())
		}
	}
	return p
}

func compareHealthChecks(a, b HealthCheck) int { return searchHealthCheck(a, b.Service) }

func searchHealthCheck(hc HealthCheck, svc proxy.ServiceName) int {
	return proxy.ServicePortName{ServiceName: hc.Service}.Compare(proxy.ServicePortName{ServiceName: svc})
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

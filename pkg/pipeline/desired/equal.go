package desired

import "slices"

// Equal reports whether two service ports program the same dataplane. The
// incremental Compute uses it to keep the previous pointer, and so to keep
// a port out of State.Changed, when an event changed nothing that matters
// to this family (for example an endpoint of the other family).
func (sp *ServicePort) Equal(o *ServicePort) bool {
	if sp == o {
		return true
	}
	if sp == nil || o == nil {
		return false
	}
	return sp.Name == o.Name && sp.Protocol == o.Protocol && sp.Port == o.Port &&
		sp.ClusterIP == o.ClusterIP && sp.NodePort == o.NodePort &&
		slices.Equal(sp.ExternalIPs, o.ExternalIPs) &&
		slices.Equal(sp.LoadBalancerIPs, o.LoadBalancerIPs) &&
		slices.Equal(sp.AllowedSources, o.AllowedSources) &&
		(sp.AllowedSources == nil) == (o.AllowedSources == nil) &&
		sp.AffinitySeconds == o.AffinitySeconds &&
		sp.Internal.Equal(o.Internal) && sp.External.Equal(o.External) &&
		sp.Cluster.Equal(o.Cluster) &&
		sp.InternalLocal == o.InternalLocal && sp.ExternalLocal == o.ExternalLocal &&
		(sp.Routes == o.Routes || (sp.Routes != nil && o.Routes != nil && *sp.Routes == *o.Routes)) &&
		sp.HealthCheckNodePort == o.HealthCheckNodePort &&
		equalSettings(sp.Setting, o.Setting) && sp.ExternalBalancing == o.ExternalBalancing &&
		sp.ExternalForwarding == o.ExternalForwarding && sp.DSR.Equal(o.DSR)
}

// Equal reports whether two dispatches balance over the same endpoints and,
// with none, give the same verdict.
func (d Dispatch) Equal(o Dispatch) bool {
	if !slices.Equal(d.Endpoints, o.Endpoints) {
		return false
	}
	return len(d.Endpoints) > 0 || d.Empty == o.Empty
}

// SameGlobals reports whether s and o agree on every field a backend
// renders besides the service ports: when they do not, every shared object
// may change, so the syncer makes the sync full. Services, Changed, Lost and
// claims are per service port, and HealthChecks are served by the syncer,
// not rendered. Peers and ClusterSources are rendered only by ebpf mode's
// tc programs, which render the whole State at every sync: a node joining
// the cluster, or a peer coming or going, makes no full sync of every
// node's other maps. A nil State agrees with nothing.
func (s *State) SameGlobals(o *State) bool {
	if s == nil || o == nil {
		return false
	}
	return s.Family == o.Family && slices.Equal(s.NodeIPs, o.NodeIPs) &&
		s.NodePorts.Equal(o.NodePorts) &&
		s.Masquerade.Mark == o.Masquerade.Mark && s.Masquerade.All == o.Masquerade.All &&
		s.Masquerade.Local.Mode == o.Masquerade.Local.Mode &&
		s.Masquerade.Local.Interface == o.Masquerade.Local.Interface &&
		slices.Equal(s.Masquerade.Local.CIDRs, o.Masquerade.Local.CIDRs) &&
		slices.Equal(s.ServiceCIDRs, o.ServiceCIDRs)
}

// Equal reports whether two ports' direct server returns tunnel the same
// endpoints to the same nodes and serve the same tunnelled flows; nil is
// no DSR.
func (d *DSR) Equal(o *DSR) bool {
	if d == nil || o == nil {
		return d == o
	}
	return slices.Equal(d.Tunnels, o.Tunnels) && d.In.Equal(o.In)
}

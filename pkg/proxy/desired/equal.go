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
		equalSchedulers(sp.Scheduler, o.Scheduler)
}

// Equal reports whether two dispatches balance over the same endpoints and,
// with none, give the same verdict.
func (d Dispatch) Equal(o Dispatch) bool {
	if !slices.Equal(d.Endpoints, o.Endpoints) {
		return false
	}
	return len(d.Endpoints) > 0 || d.Empty == o.Empty
}

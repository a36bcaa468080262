package model

import (
	"maps"
	"slices"
)

// Equal reports whether two service ports are the same in every field.
func (sp *ServicePort) Equal(o *ServicePort) bool {
	if sp == o {
		return true
	}
	if sp == nil || o == nil {
		return false
	}
	return sp.Name == o.Name && sp.Port == o.Port && sp.NodePort == o.NodePort &&
		slices.Equal(sp.ClusterIPs, o.ClusterIPs) &&
		slices.Equal(sp.ExternalIPs, o.ExternalIPs) &&
		slices.Equal(sp.LoadBalancerIPs, o.LoadBalancerIPs) &&
		slices.Equal(sp.SourceRanges, o.SourceRanges) &&
		sp.AffinitySeconds == o.AffinitySeconds &&
		sp.InternalLocal == o.InternalLocal && sp.ExternalLocal == o.ExternalLocal &&
		sp.HealthCheckNodePort == o.HealthCheckNodePort &&
		sp.TrafficDistribution == o.TrafficDistribution &&
		maps.Equal(sp.Extensions, o.Extensions) && sp.Created == o.Created &&
		sp.ExternalBalancing == o.ExternalBalancing && sp.ExternalForwarding == o.ExternalForwarding
}

// Equal reports whether two endpoints are the same in every field.
func (e *Endpoint) Equal(o *Endpoint) bool {
	if e == o {
		return true
	}
	if e == nil || o == nil {
		return false
	}
	return e.IP == o.IP && e.Port == o.Port && e.NodeName == o.NodeName && e.Zone == o.Zone &&
		e.Ready == o.Ready && e.Serving == o.Serving && e.Terminating == o.Terminating &&
		slices.Equal(e.ZoneHints, o.ZoneHints) && slices.Equal(e.NodeHints, o.NodeHints)
}

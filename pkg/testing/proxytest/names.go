package proxytest

import (
	"maps"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// PortNames are the service ports of st, in name order.
func PortNames(st *desired.State) []proxy.ServicePortName {
	return slices.SortedFunc(st.Services.Keys(), proxy.ServicePortName.Compare)
}

// SortedNames are the names of a set of service ports (what a backend's
// HeldPorts reports), in name order.
func SortedNames(set map[proxy.ServicePortName]struct{}) []proxy.ServicePortName {
	return slices.SortedFunc(maps.Keys(set), proxy.ServicePortName.Compare)
}

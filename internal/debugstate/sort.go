package debugstate

import (
	"slices"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
)

func sortedNames(m map[proxy.ServicePortName]*desired.ServicePort) []proxy.ServicePortName {
	names := make([]proxy.ServicePortName, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.SortFunc(names, proxy.ServicePortName.Compare)
	return names
}

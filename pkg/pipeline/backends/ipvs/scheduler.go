package ipvs

import (
	"slices"

	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
)

// SchedulerAnnotation is svcproxy's per-Service IPVS scheduler override,
// an extension annotation (model.ExtensionDomain).
const SchedulerAnnotation = "ipvs.svcproxy.io/scheduler"

// Scheduling is IPVS mode's own decision per service port
// (desired.PortSettings): the scheduler of its virtual servers, which
// Compute resolves once from the annotation and the configured default.
// A name the kernel does not ship is refused: the port gets the default,
// and the setting keeps the name for the Event and explain.
type Scheduling struct {
	// fallback is the setting of every port without a usable annotation,
	// shared, as ports share routes.
	fallback *desired.PortSetting
}

// NewScheduling resolves schedulers with def (ipvs.scheduler, already
// defaulted) for ports that ask for none or for one the kernel lacks.
func NewScheduling(def string) *Scheduling {
	return &Scheduling{fallback: &desired.PortSetting{Value: def}}
}

// PortSetting implements desired.PortSettings.
func (s *Scheduling) PortSetting(extensions map[string]string) *desired.PortSetting {
	switch name := extensions[SchedulerAnnotation]; {
	case name == "":
		return s.fallback
	case slices.Contains(kipvs.Schedulers, name):
		return &desired.PortSetting{Value: name}
	default:
		return &desired.PortSetting{Value: s.fallback.Value, Refused: name}
	}
}

package app

import (
	"github.com/svcproxy/svcproxy/internal/nodestatus"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// status is what `svcproxy status` shows, served on the local API's socket.
func (d *daemon) status() nodestatus.Status {
	h := d.health.Health()
	s := nodestatus.Status{Version: Version, Mode: string(d.cfg.Mode), Node: d.nodeName, Started: processStart,
		IPTablesFlavour: string(d.flavour), Healthy: h.Healthy, Families: []nodestatus.Family{}}
	syncers := d.syncers.Load()
	if syncers == nil {
		return s // not yet set up
	}
	for _, family := range proxy.Families {
		sy := (*syncers)[family]
		if sy == nil {
			continue
		}
		programmed, _ := d.state.Latest(family)
		s.Families = append(s.Families, nodestatus.FromReport(sy.Report(), h.Status[family].Healthy, programmed))
	}
	return s
}

package syncer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/faultinject"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/iptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

var (
	_ PortHolder = (*nftables.Proxier)(nil)
	_ PortHolder = (*iptables.Proxier)(nil)
	_ PortHolder = (*ipvs.Proxier)(nil)
	_ PortHolder = (*faultinject.Proxier)(nil)
	_ PortHolder = (*probingProxier)(nil)
)

// HeldPorts is PortHolder when the wrapped Proxier is one.
func (p *probingProxier) HeldPorts(ctx context.Context, st *desired.State) (map[proxy.ServicePortName]struct{}, error) {
	if h, ok := p.Proxier.(PortHolder); ok {
		return h.HeldPorts(ctx, st)
	}
	return nil, nil
}

// TestKernelRestartMeetsANewPoison: a process programs healthy Services
// and stops; a Service the kernel refuses is created meanwhile; a new
// process starts without a quarantine file (kubeadm's DaemonSet keeps
// none), so its first sync is rejected with nothing accepted to search
// from. The healthy Services answer after every sync it makes and all
// along its start, and the poison is quarantined.
func TestKernelRestartMeetsANewPoison(t *testing.T) {
	netnstest.RequireKernel(t, "nft", "iptables-nft-restore", "ip6tables-nft-restore")
	for _, m := range nativeModes {
		t.Run(string(m.mode), func(t *testing.T) { newPoisonAtRestart(t, m) })
	}
}

func newPoisonAtRestart(t *testing.T, m kernelMode) {
	env, open := m.start(t)
	healthy := append(env.Services(), firstSpec, lastSpec)
	for _, f := range scenario.Families {
		probe := probeFirstAndLast(env, f)
		startProcess(t, env, m, open, f, healthy, "", probe)
		if err := probe(); err != nil {
			t.Fatalf("%s: healthy Services do not answer before the restart: %v", f.Family, err)
		}
		stop := probeMeanwhile(probe)
		s, fi, pp := startProcess(t, env, m, open, f, append(healthy, poisonSpec), "", probe)
		probes, misses := stop()
		t.Logf("%s: the new process's first sync: %d backend syncs, %d refused; %d probes meanwhile",
			f.Family, pp.calls, fi.Refused, probes)
		if fi.Refused == 0 {
			t.Fatalf("%s: the backend never refused the poison: the test proves nothing", f.Family)
		}
		if len(pp.misses) != 0 {
			t.Errorf("%s: healthy Services did not answer after %d of the new process's %d syncs (first: %v)",
				f.Family, len(pp.misses), pp.calls, pp.misses[0])
		}
		if len(misses) != 0 {
			t.Errorf("%s: healthy Services did not answer %d of %d times during the start (first: %v)",
				f.Family, len(misses), probes, misses[0])
		}
		if len(s.quarantined) != len(scenario.Protocols) {
			t.Errorf("%s: %d ports quarantined, want the poison's %d", f.Family, len(s.quarantined), len(scenario.Protocols))
		}
		quarantinedAnswers(t, env, f)
	}
}

// probeMeanwhile runs probe over and over until the returned stop is
// called, which reports how many probes ran and which failed.
func probeMeanwhile(probe func() error) (stop func() (int, []error)) {
	done := make(chan struct{})
	var misses []error
	probes := 0
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			probes++
			if err := probe(); err != nil {
				misses = append(misses, err)
			}
		}
	})
	return func() (int, []error) {
		close(done)
		wg.Wait()
		return probes, misses
	}
}

package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netns"

	"github.com/svcproxy/svcproxy/internal/conntrack"
	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// node is a namespace whose conntrack table the benchmark fills.
type node struct {
	ns     *netnstest.NS
	handle netns.NsHandle
	ct     *kconntrack.Client
}

func newNode(lab *netnstest.Lab, role string) (*node, error) {
	ns, err := lab.NewNS(role)
	if err != nil {
		return nil, err
	}
	h, err := netns.GetFromPath(ns.Path())
	if err != nil {
		return nil, err
	}
	ct, err := kconntrack.NewAt(h)
	if err != nil {
		h.Close()
		return nil, err
	}
	return &node{ns: ns, handle: h, ct: ct}, nil
}

func (n *node) close() {
	n.ct.Close()
	n.handle.Close()
}

// fill creates the table's flows (all, or only the stale half) with a
// ten-minute timeout, so none expires during the run.
func (n *node) fill(w udpWorldT, count int, all bool) (time.Duration, error) {
	var flows []kconntrack.Flow
	for i := 0; i < count; i++ {
		if all || i%2 == 1 {
			flows = append(flows, w.flow(i))
		}
	}
	start := time.Now()
	created, err := n.ct.Create(context.Background(), proxy.IPv4, flows, 10*time.Minute)
	if err == nil && created != len(flows) {
		err = fmt.Errorf("created %d of %d flows", created, len(flows))
	}
	return time.Since(start), err
}

// coldSync times a first sync of st into a fresh namespace's empty table.
func coldSync(lab *netnstest.Lab, role string, st *desired.State) (time.Duration, error) {
	ns, err := lab.NewNS(role)
	if err != nil {
		return 0, err
	}
	var d time.Duration
	err = ns.Do(func() error {
		p, err := nftables.New(proxy.IPv4, nftables.Options{})
		if err != nil {
			return err
		}
		start := time.Now()
		err = p.Sync(context.Background(), st, proxytest.ModeOf(st))
		d = time.Since(start)
		return err
	})
	return d, err
}

// syncBesideRound starts a reconcile round on n's refilled table and a
// cold sync in another namespace at the same moment, and times both.
func (n *node) syncBesideRound(lab *netnstest.Lab, role string, udp, tcp *desired.State) (syncTime, roundTime time.Duration, err error) {
	r := conntrack.New(proxy.IPv4, n.ct, conntrack.Options{})
	r.Observe(udp, model.Changes{ConntrackCleanup: true})
	var wg sync.WaitGroup
	var roundErr error
	start := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		t0 := time.Now()
		// Rounds are budgeted; run them back to back as Run would.
		for {
			res, err := r.Reconcile(context.Background())
			if err != nil || !res.Ran {
				roundErr = err
				break
			}
		}
		roundTime = time.Since(t0)
	}()
	close(start)
	syncTime, err = coldSync(lab, role, tcp)
	wg.Wait()
	if err == nil {
		err = roundErr
	}
	return syncTime, roundTime, err
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

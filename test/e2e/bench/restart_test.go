//go:build benche2e

package bench

import (
	"path/filepath"
	"testing"
	"time"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// restartResult is a restart of the proxy with nothing changed in the API
// or the kernel since it stopped.
type restartResult struct {
	// FirstSync: process start → end of its first successful sync.
	FirstSync float64
	// KernelChanges, Transactions: nf_tables changes and transactions
	// the kernel reported (nft monitor) from just before the start until
	// the proxy had been quiet for a while after its first sync. An
	// unchanged restart should make none.
	KernelChanges, Transactions int
	RSS                         int64 // VmHWM of the new process, KiB, once quiet
	CPUSeconds                  float64
}

// measureRestart stops the proxy (SIGTERM, as a rolling update does) and
// starts it again with the kernel observer running.
func measureRestart(t *testing.T, c *F.Cluster, n *F.Node) restartResult {
	n.Proxy.Stop(30 * time.Second)
	obs, err := startKernelObserver(n.NS, filepath.Join(c.Work, "kernel-changes-restart.txt"), nil)
	if err != nil {
		t.Fatalf("kernel observer: %v", err)
	}
	defer func() {
		if err := obs.stop(); err != nil {
			t.Errorf("kernel observer lost notifications: %v", err)
		}
	}()
	var res restartResult
	start := time.Now()
	if err := c.StartProxy(n); err != nil {
		t.Fatal(err)
	}
	res.FirstSync = waitFirstSync(t, c, n, start)
	waitQuiet(t, c, n)
	res.KernelChanges, res.Transactions = obs.counts()
	_, res.RSS, _ = procStatus(n.Proxy.Pid())
	res.CPUSeconds = cpuSeconds(n.Proxy.Pid())
	t.Logf("restart: first sync %.2f s after start; %d kernel changes in %d transactions; VmHWM %d MiB; CPU %.2f s",
		res.FirstSync, res.KernelChanges, res.Transactions, res.RSS>>10, res.CPUSeconds)
	return res
}

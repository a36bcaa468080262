//go:build benche2e

package bench

import (
	"fmt"
	"os"
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
	// Overflowed: the observer lost notifications; the counts above
	// are lower bounds.
	Overflowed bool
	// MapWrites: ebpf mode's map entries the new process wrote or
	// deleted until quiet (its svcproxy_ebpf_map_writes_total); -1 in
	// the other modes.
	MapWrites  float64
	RSS        int64 // VmHWM of the new process, KiB, once quiet
	CPUSeconds float64
	// IdleBefore is the machine's idle share over the second before the
	// restart (waitIdle).
	IdleBefore float64
}

// measureRestart stops the proxy (SIGTERM, as a rolling update does) and
// starts it again with the kernel observer running.
func measureRestart(t *testing.T, c *F.Cluster, n *F.Node) restartResult {
	n.Proxy.Stop(30 * time.Second)
	obs, stop := observe(t, c, n, "kernel-changes-restart.txt", nil)
	defer stop()
	var res restartResult
	res.IdleBefore = waitIdle(t, "restart")
	start := time.Now()
	if err := c.StartProxy(n); err != nil {
		t.Fatal(err)
	}
	timeline := hwmTimeline(n.Proxy.Pid(), start)
	res.FirstSync = waitFirstSync(t, c, n, start)
	grew := timeline()
	res.MapWrites = waitQuiet(t, c, n).mapWrites()
	res.KernelChanges, res.Transactions, res.Overflowed = obs.counts()
	_, res.RSS, _ = procStatus(n.Proxy.Pid())
	res.CPUSeconds = cpuSeconds(n.Proxy.Pid())
	if *flagProfile {
		saveHeapProfile(t, c, n, filepath.Join(c.Work, "heap-restarted.pprof"))
	}
	t.Logf("restart: first sync %.2f s after start; %d kernel changes in %d transactions; %g map writes; VmHWM %d MiB; CPU %.2f s; VmHWM grew at %s",
		res.FirstSync, res.KernelChanges, res.Transactions, res.MapWrites, res.RSS>>10, res.CPUSeconds, grew)
	return res
}

// saveHeapProfile fetches the proxy's heap profile (in-use and allocated
// since start) after a GC. runOnce enables profiling before the first start
// (-profile), so both processes serve it.
func saveHeapProfile(t *testing.T, c *F.Cluster, n *F.Node, path string) {
	code, body, err := F.HTTPGet(c.NS("ext"), fmt.Sprintf("http://%s:10249/debug/pprof/heap?gc=1", n.IP), 30*time.Second)
	if err != nil || code != 200 {
		t.Logf("heap profile: HTTP %d, %v", code, err)
		return
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Logf("heap profile: %v", err)
		return
	}
	t.Logf("heap profile: %s", path)
}

// saveCPUProfile starts fetching a CPU profile of the proxy's next secs
// seconds (its pprof server: runOnce enables profiling) and returns a
// function that waits for it and writes it to path.
func saveCPUProfile(t *testing.T, c *F.Cluster, n *F.Node, path string, secs int) func() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		url := fmt.Sprintf("http://%s:10249/debug/pprof/profile?seconds=%d", n.IP, secs)
		code, body, err := F.HTTPGet(c.NS("ext"), url, time.Duration(secs+30)*time.Second)
		if err != nil || code != 200 {
			t.Logf("CPU profile: HTTP %d, %v", code, err)
			return
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Logf("CPU profile: %v", err)
			return
		}
		t.Logf("CPU profile (%d s): %s", secs, path)
	}()
	return func() { <-done }
}

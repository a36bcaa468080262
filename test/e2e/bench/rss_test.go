//go:build benche2e

package bench

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// procStatus reads Name and VmHWM (peak RSS, KiB) from /proc/PID/status.
func procStatus(pid int) (name string, hwmKiB int64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return "", 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		switch k {
		case "Name":
			name = strings.TrimSpace(v)
		case "VmHWM":
			hwmKiB, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	return name, hwmKiB, true
}

// rssParts reads /proc/PID/smaps_rollup's Rss, Anonymous and the file-backed
// rest (the binary's pages) in MiB, for the log: what a proxy's RSS is made of.
func rssParts(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return err.Error()
	}
	kib := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if f := strings.Fields(v); ok && len(f) > 0 {
			kib[k], _ = strconv.ParseInt(f[0], 10, 64)
		}
	}
	return fmt.Sprintf("RSS now %d MiB: anonymous %d, file-backed %d", kib["Rss"]>>10, kib["Anonymous"]>>10, (kib["Rss"]-kib["Anonymous"])>>10)
}

// children lists the PIDs of pid's children (every thread's list).
func children(pid int) []int {
	files, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	var out []int
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(s); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// childPeak is the largest VmHWM seen of the children with one name.
type childPeak struct {
	Name   string
	HWMKiB int64
	PIDs   int // distinct processes seen
}

// childMonitor samples svcproxy's children (nft, iptables-restore) every
// 20 ms and keeps each name's largest peak RSS. A child that lives less
// than a sampling period can be missed, and one is read last just before
// it exits at the latest, so these are lower bounds of the children's
// peaks; the wait4 maxrss of svcproxy (Proc.Rusage) bounds them from above
// — loosely: it also holds the benchmark's own peak when it started the
// proxy (a vfork'd child's exec keeps its parent's high-water mark).
type childMonitor struct {
	pid   int
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	peaks map[string]*childPeak
	seen  map[int]bool
}

func startChildMonitor(pid int) *childMonitor {
	m := &childMonitor{pid: pid, stop: make(chan struct{}), done: make(chan struct{}),
		peaks: map[string]*childPeak{}, seen: map[int]bool{}}
	go m.loop()
	return m
}

func (m *childMonitor) loop() {
	defer close(m.done)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
			m.sample()
		}
	}
}

// program is the base name of pid's argv[0] ("" when gone): /proc's Name
// is cut at 15 characters (iptables-nft-re).
func program(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return ""
	}
	arg0, _, _ := strings.Cut(string(b), "\x00")
	if arg0 == "" { // a zombie, or exiting
		return ""
	}
	return filepath.Base(arg0)
}

func (m *childMonitor) sample() {
	self := program(m.pid)
	for _, c := range children(m.pid) {
		// Until it execs, a child shares svcproxy's memory (vfork): its
		// VmHWM would be svcproxy's own.
		name := program(c)
		if name == "" || name == self {
			continue
		}
		_, hwm, ok := procStatus(c)
		if !ok {
			continue
		}
		m.mu.Lock()
		p := m.peaks[name]
		if p == nil {
			p = &childPeak{Name: name}
			m.peaks[name] = p
		}
		if !m.seen[c] {
			m.seen[c] = true
			p.PIDs++
		}
		p.HWMKiB = max(p.HWMKiB, hwm)
		m.mu.Unlock()
	}
}

// finish stops sampling and returns the peaks by name.
func (m *childMonitor) finish() []childPeak {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []childPeak
	for _, p := range m.peaks {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// load1 is the 1-minute load average: the machine is shared, and wall
// times only mean something next to it.
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// hwmTimeline samples a process's VmHWM every 10 ms from start until stop is
// called, and returns when it grew (by 4 MiB or more since the last point
// noted), for the log: when in a start its memory peaks (lists, read-back,
// first sync).
func hwmTimeline(pid int, start time.Time) (stop func() string) {
	quit, done := make(chan struct{}), make(chan string)
	go func() {
		var b strings.Builder
		var noted int64
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if _, hwm, ok := procStatus(pid); ok && hwm-noted >= 4<<10 {
				noted = hwm
				fmt.Fprintf(&b, " %.2fs:%dMiB", time.Since(start).Seconds(), hwm>>10)
			}
			select {
			case <-quit:
				done <- strings.TrimSpace(b.String())
				return
			case <-tick.C:
			}
		}
	}()
	return func() string { close(quit); return <-done }
}

// machineIdle is the share of the machine's CPU time that was idle (idle +
// iowait, /proc/stat) over the last interval.
func machineIdle(interval time.Duration) float64 {
	read := func() (idle, total float64) {
		b, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0, 0
		}
		line, _, _ := strings.Cut(string(b), "\n")
		for i, f := range strings.Fields(line)[1:] {
			v, _ := strconv.ParseFloat(f, 64)
			if i < 8 { // user … steal; guest times are already in user
				total += v
			}
			if i == 3 || i == 4 {
				idle += v
			}
		}
		return idle, total
	}
	i0, t0 := read()
	time.Sleep(interval)
	i1, t1 := read()
	if t1 <= t0 {
		return 0
	}
	return (i1 - i0) / (t1 - t0)
}

// waitIdle waits, at most -idle-wait, until the machine has been at least
// -idle-share idle over one second: a start measured while the previous
// run's teardown (the kernel frees its network namespaces, conntrack
// entries and tables in the background) or a freshly started API server
// still takes a CPU measures them, not the proxy. It returns the idle share
// of the last second.
func waitIdle(t *testing.T, what string) float64 {
	deadline := time.Now().Add(*flagIdleWait)
	t0 := time.Now()
	for {
		idle := machineIdle(time.Second)
		if idle >= *flagIdleShare || !time.Now().Before(deadline) {
			t.Logf("%s: machine %.0f %% idle over the last second, after %.0f s", what, 100*idle, time.Since(t0).Seconds())
			return idle
		}
	}
}

// cpuSpeed times a fixed single-CPU workload (SHA-256 over 32 MiB, the
// best of three) on the idle guest and returns its seconds: the virtual
// CPUs' speed at that moment. The guest is idle before each start
// (waitIdle), yet the same start took 30–100 % longer on some hours than
// on others (docs/performance.md, "Method"):
// the host's load, which the guest does not see. Printed beside each run,
// it tells a slow hour from a slower proxy.
func cpuSpeed() float64 {
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	best := time.Duration(1 << 62)
	for range 3 {
		h := sha256.New()
		t0 := time.Now()
		for range 32 {
			h.Write(buf)
		}
		_ = h.Sum(nil)
		best = min(best, time.Since(t0))
	}
	return best.Seconds()
}

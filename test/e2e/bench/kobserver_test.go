//go:build benche2e

package bench

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// kernelObserver runs `nft monitor` in the node's namespace: the kernel's
// own account of every nf_tables change, whoever made it (svcproxy over
// netlink, nft, iptables-nft, upstream's nft). Each line is stamped when
// the benchmark reads it. It counts the changes (lines not starting with
// '#') and the transactions ("# new generation" lines), and keeps the
// first time each IPv4 address of interest appeared in a change: the
// moment an endpoint written through the API was live in the kernel.
//
// A listener makes the kernel build a notification per change, so the
// observer is not run during the cold start (100k+ elements), only during
// the restart and the churn.
type kernelObserver struct {
	cmd  *exec.Cmd
	done chan struct{}

	mu           sync.Mutex
	changes      int
	transactions int
	firstSeen    map[string]time.Time
	interesting  func(ip string) bool
}

func startKernelObserver(ns string, interesting func(ip string) bool) (*kernelObserver, error) {
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "monitor")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	o := &kernelObserver{cmd: cmd, done: make(chan struct{}), firstSeen: map[string]time.Time{}, interesting: interesting}
	go o.read(out)
	// nft subscribes before it prints anything; give it a moment so that a
	// change made right after this returns is not missed.
	time.Sleep(300 * time.Millisecond)
	return o, nil
}

func (o *kernelObserver) read(out interface{ Read([]byte) (int, error) }) {
	defer close(o.done)
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		now := time.Now()
		line := sc.Text()
		o.mu.Lock()
		if strings.HasPrefix(line, "#") {
			if strings.Contains(line, "new generation") {
				o.transactions++
			}
			o.mu.Unlock()
			continue
		}
		o.changes++
		if o.interesting != nil {
			for _, ip := range ipv4RE.FindAllString(line, -1) {
				if _, seen := o.firstSeen[ip]; !seen && o.interesting(ip) {
					o.firstSeen[ip] = now
				}
			}
		}
		o.mu.Unlock()
	}
}

// counts returns the changes and transactions seen so far.
func (o *kernelObserver) counts() (changes, transactions int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.changes, o.transactions
}

// seen returns when ip first appeared in a change.
func (o *kernelObserver) seen(ip string) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t, ok := o.firstSeen[ip]
	return t, ok
}

func (o *kernelObserver) stop() {
	if o.cmd.Process != nil {
		_ = o.cmd.Process.Kill()
	}
	<-o.done
	_ = o.cmd.Wait()
}

// cpuSeconds is the CPU time (user + system) of pid and of its children it
// has waited for (nft, iptables-restore), from /proc/PID/stat.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14 … cstime 17.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	var ticks float64
	for _, i := range []int{14, 15, 16, 17} {
		v, _ := strconv.ParseFloat(f[i-3], 64)
		ticks += v
	}
	return ticks / clockTicks
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// waitCtx sleeps d unless ctx ends first.
func waitCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

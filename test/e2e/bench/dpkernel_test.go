//go:build benche2e

package bench

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// userHZ is the unit of /proc/stat's times (USER_HZ, 100 on Linux).
const userHZ = 100

// kernelCPUSeconds is the machine's time in the kernel so far (system,
// irq and softirq of every CPU, /proc/stat): a datapath window's
// connections cost mostly there. Machine-wide, so whatever else runs in
// the kernel meanwhile counts too; -1 when unreadable.
func kernelCPUSeconds() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line)) // cpu user nice system idle iowait irq softirq ...
	if len(f) < 8 || f[0] != "cpu" {
		return -1
	}
	var ticks float64
	for _, i := range []int{3, 6, 7} {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return -1
		}
		ticks += v
	}
	return ticks / userHZ
}

// flushConntrack empties the node namespace's conntrack table, so that a
// window's NAT entries can be counted after it and each window starts
// with the same table.
func flushConntrack(t *testing.T, n *F.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := F.InNS(ctx, n.NS, "conntrack", "-F"); err != nil {
		t.Logf("conntrack -F in %s: %v: %s", n.NS, err, out)
	}
}

// natEntries counts the conntrack entries in the node's namespace whose
// reply tuple is not the original one reversed: a NAT binding, one per
// connection where the rules DNAT (fewer when a client port was reused,
// which replaces the earlier entry), none where nothing does. -1 when the
// table cannot be read.
func natEntries(t *testing.T, n *F.Node) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := F.OutputInNS(ctx, n.NS, "conntrack", "-L")
	if err != nil {
		t.Logf("conntrack -L in %s: %v", n.NS, err)
		return -1
	}
	count := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if natted(sc.Text()) {
			count++
		}
	}
	return count
}

// natted reads one line of conntrack -L: the original direction's
// src=, dst=, sport=, dport= come first, the reply's second.
func natted(line string) bool {
	seen := map[string][]string{}
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if ok && (k == "src" || k == "dst" || k == "sport" || k == "dport") {
			seen[k] = append(seen[k], v)
		}
	}
	for _, k := range []string{"src", "dst", "sport", "dport"} {
		if len(seen[k]) != 2 {
			return false
		}
	}
	return seen["src"][1] != seen["dst"][0] || seen["dst"][1] != seen["src"][0] ||
		seen["sport"][1] != seen["dport"][0] || seen["dport"][1] != seen["sport"][0]
}

// mapMemlockKiB sums the memlock of the BPF maps process pid holds open
// (/proc/PID/fdinfo), each map once however many descriptors name it: the
// kernel memory ebpf mode's maps take beside the process's RSS. 0 for a
// process without maps.
func mapMemlockKiB(pid int) int64 {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fdinfo")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return -1
	}
	var total int64
	ids := map[string]bool{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil || !bytes.Contains(b, []byte("map_type:")) {
			continue
		}
		var id string
		var memlock int64
		for _, l := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(l, ":")
			switch strings.TrimSpace(k) {
			case "map_id":
				id = strings.TrimSpace(v)
			case "memlock":
				memlock, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			}
		}
		if id != "" && !ids[id] {
			ids[id] = true
			total += memlock
		}
	}
	return total >> 10
}

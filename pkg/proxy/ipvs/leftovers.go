package ipvs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"

	"github.com/svcproxy/svcproxy/pkg/kipset"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Paths LeftoversPresent reads (tests point them elsewhere).
var (
	// procIPVS lists the calling thread's namespace's virtual servers; it
	// exists only while the ip_vs module is loaded.
	procIPVS = "/proc/thread-self/net/ip_vs"
	// sysIPSet exists while the ip_set module is loaded (or built in).
	sysIPSet = "/sys/module/ip_set"
)

// LeftoversPresent reports whether IPVS mode left anything that Cleanup
// removes in the calling thread's network namespace, and what: virtual
// servers, the kube-ipvs0 link, or one of IPVS mode's ipsets (its iptables
// chains match on those sets, so they cannot outlive them). It starts no
// process and loads no module: creating Cleanup's clients runs modprobe
// ip_vs (moby/ipvs) and the iptables flavour detection, seconds of CPU
// at start on a node that never ran IPVS mode (issue #17).
func LeftoversPresent() (bool, string, error) {
	if n, err := virtualServers(); err != nil || n > 0 {
		return n > 0, fmt.Sprintf("%d IPVS virtual servers", n), err
	}
	if _, err := net.InterfaceByName(DummyLink); err == nil {
		return true, "link " + DummyLink, nil
	}
	if _, err := os.Stat(sysIPSet); err != nil {
		return false, "", nil // no ip_set module: no sets
	}
	sets, err := kipset.New("")
	if err != nil {
		return false, "", err
	}
	defer sets.Close()
	for _, f := range proxy.Families {
		for _, s := range setSpecs {
			name := setName(f, s.name)
			_, err := sets.ListEntries(name)
			if err == nil {
				return true, "ipset " + name, nil
			}
			if !errors.Is(err, kipset.ErrNotFound) {
				return false, "", err
			}
		}
	}
	return false, "", nil
}

// virtualServers counts the virtual servers /proc lists (0 without the
// ip_vs module).
func virtualServers() (int, error) {
	b, err := os.ReadFile(procIPVS)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the IPVS table: %w", err)
	}
	// Three header lines, then a line per virtual server, each followed by
	// its real servers ("  -> ...").
	n := 0
	lines := bufio.NewScanner(bytes.NewReader(b))
	for i := 0; lines.Scan(); i++ {
		if line := lines.Bytes(); i >= 3 && len(line) > 0 && line[0] != ' ' {
			n++
		}
	}
	return n, nil
}

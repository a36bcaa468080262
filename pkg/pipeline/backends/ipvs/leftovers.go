package ipvs

import (
	"errors"
	"os"

	"github.com/svcproxy/svcproxy/pkg/kipset"
	"github.com/svcproxy/svcproxy/pkg/klink"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// sysIPSet exists while the ip_set module is loaded (or built in);
// LeftoversPresent reads it (tests point it elsewhere).
var sysIPSet = "/sys/module/ip_set"

// LeftoversPresent reports whether IPVS mode left anything that Cleanup
// removes in the calling thread's network namespace, and what: the
// kube-ipvs0 link or one of IPVS mode's ipsets (its iptables chains match
// on those sets, so they cannot outlive them). Virtual servers alone are
// not leftovers: Cleanup deletes only those the link or the sets vouch for
// (ownership.go), so without either none is ours — a node whose only IPVS
// state is keepalived's VIPs has nothing to clean. It starts no process
// and loads no module: creating Cleanup's clients runs modprobe ip_vs
// (moby/ipvs) and the iptables flavour detection, seconds of CPU at start
// on a node that never ran IPVS mode.
func LeftoversPresent() (bool, string, error) {
	link, err := klink.New("")
	if err != nil {
		return false, "", err
	}
	defer link.Close()
	if _, err := os.Stat(sysIPSet); err != nil {
		return leftoversIn(link, nil) // no ip_set module: no sets
	}
	sets, err := kipset.New("")
	if err != nil {
		return false, "", err
	}
	defer sets.Close()
	return leftoversIn(link, sets)
}

// leftoversIn is LeftoversPresent over the given clients; sets is nil when
// the kernel has no ipsets.
func leftoversIn(link klink.Interface, sets kipset.Interface) (bool, string, error) {
	_, err := link.ListAddrs(DummyLink)
	switch {
	case err == nil:
		return true, "link " + DummyLink, nil
	case !errors.Is(err, klink.ErrNotFound):
		return false, "", err
	case sets == nil:
		return false, "", nil
	}
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

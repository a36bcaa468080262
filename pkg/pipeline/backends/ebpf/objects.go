package ebpf

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// ObjectNames names, for svcproxy explain, the map entries st renders to
// for the frontend dst (address and port; protocol proto): its services
// record, and the backends slots of the groups that record points at. The
// names are the pins' (under the pin directory's family directory), so
// that bpftool finds them. It renders st alone, so it should hold only the
// port being explained.
func ObjectNames(st *desired.State, dst netip.AddrPort, proto proxy.Protocol) ([]string, error) {
	c := Render(st)
	dir := strings.ToLower(string(st.Family))
	key := frontendKey(dst.Addr(), dst.Port(), protoNumbers[proto])
	v, ok := c.Services[key]
	if !ok {
		return nil, fmt.Errorf("the rendered maps have no services record for %s/%s", dst, proto)
	}
	out := []string{fmt.Sprintf("bpf programs %s (pins link_connect*, link_sendmsg*, link_recvmsg*, link_getpeername*)", dir)}
	out = append(out, fmt.Sprintf("bpf map %s/%s: %s/%s → pods: group %016x (%d), node: group %016x (%d)",
		dir, mapServices, key, proto, v.Pod.ID, v.Pod.Count, v.Node.ID, v.Node.Count))
	for _, tg := range uniqueTargets(v) {
		for slot := range tg.Count {
			be, ok := c.Backends[beKey{ID: tg.ID, Slot: slot}]
			if !ok {
				continue
			}
			out = append(out, fmt.Sprintf("bpf map %s/%s: group %016x slot %d → %s", dir, mapBackends, tg.ID, slot, be.AddrPort()))
		}
	}
	return out, nil
}

// uniqueTargets is v's pod and node targets, once each when they share a
// group.
func uniqueTargets(v svcVal) []target {
	ts := []target{v.Pod}
	if v.Node.ID != v.Pod.ID || v.Node.Count != v.Pod.Count {
		ts = append(ts, v.Node)
	}
	return slices.DeleteFunc(ts, func(t target) bool { return t.Count == 0 })
}

//go:build benche2e

package bench

import (
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// svcKeyAddr is the length of the address at the start of a key of ebpf
// mode's services map: 16 bytes, an IPv4 address as ::ffff:a.b.c.d
// (pkg/pipeline/backends/ebpf/wire.go).
const svcKeyAddr = 16

// mapClusterIPs returns the wanted addresses that are frontends in ebpf
// mode's IPv4 services map, pinned under pinDir: what a connect from the
// node's cgroup is translated by. The map is read, never written.
func mapClusterIPs(pinDir string, want map[string]bool) (map[string]bool, error) {
	path := filepath.Join(pinDir, "ipv4", "services")
	m, err := ebpf.LoadPinnedMap(path, &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	defer m.Close()
	if m.KeySize() < svcKeyAddr {
		return nil, fmt.Errorf("%s: keys of %d bytes, want at least %d", path, m.KeySize(), svcKeyAddr)
	}
	key, val := make([]byte, m.KeySize()), make([]byte, m.ValueSize())
	found := map[string]bool{}
	it := m.Iterate()
	for it.Next(&key, &val) {
		addr := netip.AddrFrom16([16]byte(key[:svcKeyAddr])).Unmap().String()
		if want[addr] {
			found[addr] = true
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return found, nil
}

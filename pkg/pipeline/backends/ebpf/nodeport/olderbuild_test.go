package nodeport

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
)

// olderObject is the programs' object of the build pinned in
// hack/tools/svcproxy-previous-ebpf-tc, as that commit holds it (`git show
// fe46304:pkg/pipeline/backends/ebpf/nodeport/nodeport_bpfel.o`): np_maglev
// of the older layout, the conntrack table as now.
const olderObject = "testdata/nodeport-fe46304_bpfel.o"

// loadAsOlderBuild loads olderObject's programs with the maps pinned in
// dir the way that build loads them: every map pinned by its own name is
// adopted as it is (a pin of another layout fails the load), the others
// are created and pinned by their names. It returns the maps it adopted.
func loadAsOlderBuild(t *testing.T, dir string) (adopted []string, err error) {
	t.Helper()
	spec, err := ebpf.LoadCollectionSpec(olderObject)
	must(t, err)
	for name := range spec.Programs {
		if _, ok := hooks[name]; !ok && name != progXDP {
			delete(spec.Programs, name)
		}
	}
	opts := ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{}}
	for name, ms := range spec.Maps {
		if strings.HasPrefix(name, ".") {
			continue
		}
		if ms.MaxEntries == 1 && ms.Type != ebpf.Array {
			ms.MaxEntries = minEntries
		}
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		must(t, err)
		defer m.Close()
		ms.MaxEntries = m.MaxEntries()
		opts.MapReplacements[name] = m
		adopted = append(adopted, name)
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, opts)
	if err != nil {
		return adopted, err
	}
	defer coll.Close()
	must(t, os.MkdirAll(dir, 0o700))
	for name, m := range coll.Maps {
		if strings.HasPrefix(name, ".") {
			continue
		}
		if err := m.Pin(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrExist) {
			t.Fatal(err)
		}
	}
	return adopted, nil
}

// TestKernelOlderBuildLoadsOverThesePins: a downgrade to the older build
// with the tc programs loads its programs over the maps this version
// pinned, and adopts the conntrack table, so that flows survive the
// downgrade. With np_maglev's map of tables pinned by its own name it
// could not: that build refuses the layout and its every start fails.
func TestKernelOlderBuildLoadsOverThesePins(t *testing.T) {
	ns, pins := progNS(t)
	p := progProxier(t, pins, "node")
	syncIn(t, ns, p, maglevPort(maglevEps(3)))
	p.Close()
	adopted, err := loadAsOlderBuild(t, filepath.Join(pins, "node"))
	if err != nil {
		t.Fatalf("the older build's programs do not load over this version's pins: %v", err)
	}
	if !slices.Contains(adopted, mapCT) {
		t.Errorf("the older build adopts %v, not %s: flows through the programs would not survive", adopted, mapCT)
	}
}

// TestKernelLoadsOverOlderBuildsPins: the upgrade after it. This version
// loads over the pins the older build left: it adopts the conntrack table
// the older build used, pins its map of tables by its own name, and
// removes the older build's np_maglev, which nothing reads any more.
func TestKernelLoadsOverOlderBuildsPins(t *testing.T) {
	ns, pins := progNS(t)
	dir := filepath.Join(pins, "node")
	_, err := loadAsOlderBuild(t, dir)
	must(t, err)
	older, err := ebpf.LoadPinnedMap(filepath.Join(dir, mapCT), nil)
	must(t, err)
	defer older.Close()
	p := progProxier(t, pins, "node")
	syncIn(t, ns, p, maglevPort(maglevEps(3)))
	if !sameMap(older, p.kernel.coll.Maps[mapCT]) {
		t.Errorf("this version did not adopt the older build's %s: flows through the programs would not survive", mapCT)
	}
	if _, err := os.Stat(filepath.Join(dir, mapMaglev)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the older build's %s is still pinned (%v)", mapMaglev, err)
	}
	if _, err := os.Stat(filepath.Join(dir, pinName(mapMaglev))); err != nil {
		t.Errorf("this version's map of tables is not pinned: %v", err)
	}
}

// sameMap says whether a and b are one map in the kernel.
func sameMap(a, b *ebpf.Map) bool {
	ia, errA := a.Info()
	ib, errB := b.Info()
	if errA != nil || errB != nil {
		return false
	}
	idA, okA := ia.ID()
	idB, okB := ib.ID()
	return okA && okB && idA == idB
}

package nodeport

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
)

// pinsFile records the layout of every name svcproxy has pinned a map of
// the tc programs by, this version's and the earlier ones'.
const pinsFile = "testdata/pins.txt"

// TestPinLayouts: every map is pinned by a name that has held only its
// layout. A name, once used, keeps its layout for good: an svcproxy of
// another version finds under a name it uses either the layout it knows or
// nothing, never one it would refuse, or read wrong, at a downgrade. A
// changed layout needs a new pin name (layoutVersions) and a new line.
func TestPinLayouts(t *testing.T) {
	spec, err := loadNodeport()
	must(t, err)
	recorded := readPins(t)
	for _, name := range mapNames {
		pin, got := pinName(name), layoutOf(spec.Maps[name])
		want, ok := recorded[pin]
		switch {
		case !ok:
			t.Errorf("%s: pin name %s is not in %s; add the line\n%s %s", name, pin, pinsFile, pin, got)
		case want != got:
			t.Errorf("%s: the layout pinned as %s changed:\n  recorded %s\n  now      %s\n"+
				"a name keeps its layout: raise %s's version in layoutVersions and record the new pin name",
				name, pin, want, got, name)
		}
	}
}

// readPins reads pinsFile: a pin name and its layout per line.
func readPins(t *testing.T) map[string]string {
	f, err := os.Open(pinsFile)
	must(t, err)
	defer f.Close()
	pins := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pin, layout, _ := strings.Cut(line, " ")
		if _, dup := pins[pin]; dup {
			t.Errorf("%s: %s is recorded twice", pinsFile, pin)
		}
		pins[pin] = layout
	}
	must(t, sc.Err())
	return pins
}

// layoutOf is what a map must match to be adopted (ebpf.MapSpec.Compatible
// less the size, which a start adopts as pinned).
func layoutOf(m *ebpf.MapSpec) string {
	s := fmt.Sprintf("type=%v key=%d value=%d flags=%#x", m.Type, m.KeySize, m.ValueSize, m.Flags)
	if m.InnerMap != nil {
		s += " inner=(" + layoutOf(m.InnerMap) + ")"
	}
	return s
}

// TestLayoutVersionsNamed: a versioned pin name is never a map's own
// name, and no two maps share one.
func TestLayoutVersionsNamed(t *testing.T) {
	var pins []string
	for _, name := range mapNames {
		pins = append(pins, pinName(name))
		if layoutVersions[name] > 1 && pinName(name) == name {
			t.Errorf("%s: version %d pinned by its own name", name, layoutVersions[name])
		}
	}
	slices.Sort(pins)
	if c := slices.Compact(slices.Clone(pins)); len(c) != len(pins) {
		t.Errorf("pin names shared: %v", pins)
	}
}

package bpfmap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// LoadAdopting loads spec with the maps of names that are pinned in dir
// in place of new ones (at their pinned size), so that a restarted
// svcproxy finds what its predecessor wrote, and pins every new map in
// dir, which it creates. A pinned map of another layout (type, key, value
// or flags: an older svcproxy's) is replaced by a new, empty one: the
// programs that read it are replaced too, and the first sync fills it.
func LoadAdopting(spec *ebpf.CollectionSpec, dir string, names []string) (*ebpf.Collection, error) {
	pins := map[string]string{}
	for _, name := range names {
		pins[name] = name
	}
	return LoadAdoptingAs(spec, dir, pins)
}

// LoadAdoptingAs is LoadAdopting with each map of pins pinned by the name
// pins gives it (a name that carries the map's layout version); the other
// maps are pinned by their own names.
func LoadAdoptingAs(spec *ebpf.CollectionSpec, dir string, pins map[string]string) (*ebpf.Collection, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	opts := ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{}}
	defer func() {
		for _, m := range opts.MapReplacements {
			m.Close()
		}
	}()
	for name, pin := range pins {
		m, err := adopt(spec.Maps[name], filepath.Join(dir, pin))
		if err != nil {
			return nil, fmt.Errorf("adopting pinned map %s: %w", name, err)
		}
		if m != nil {
			opts.MapReplacements[name] = m
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, opts)
	if err != nil {
		return nil, err
	}
	if err := pinMapsAs(coll, dir, pins); err != nil {
		coll.Close()
		return nil, err
	}
	return coll, nil
}

// adopt returns the map pinned at pin, with spec sized as it is, or nil
// when there is none or it has another layout, whose pin it removes.
func adopt(spec *ebpf.MapSpec, pin string) (*ebpf.Map, error) {
	m, err := ebpf.LoadPinnedMap(pin, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	spec.MaxEntries = m.MaxEntries()
	if err := spec.Compatible(m); errors.Is(err, ebpf.ErrMapIncompatible) {
		m.Close()
		return nil, os.Remove(pin)
	}
	return m, nil
}

// PinMaps pins in dir every map of coll not pinned yet.
func PinMaps(coll *ebpf.Collection, dir string) error { return pinMapsAs(coll, dir, nil) }

// pinMapsAs is PinMaps with the pin names of pins where it has one.
func pinMapsAs(coll *ebpf.Collection, dir string, pins map[string]string) error {
	for name, m := range coll.Maps {
		// .rodata holds the load-time constants: it comes with each load
		// (and bpffs refuses names with a dot).
		if m.IsPinned() || strings.HasPrefix(name, ".") {
			continue
		}
		pin := name
		if p, ok := pins[name]; ok {
			pin = p
		}
		if err := m.Pin(filepath.Join(dir, pin)); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("pinning map %s: %w", name, err)
		}
	}
	return nil
}

// AttachPinned swaps prog into the link pinned at pin, atomically, when
// there is one; else it attaches prog with attach and pins the new link.
func AttachPinned(pin string, prog *ebpf.Program, attach func() (link.Link, error)) (link.Link, error) {
	if lk, err := link.LoadPinnedLink(pin, nil); err == nil {
		if err := lk.Update(prog); err != nil {
			lk.Close()
			return nil, fmt.Errorf("replacing the program of link %s: %w", pin, err)
		}
		return lk, nil
	}
	lk, err := attach()
	if err != nil {
		return nil, err
	}
	if err := lk.Pin(pin); err != nil {
		lk.Close()
		return nil, fmt.Errorf("pinning link %s: %w", pin, err)
	}
	return lk, nil
}

// bpffsFiles are the files a bpffs mount's root holds of the kernel's own
// (its preloaded iterators, where the kernel is built with them): no pin
// of anybody's, and not removable.
var bpffsFiles = map[string]bool{"maps.debug": true, "progs.debug": true}

// KernelFile says whether name, in a bpffs directory, is one of the
// kernel's own files, which removing what a directory holds passes over.
func KernelFile(name string) bool { return bpffsFiles[name] }

// RemovePin removes pin; a pinned link (whatever its name: a later
// version may pin links by names this one does not know) is detached.
// What is not there is not an error.
func RemovePin(pin string) error {
	lk, err := link.LoadPinnedLink(pin, nil)
	if err != nil {
		// Not a link: a map or a program, which the pin alone keeps.
		if err := os.Remove(pin); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	// A pinned link stays attached while the pin exists; with the pin
	// gone, closing the last descriptor detaches the program.
	return errors.Join(lk.Unpin(), lk.Close())
}

// RemovePins detaches every link pinned in dir, removes every other pin
// (maps) and then dir; what is not there is not an error. It goes by what
// dir holds, not by a list of names, so that a version which knows fewer
// objects still removes everything a newer one pinned there: a rollback
// followed by a switch of mode leaves nothing attached.
func RemovePins(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !KernelFile(e.Name()) {
			errs = append(errs, RemovePin(filepath.Join(dir, e.Name())))
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ReplacePin pins m under name in dir in place of what is pinned there:
// pinned beside it, then renamed over it, so that the name never lacks a
// map.
func ReplacePin(m *ebpf.Map, dir, name string) error {
	// bpffs refuses names with a dot.
	pin, tmp := filepath.Join(dir, name), filepath.Join(dir, name+"_grown")
	if err := m.Pin(tmp); err != nil {
		return fmt.Errorf("pinning the new map %s: %w", name, err)
	}
	if err := os.Rename(tmp, pin); err != nil {
		return fmt.Errorf("replacing the pin of map %s: %w", name, err)
	}
	return nil
}

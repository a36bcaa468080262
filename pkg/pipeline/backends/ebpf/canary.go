package ebpf

import (
	"context"
	"errors"
	"os"
	"path/filepath"
)

// pins lists the pins of a family's links and maps that svcproxy keeps.
func (p *Proxier) pins() []string {
	var out []string
	for name := range hooks(p.family) {
		out = append(out, filepath.Join(p.dir, "link_"+name))
	}
	for _, name := range []string{mapServices, mapBackends, mapRevNAT, mapAffinity} {
		out = append(out, filepath.Join(p.dir, name))
	}
	return out
}

// CanaryMissing reports whether a pin svcproxy made is gone (someone
// removed it, or unmounted the bpffs): the programs may still run, held by
// svcproxy's descriptors, but the next svcproxy would not find them. The
// syncer answers with a RecoverySync, which loads and pins again. It only
// reads the file system, so it may run beside Sync.
func (p *Proxier) CanaryMissing(context.Context) (bool, error) {
	if !p.programmed.Load() {
		return false, nil
	}
	for _, pin := range p.pins() {
		if _, err := os.Stat(pin); errors.Is(err, os.ErrNotExist) {
			return true, nil
		} else if err != nil {
			return false, err
		}
	}
	return false, nil
}

// repin loads the programs again where a pin is gone. The new links
// attach beside the old ones before those are closed, so that no socket
// goes untranslated (a second program finds the endpoint address in no
// map and passes).
func (p *Proxier) repin(capacity uint32) error {
	missing, err := p.CanaryMissing(context.Background())
	if err != nil || !missing {
		return err
	}
	old := p.kernel
	if err := p.load(capacity); err != nil {
		return err
	}
	old.close()
	return nil
}

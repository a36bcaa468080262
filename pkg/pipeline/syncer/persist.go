package syncer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// A restart should not meet the kernel's rejection again to learn what the
// previous process had learnt: a rejected first sync has no accepted State
// to search from, only the ports the kernel holds as they are (isolate.go),
// and a port held in another version goes unserved while the search runs.
// So the quarantine is kept in a file; the next process keeps those ports
// out of its first sync and then retries each alone. A port whose rejected
// update left its previous version in the kernel (quarantined.held) is
// kept with that version, which the next process keeps programming: the
// names alone would make it drop the port until its Service changes.

// maxQuarantineFile bounds what is read back: the file is the daemon's
// own, but a corrupted or foreign file must not cost more than this. The
// held versions carry their endpoints, hence more than names need.
const maxQuarantineFile = 16 << 20

type persistedPort struct {
	Namespace string         `json:"namespace"`
	Name      string         `json:"name"`
	Port      string         `json:"port,omitempty"`
	Protocol  proxy.Protocol `json:"protocol"`
	Since     time.Time      `json:"since"`
	Error     string         `json:"error,omitempty"`
	// Held is what the kernel kept for the port, if anything.
	Held *desired.ServicePort `json:"held,omitempty"`
}

// loadQuarantine reads the names a previous process quarantined; they stay
// out of the first sync, which retries them (pending entries, see apply).
func (s *Syncer) loadQuarantine() {
	if s.o.QuarantineFile == "" {
		return
	}
	ports, err := readQuarantineFile(s.o.QuarantineFile)
	if err != nil {
		klog.InfoS("Ignoring the quarantine kept by a previous process", "ipFamily", s.family, "file", s.o.QuarantineFile, "err", err)
		return
	}
	for _, p := range ports {
		name := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: p.Namespace, Name: p.Name}, Port: p.Port, Protocol: p.Protocol}
		s.quarantined[name] = &quarantined{err: errors.New(p.Error), since: p.Since, held: p.Held}
	}
	if len(ports) > 0 {
		klog.InfoS("Keeping service ports a previous process quarantined out of the first sync; they are retried after it",
			"ipFamily", s.family, "servicePorts", len(ports))
		s.retryDue = true
	}
	s.persisted = s.quarantineKeys()
}

func readQuarantineFile(path string) ([]persistedPort, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var ports []persistedPort
	dec := json.NewDecoder(io.LimitReader(f, maxQuarantineFile))
	// A file cut short by the limit fails to decode: no closing bracket.
	if err := dec.Decode(&ports); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	return ports, nil
}

// saveQuarantine writes the quarantine when its ports or what the kernel
// holds for them changed since the last write. A failure is logged: the
// file only spares a restart a search.
func (s *Syncer) saveQuarantine() {
	if s.o.QuarantineFile == "" {
		return
	}
	keys := s.quarantineKeys()
	if slices.Equal(keys, s.persisted) {
		return
	}
	ports := make([]persistedPort, 0, len(keys))
	for _, k := range keys {
		e, name := s.quarantined[k.name], k.name
		p := persistedPort{Namespace: name.Namespace, Name: name.Name, Port: name.Port, Protocol: name.Protocol,
			Since: e.since, Held: e.held}
		if e.err != nil {
			p.Error = e.err.Error()
		}
		ports = append(ports, p)
	}
	if err := writeFileAtomic(s.o.QuarantineFile, ports); err != nil {
		klog.ErrorS(err, "Could not keep the quarantine for the next process", "ipFamily", s.family, "file", s.o.QuarantineFile)
		return
	}
	s.persisted = keys
}

// persistKey is what the file says of one quarantined port: its name and
// the version the kernel holds (versions are immutable, so the pointer
// tells).
type persistKey struct {
	name proxy.ServicePortName
	held *desired.ServicePort
}

func (s *Syncer) quarantineKeys() []persistKey {
	keys := make([]persistKey, 0, len(s.quarantined))
	for _, name := range slices.SortedFunc(maps.Keys(s.quarantined), proxy.ServicePortName.Compare) {
		keys = append(keys, persistKey{name, s.quarantined[name].held})
	}
	return keys
}

// writeFileAtomic replaces path with v as JSON, so that a crash leaves the
// old file or the new one, never half of one.
func writeFileAtomic(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

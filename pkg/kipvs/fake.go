package kipvs

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// Fake is an in-memory Interface for tests. It is safe for concurrent use,
// as the real kernel is: a backend's reaper and its sync may both call it.
type Fake struct {
	mu       sync.Mutex
	services map[ServiceKey]*fakeService
	timeouts Timeouts
	// writes counts every successful change (add, update, delete, timeouts).
	writes int
	// FailOn, when set, is consulted before each write; an error it returns
	// fails that call.
	FailOn func(op string, key ServiceKey) error
}

type fakeService struct {
	svc   Service
	dests map[netip.AddrPort]*DestinationStatus
}

var _ Interface = (*Fake)(nil)

// NewFake returns an empty Fake.
func NewFake() *Fake { return &Fake{services: map[ServiceKey]*fakeService{}} }

// Writes returns how many changes the Fake has accepted.
func (f *Fake) Writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

// Timeouts returns the last timeouts set.
func (f *Fake) Timeouts() Timeouts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.timeouts
}

// SetConnections sets the connection counts the Fake reports for a
// destination, as traffic would in the kernel.
func (f *Fake) SetConnections(key ServiceKey, addr netip.AddrPort, active, inactive int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.dest(key, addr)
	if err != nil {
		return err
	}
	d.ActiveConns, d.InactiveConns = active, inactive
	return nil
}

// Service returns the service with key and its destinations sorted by address.
func (f *Fake) Service(key ServiceKey) (Service, []DestinationStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.services[key]
	if s == nil {
		return Service{}, nil, false
	}
	return s.svc, sortedDests(s), true
}

// ListServices is part of Interface.
func (f *Fake) ListServices() ([]Service, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Service, 0, len(f.services))
	for _, s := range f.services {
		out = append(out, s.svc)
	}
	slices.SortFunc(out, func(a, b Service) int { return compareKeys(a.ServiceKey, b.ServiceKey) })
	return out, nil
}

// AddService is part of Interface.
func (f *Fake) AddService(svc Service) error {
	return f.write("add-service", svc.ServiceKey, func() error {
		if f.services[svc.ServiceKey] != nil {
			return fmt.Errorf("adding IPVS service %s: %w", svc, ErrExists)
		}
		if !slices.Contains(Schedulers, svc.Scheduler) {
			return fmt.Errorf("adding IPVS service %s: unknown scheduler %q", svc, svc.Scheduler)
		}
		f.services[svc.ServiceKey] = &fakeService{svc: svc, dests: map[netip.AddrPort]*DestinationStatus{}}
		return nil
	})
}

// UpdateService is part of Interface.
func (f *Fake) UpdateService(svc Service) error {
	return f.write("update-service", svc.ServiceKey, func() error {
		s := f.services[svc.ServiceKey]
		if s == nil {
			return fmt.Errorf("updating IPVS service %s: %w", svc, ErrNotFound)
		}
		s.svc = svc
		return nil
	})
}

// DeleteService is part of Interface.
func (f *Fake) DeleteService(key ServiceKey) error {
	return f.write("delete-service", key, func() error {
		if f.services[key] == nil {
			return fmt.Errorf("deleting IPVS service %s: %w", key, ErrNotFound)
		}
		delete(f.services, key)
		return nil
	})
}

// ListDestinations is part of Interface.
func (f *Fake) ListDestinations(key ServiceKey) ([]DestinationStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.services[key]
	if s == nil {
		return nil, fmt.Errorf("listing destinations of %s: %w", key, ErrNotFound)
	}
	return sortedDests(s), nil
}

// AddDestination is part of Interface.
func (f *Fake) AddDestination(key ServiceKey, dst Destination) error {
	return f.write("add-destination", key, func() error {
		s := f.services[key]
		if s == nil {
			return fmt.Errorf("adding destination to %s: %w", key, ErrNotFound)
		}
		if s.dests[dst.Addr] != nil {
			return fmt.Errorf("adding destination %s to %s: %w", dst.Addr, key, ErrExists)
		}
		s.dests[dst.Addr] = &DestinationStatus{Destination: dst}
		return nil
	})
}

// UpdateDestination is part of Interface.
func (f *Fake) UpdateDestination(key ServiceKey, dst Destination) error {
	return f.write("update-destination", key, func() error {
		d, err := f.dest(key, dst.Addr)
		if err != nil {
			return err
		}
		d.Destination = dst
		return nil
	})
}

// DeleteDestination is part of Interface.
func (f *Fake) DeleteDestination(key ServiceKey, addr netip.AddrPort) error {
	return f.write("delete-destination", key, func() error {
		if _, err := f.dest(key, addr); err != nil {
			return err
		}
		delete(f.services[key].dests, addr)
		return nil
	})
}

// SetTimeouts is part of Interface.
func (f *Fake) SetTimeouts(t Timeouts) error {
	return f.write("set-timeouts", ServiceKey{}, func() error {
		f.timeouts = t
		return nil
	})
}

// Dump prints the table like "ipvsadm -Ln", one service per line followed
// by its destinations, sorted; tests compare it.
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]ServiceKey, 0, len(f.services))
	for k := range f.services {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	var b strings.Builder
	for _, k := range keys {
		s := f.services[k]
		fmt.Fprintf(&b, "%s %s", k, s.svc.Scheduler)
		if s.svc.Flags&FlagPersistent != 0 {
			fmt.Fprintf(&b, " persistent %d", s.svc.Timeout)
		}
		b.WriteString("\n")
		for _, d := range sortedDests(s) {
			fmt.Fprintf(&b, "  -> %s weight %d\n", d.Addr, d.Weight)
		}
	}
	return b.String()
}

func (f *Fake) write(op string, key ServiceKey, do func() error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.FailOn != nil {
		if err := f.FailOn(op, key); err != nil {
			return err
		}
	}
	if err := do(); err != nil {
		return err
	}
	f.writes++
	return nil
}

func (f *Fake) dest(key ServiceKey, addr netip.AddrPort) (*DestinationStatus, error) {
	s := f.services[key]
	if s == nil {
		return nil, fmt.Errorf("IPVS service %s: %w", key, ErrNotFound)
	}
	d := s.dests[addr]
	if d == nil {
		return nil, fmt.Errorf("destination %s of %s: %w", addr, key, ErrNotFound)
	}
	return d, nil
}

func sortedDests(s *fakeService) []DestinationStatus {
	out := make([]DestinationStatus, 0, len(s.dests))
	for _, d := range s.dests {
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b DestinationStatus) int { return a.Addr.Compare(b.Addr) })
	return out
}

func compareKeys(a, b ServiceKey) int {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	if a.Protocol != b.Protocol {
		return int(a.Protocol) - int(b.Protocol)
	}
	return int(a.Port) - int(b.Port)
}

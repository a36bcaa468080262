package kipvs

import (
	"errors"
	"net/netip"
	"testing"
)

func TestFakeLifecycle(t *testing.T) {
	f := NewFake()
	key := ServiceKey{Addr: netip.MustParseAddr("172.30.0.1"), Protocol: TCP, Port: 80}
	if err := f.AddService(Service{ServiceKey: key, Scheduler: "bogus"}); err == nil {
		t.Fatal("unknown scheduler accepted")
	}
	if err := f.AddService(Service{ServiceKey: key, Scheduler: RoundRobin}); err != nil {
		t.Fatal(err)
	}
	if err := f.AddService(Service{ServiceKey: key, Scheduler: RoundRobin}); !errors.Is(err, ErrExists) {
		t.Fatalf("second add: %v, want ErrExists", err)
	}
	ep := netip.MustParseAddrPort("10.0.1.1:8080")
	if err := f.AddDestination(key, Destination{Addr: ep, Weight: 1}); err != nil {
		t.Fatal(err)
	}
	if err := f.UpdateService(Service{ServiceKey: key, Scheduler: LeastConnection, Flags: FlagPersistent, Timeout: 30}); err != nil {
		t.Fatal(err)
	}
	if err := f.SetConnections(key, ep, 2, 1); err != nil {
		t.Fatal(err)
	}
	dests, err := f.ListDestinations(key)
	if err != nil || len(dests) != 1 || dests[0].ActiveConns != 2 || dests[0].InactiveConns != 1 {
		t.Fatalf("destinations %+v, %v", dests, err)
	}
	want := "tcp 172.30.0.1:80 lc persistent 30\n  -> 10.0.1.1:8080 weight 1\n"
	if got := f.Dump(); got != want {
		t.Errorf("Dump:\n%s\nwant:\n%s", got, want)
	}
	if err := f.DeleteDestination(key, ep); err != nil {
		t.Fatal(err)
	}
	if err := f.DeleteDestination(key, ep); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
	if err := f.DeleteService(key); err != nil {
		t.Fatal(err)
	}
	if got := f.Writes(); got != 5 {
		t.Errorf("Writes = %d, want 5 (add, add dest, update, del dest, del svc)", got)
	}
}

func TestFakeFailOn(t *testing.T) {
	f := NewFake()
	boom := errors.New("boom")
	f.FailOn = func(op string, _ ServiceKey) error {
		if op == "add-service" {
			return boom
		}
		return nil
	}
	err := f.AddService(Service{ServiceKey: ServiceKey{Addr: netip.MustParseAddr("::1"), Protocol: UDP, Port: 53}, Scheduler: RoundRobin})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
	if svcs, _ := f.ListServices(); len(svcs) != 0 || f.Writes() != 0 {
		t.Errorf("failed add left %v, %d writes", svcs, f.Writes())
	}
}

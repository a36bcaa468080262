package model

import (
	"fmt"
	"maps"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// fuzzBytes hands out fuzz input a byte at a time; past the end it yields 0.
type fuzzBytes struct{ data []byte }

func (f *fuzzBytes) next() int {
	if len(f.data) == 0 {
		return 0
	}
	b := f.data[0]
	f.data = f.data[1:]
	return int(b)
}

func (f *fuzzBytes) pick(choices ...string) string { return choices[f.next()%len(choices)] }

func (f *fuzzBytes) empty() bool { return len(f.data) == 0 }

var (
	fuzzIPs       = []string{"172.30.0.1", "172.30.0.2", "fd00:30::1", "", "None", "bogus", "::ffff:172.30.0.3"}
	fuzzEPs       = []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "fd00:10::1", "nope", ""}
	fuzzProtocols = []string{"TCP", "UDP", "SCTP", "", "ICMP"}
	fuzzPortNames = []string{"", "http", "dns"}
	fuzzTypes     = []string{"ClusterIP", "NodePort", "LoadBalancer", "ExternalName"}
)

func fuzzService(f *fuzzBytes, name string) *v1.Service {
	svc := makeService("ns", name, nil)
	svc.Spec.Type = v1.ServiceType(f.pick(fuzzTypes...))
	svc.Spec.ClusterIP = f.pick(fuzzIPs...)
	svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP, f.pick(fuzzIPs...)}
	svc.Spec.ExternalIPs = []string{f.pick(fuzzIPs...)}
	svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicy(f.pick("Cluster", "Local"))
	svc.Spec.LoadBalancerSourceRanges = []string{f.pick(" 10.0.0.0/8", "fd00::/8", "x/33")}
	svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: f.pick(fuzzIPs...)}}
	svc.Spec.Ports = nil
	for range f.next() % 3 {
		svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{
			Name:     f.pick(fuzzPortNames...),
			Protocol: v1.Protocol(f.pick(fuzzProtocols...)),
			Port:     int32(f.next()*300 - 1000),
			NodePort: int32(f.next() * 300),
		})
	}
	return svc
}

func fuzzSlice(f *fuzzBytes, name string) *discoveryv1.EndpointSlice {
	owner := f.pick("s0", "s1", "s2", "")
	slice := makeSlice("ns", name, owner, nil, nil)
	slice.AddressType = discoveryv1.AddressType(f.pick("IPv4", "IPv6", "FQDN"))
	slice.Ports = nil
	for range f.next() % 3 {
		var port *int32
		if n := f.next(); n%5 != 0 {
			port = ptrTo(int32(n*300 - 1000))
		}
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{
			Name: ptrTo(f.pick(fuzzPortNames...)), Protocol: ptrTo(v1.Protocol(f.pick(fuzzProtocols...))), Port: port,
		})
	}
	for range f.next() % 4 {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{f.pick(fuzzEPs...)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(f.next()%2 == 0)},
		})
	}
	return slice
}

// FuzzTracker feeds arbitrary event sequences to a Tracker and checks, at
// each commit, that the snapshot is well formed, equals what a fresh tracker
// builds from the same final objects, reports exactly the ports that differ
// from the previous snapshot, and that the previous snapshot did not change.
func FuzzTracker(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		in := &fuzzBytes{data: data}
		family := proxy.Families[in.next()%2]
		tr := NewTracker(family)
		services := map[string]*v1.Service{}
		slices := map[string]*discoveryv1.EndpointSlice{}
		prev, _ := tr.Commit()
		prevContent := snapshotContent(prev)
		for !in.empty() {
			switch op := in.next() % 5; op {
			case 0, 1:
				name := fmt.Sprintf("s%d", in.next()%3)
				var svc *v1.Service
				if op == 0 {
					svc = fuzzService(in, name)
				}
				tr.OnServiceUpdate(services[name], svc)
				storeObject(services, name, svc)
			case 2, 3:
				name := fmt.Sprintf("e%d", in.next()%4)
				var slice *discoveryv1.EndpointSlice
				if op == 2 {
					slice = fuzzSlice(in, name)
				}
				tr.OnEndpointSliceUpdate(slices[name], slice)
				storeObject(slices, name, slice)
			case 4:
				prev, prevContent = checkCommit(t, tr, prev, prevContent, services, slices)
			}
		}
		checkCommit(t, tr, prev, prevContent, services, slices)
	})
}

func storeObject[T any](m map[string]*T, name string, obj *T) {
	if obj == nil {
		delete(m, name)
		return
	}
	m[name] = obj
}

func checkCommit(t *testing.T, tr *Tracker, prev *Snapshot, prevContent map[entryKey]string,
	services map[string]*v1.Service, slices map[string]*discoveryv1.EndpointSlice) (*Snapshot, map[entryKey]string) {
	t.Helper()
	snap, ch := tr.Commit()
	checkSnapshot(t, snap)
	if got := snapshotContent(prev); !maps.Equal(got, prevContent) {
		t.Fatalf("the previous snapshot changed after Commit")
	}
	content := snapshotContent(snap)

	fresh := NewTracker(tr.family)
	for _, s := range services {
		fresh.OnServiceUpdate(nil, s)
	}
	for _, s := range slices {
		fresh.OnEndpointSliceUpdate(nil, s)
	}
	freshSnap, _ := fresh.Commit()
	if want := snapshotContent(freshSnap); !maps.Equal(content, want) {
		t.Fatalf("incremental snapshot differs from a fresh one:\n got %v\nwant %v", content, want)
	}

	differs := map[proxy.ServicePortName]bool{}
	for key := range content {
		differs[key.name] = differs[key.name] || content[key] != prevContent[key]
	}
	for key := range prevContent {
		differs[key.name] = differs[key.name] || content[key] != prevContent[key]
	}
	for name, d := range differs {
		if _, reported := ch.Changed[name]; d != reported {
			t.Fatalf("%v: differs=%v but reported=%v", name, d, reported)
		}
	}
	for name := range ch.Changed {
		if !differs[name] {
			t.Fatalf("%v reported changed but is identical", name)
		}
	}
	return snap, content
}

// entryKey names one entry of a snapshot.
type entryKey struct {
	endpoints bool
	name      proxy.ServicePortName
}

// snapshotContent renders a snapshot as comparable strings, one per entry.
func snapshotContent(s *Snapshot) map[entryKey]string {
	out := map[entryKey]string{}
	for name, sp := range s.Services.All() {
		out[entryKey{name: name}] = fmt.Sprintf("%+v", *sp)
	}
	for name, eps := range s.Endpoints.All() {
		var text string
		for i := range eps.Len() {
			text += fmt.Sprintf("%+v;", eps.At(i))
		}
		out[entryKey{endpoints: true, name: name}] = text
	}
	return out
}

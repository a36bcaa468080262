//go:build benche2e

package bench

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes/scheme"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// Seeding past -seed-api Services through the API would take most of an
// hour at 50k: kube-apiserver's ClusterIP allocator counts every IPAddress
// object twice after each allocation, dynamic or static
// (ipallocator.createIPAddress → Used, Free), so n creates cost O(n²) and no
// client-side choice (explicit clusterIPs, more clients) avoids it. The rest
// are written into etcd directly as copies of Service 0's three stored
// objects — Service, EndpointSlice and the allocator's IPAddress — each
// decoded from its stored bytes, given its own name, UID, ClusterIP and
// endpoint addresses, and encoded back in the same protobuf storage format.
// The API server then serves them as it serves the ones it created.
//
// They are written into each run's etcd after its API server is up, not
// kept in the cached seed: an API server that starts over 100k Services
// must fill its watch caches and finish its first ClusterIP and node-port
// repair pass within a fixed minute of its start or it exits ("unable to
// perform initial IP and Port allocation check"), which a loaded 2-CPU
// machine misses. Written afterwards, the objects reach its watch caches
// as events, and its repair loop, past its first pass, checks each new
// Service against the IPAddress written before it.

// storageCodec is the API server's storage encoding (protobuf, "k8s\0").
var storageCodec = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)

// template is Service 0's stored objects and their etcd keys.
type template struct {
	svc       *corev1.Service
	slice     *discoveryv1.EndpointSlice
	ipAddr    *networkingv1.IPAddress
	svcKey    string
	sliceKey  string
	ipAddrKey string
}

// fillCluster writes Services from..n-1 straight into the etcd of c, whose
// API server is up, and waits until it serves them all.
func fillCluster(t *testing.T, c *F.Cluster, from, n, eps int) {
	t0 := time.Now()
	tpl, err := loadTemplate(c)
	if err != nil {
		t.Fatalf("reading Service 0's stored objects: %v", err)
	}
	free, err := freeClusterIPs(c, n-from)
	if err != nil {
		t.Fatal(err)
	}
	const perBatch = 1000
	for i := from; i < n; i += perBatch {
		// IPAddresses first, in earlier transactions: the API server's
		// repair loop then finds each Service's address allocated.
		var addrs, objs []F.KV
		for j := i; j < min(n, i+perBatch); j++ {
			kv, err := tpl.clone(j, eps, free[j-from])
			if err != nil {
				t.Fatalf("cloning Service %d: %v", j, err)
			}
			addrs, objs = append(addrs, kv[2]), append(objs, kv[:2]...)
		}
		if err := c.PutRawBatch(append(addrs, objs...)); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("FILL: wrote Services %d…%d (+ slices, IPAddresses) into etcd in %v", from, n-1, time.Since(t0).Round(time.Second))
	waitServed(t, c, n+1)
	waitAllocated(t, c, n+1)
	t.Logf("FILL: served and allocated %v after the first write", time.Since(t0).Round(time.Second))
}

// loadTemplate reads Service 0, its slice and its IPAddress from etcd.
func loadTemplate(c *F.Cluster) (*template, error) {
	keys, err := c.GetRaw("/registry/", true)
	if err != nil {
		return nil, err
	}
	tpl := &template{svc: &corev1.Service{}, slice: &discoveryv1.EndpointSlice{}, ipAddr: &networkingv1.IPAddress{}}
	for _, kv := range keys {
		switch {
		case strings.HasPrefix(kv.Key, "/registry/services/specs/") && strings.HasSuffix(kv.Key, "/"+serviceName(0)):
			tpl.svcKey = kv.Key
		case strings.Contains(kv.Key, "/endpointslices/") && strings.HasSuffix(kv.Key, "/"+sliceName(0)):
			tpl.sliceKey = kv.Key
		}
	}
	if err := decodeKey(c, tpl.svcKey, tpl.svc); err != nil {
		return nil, err
	}
	if err := decodeKey(c, tpl.sliceKey, tpl.slice); err != nil {
		return nil, err
	}
	for _, kv := range keys {
		if strings.Contains(kv.Key, "/ipaddresses/") && strings.HasSuffix(kv.Key, "/"+tpl.svc.Spec.ClusterIP) {
			tpl.ipAddrKey = kv.Key
		}
	}
	if err := decodeKey(c, tpl.ipAddrKey, tpl.ipAddr); err != nil {
		return nil, err
	}
	return tpl, nil
}

func decodeKey(c *F.Cluster, key string, into runtime.Object) error {
	if key == "" {
		return fmt.Errorf("no key for a %T of Service 0 in etcd", into)
	}
	kvs, err := c.GetRaw(key, false) // key and the keys it is a prefix of
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		if kv.Key == key {
			_, _, err := storageCodec.Decode(kv.Value, nil, into)
			return err
		}
	}
	return fmt.Errorf("etcd has no %s", key)
}

// ipAddressGrace post-dates the copies' IPAddresses. The API server's IP
// repair loop deletes an IPAddress older than a minute whose Service its
// informer has not seen; while 100k Services stream in, that informer falls
// more than a minute behind the IPAddress one on a loaded machine, and the
// loop deletes IPAddresses it then has to recreate for their Services.
const ipAddressGrace = 10 * time.Minute

// clone returns the etcd writes of Service i, in this order: its Service,
// slice and IPAddress, copies of the template's with i's names and ip.
func (tpl *template) clone(i, eps int, ip netip.Addr) ([]F.KV, error) {
	// Created now, as each copy is; the IPAddress later (ipAddressGrace).
	now := metav1.Now()
	svc := tpl.svc.DeepCopy()
	svc.Name, svc.UID, svc.CreationTimestamp = serviceName(i), uuid.NewUUID(), now
	svc.Spec.ClusterIP, svc.Spec.ClusterIPs = ip.String(), []string{ip.String()}
	svc.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}

	slice := tpl.slice.DeepCopy()
	slice.Name, slice.UID, slice.CreationTimestamp = sliceName(i), uuid.NewUUID(), now
	slice.Labels[discoveryv1.LabelServiceName] = svc.Name
	want := benchSlice(i, eps)
	for k := range slice.Endpoints {
		slice.Endpoints[k].Addresses = want.Endpoints[k].Addresses
	}
	slice.TypeMeta = metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"}

	addr := tpl.ipAddr.DeepCopy()
	addr.Name, addr.UID, addr.CreationTimestamp = ip.String(), uuid.NewUUID(), metav1.NewTime(now.Add(ipAddressGrace))
	addr.Spec.ParentRef.Name = svc.Name
	addr.TypeMeta = metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "IPAddress"}

	var kvs []F.KV
	for _, o := range []struct {
		key string
		obj runtime.Object
	}{
		{strings.TrimSuffix(tpl.svcKey, serviceName(0)) + svc.Name, svc},
		{strings.TrimSuffix(tpl.sliceKey, sliceName(0)) + slice.Name, slice},
		{strings.TrimSuffix(tpl.ipAddrKey, tpl.svc.Spec.ClusterIP) + addr.Name, addr},
	} {
		var b strings.Builder
		if err := storageCodec.Encode(o.obj, &b); err != nil {
			return nil, err
		}
		kvs = append(kvs, F.KV{Key: o.key, Value: []byte(b.String())})
	}
	return kvs, nil
}

// freeClusterIPs returns n addresses of the service range no Service holds.
func freeClusterIPs(c *F.Cluster, n int) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(context.Background(), listAllTimeout)
	defer cancel()
	cs, err := fastClient(c.AdminConfig) // protobuf, a longer timeout: 100k Services
	if err != nil {
		return nil, err
	}
	list, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Services: %w", err)
	}
	used := map[netip.Addr]bool{}
	for _, s := range list.Items {
		if a, err := netip.ParseAddr(s.Spec.ClusterIP); err == nil {
			used[a] = true
		}
	}
	cidr := netip.MustParsePrefix(c.ServiceCIDR4())
	var out []netip.Addr
	// The range's first address (network) and last (broadcast) are never given.
	for a := cidr.Addr().Next(); cidr.Contains(a.Next()) && len(out) < n; a = a.Next() {
		if !used[a] {
			out = append(out, a)
		}
	}
	if len(out) < n {
		return nil, fmt.Errorf("service range %s has %d free addresses, %d wanted", c.ServiceCIDR4(), len(out), n)
	}
	return out, nil
}

// waitServed waits until the API server lists want Services (its watch
// cache follows etcd).
func waitServed(t *testing.T, c *F.Cluster, want int) {
	cs := mustFastClient(t, c)
	waitListed(t, "Services", want, 0, func(ctx context.Context) (int, error) {
		list, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		return len(list.Items), nil
	})
}

// waitAllocated waits until the API server lists want IPAddresses and that
// number has held for a while: its IP repair loop has nothing left to
// repair or clean up, so the proxy starts against a consistent cluster.
func waitAllocated(t *testing.T, c *F.Cluster, want int) {
	cs := mustFastClient(t, c)
	waitListed(t, "IPAddresses", want, 10*time.Second, func(ctx context.Context) (int, error) {
		list, err := cs.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		return len(list.Items), nil
	})
}

// waitListed polls count until it returns want and has for stableFor.
// The limits are wide: just after 100k Services were written behind its
// back, a loaded API server takes minutes to catch up and a list of them
// longer than a minute.
func waitListed(t *testing.T, what string, want int, stableFor time.Duration, count func(context.Context) (int, error)) {
	deadline := time.Now().Add(15 * time.Minute)
	stable := time.Time{}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), listAllTimeout)
		got, err := count(ctx)
		cancel()
		switch {
		case err != nil || got != want:
			stable = time.Time{}
		case stable.IsZero():
			stable = time.Now()
		}
		if !stable.IsZero() && time.Since(stable) >= stableFor {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server lists %d %s (err %v), want %d", got, what, err, want)
		}
		time.Sleep(2 * time.Second)
	}
}

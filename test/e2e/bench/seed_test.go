//go:build benche2e

package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// seedVersion names the shape of the seeded objects. Bump it whenever
// benchService or benchSlice change, so that an old seed is not reused.
const seedVersion = 1

// Endpoint addresses come from the benchmarking range 198.18.0.0/15, as in
// make bench, above the framework's node, external and LB networks
// (198.18.0-2.x): 100k seeded endpoints end at 198.19.134.159, churned ones
// start at 198.19.160.0. Past 10k × 10 both run on above 198.19.255.255
// (churned ones 64Ki addresses after the seeded ones); only in the node's
// rules: no traffic is ever sent to them.
var (
	endpointBase = netip.MustParseAddr("198.18.16.0")
	churnBase0   = netip.MustParseAddr("198.19.160.0")
)

// churnBase is the first churned endpoint address, above every seeded one.
func churnBase() netip.Addr {
	if last := netip.MustParseAddr(addrAt(endpointBase, *flagServices**flagEndpoints)); last.Less(churnBase0) {
		return churnBase0
	}
	return netip.MustParseAddr(addrAt(endpointBase, *flagServices**flagEndpoints+1<<16))
}

func addrAt(base netip.Addr, n int) string {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}).String()
}

func serviceName(i int) string { return fmt.Sprintf("bench-%05d", i) }
func sliceName(i int) string   { return serviceName(i) + "-1" }

// benchService is a selector-less ClusterIP Service with one TCP port (the
// API server allocates the IP from the framework's 10.96.0.0/16; node ports
// would run out at 2,768).
func benchService(i int) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: serviceName(i), Namespace: F.Namespace},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{
			{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
}

// benchSlice is Service i's one EndpointSlice: eps ready endpoints, no node
// name, no trigger-time annotation (the seed's creation is not a change the
// benchmark measures).
func benchSlice(i, eps int) *discoveryv1.EndpointSlice {
	name, port, proto := "http", int32(8080), corev1.ProtocolTCP
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: sliceName(i), Namespace: F.Namespace, Labels: map[string]string{
			discoveryv1.LabelServiceName: serviceName(i),
			discoveryv1.LabelManagedBy:   "bench-e2e.svcproxy.test",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	ready := true
	for k := 0; k < eps; k++ {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{addrAt(endpointBase, i*eps+k)},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
		})
	}
	return s
}

// seedPath is where the seeded etcd data dir is cached: keyed by the seed's
// shape (the Services it holds and the service range they were given from)
// and by the control plane build (its dir name carries the Kubernetes
// version and the hash of the wrapper modules), since another etcd or
// apiserver may not read the data the same way.
func seedPath(services int) (string, error) {
	cpBin := os.Getenv("CP_BIN")
	if cpBin == "" {
		return "", errors.New("CP_BIN is not set: run through hack/bench-e2e.sh (make bench-e2e)")
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("seed-v%d-%dx%d-%s", seedVersion, seededViaAPI(services), *flagEndpoints, filepath.Base(cpBin))
	if serviceCIDRFor(services) != "" {
		// The same count from the larger range is another seed.
		name = fmt.Sprintf("seed-v%d-%dx%d-cidr12-%s", seedVersion, seededViaAPI(services), *flagEndpoints, filepath.Base(cpBin))
	}
	return filepath.Join(root, "_output", "bench-e2e", name), nil
}

// seededViaAPI is how many of a cluster's services Services the cached
// seed holds: those created through the API. The rest are written into
// each run's etcd once its API server is up (fillCluster).
func seededViaAPI(services int) int { return min(services, max(*flagSeedAPI, 1)) }

// ensureSeed returns the seeded etcd data dir of services Services,
// creating it first when no earlier run left one.
func ensureSeed(t *testing.T, services int) string {
	dir, err := seedPath(services)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Logf("reusing the seeded etcd data dir %s", dir)
		return dir
	}
	t.Run("seed-"+filepath.Base(dir), func(t *testing.T) { seed(t, dir, services) })
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("no seed after seeding: %v", err)
	}
	return dir
}

// seed creates the API part of the Services and slices through the API of a
// fresh cluster, stops etcd for a consistent copy and keeps its data dir.
// The copy goes to a temporary name first, so an interrupted seed is never
// reused.
func seed(t *testing.T, dir string, services int) {
	c := F.New(t, F.Options{Mode: "nftables", Nodes: 1, NoProxy: true, ServiceCIDR: serviceCIDRFor(services)})
	cs, err := fastClient(c.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	viaAPI := seededViaAPI(services)
	if err := createAll(ctx, cs, viaAPI, *flagEndpoints, t.Logf); err != nil {
		t.Fatalf("seeding: %v", err)
	}
	t.Logf("SEED: created %d Services + %d EndpointSlices through the API in %v",
		viaAPI, viaAPI, time.Since(t0).Round(time.Second))
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", c.EtcdDataDir(), tmp).CombinedOutput(); err != nil {
		t.Fatalf("copying the etcd data dir: %v: %s", err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	t.Logf("seeded etcd data dir kept in %s", dir)
}

// bigServiceCIDR is kube-apiserver's largest IPv4 service range (20 host
// bits), 10.96.0.0/12 as kubeadm's default; the framework's /16 holds
// 65,534 ClusterIPs.
const bigServiceCIDR = "10.96.0.0/12"

// serviceCIDRFor is the service range of a cluster of services Services:
// the framework's default while it holds them, else bigServiceCIDR. The
// seed and every cluster started from it must agree: the seed's Services
// hold addresses of its range.
func serviceCIDRFor(services int) string {
	if services > 65000 {
		return bigServiceCIDR
	}
	return ""
}

// listAllTimeout bounds a list of every Service or slice: at 100k on a
// loaded 2-CPU machine one takes more than a minute.
const listAllTimeout = 3 * time.Minute

// fastClient is an admin client without client-side throttling, speaking
// protobuf: the seed is 20k creates.
func fastClient(base *rest.Config) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(base)
	cfg.QPS, cfg.Burst = 5000, 10000
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.Timeout = listAllTimeout
	return kubernetes.NewForConfig(cfg)
}

// mustFastClient is fastClient for the lists of every Service or
// IPAddress: at 100k Services a JSON list outlasts the admin client's
// 20 s timeout on a loaded machine.
func mustFastClient(t *testing.T, c *F.Cluster) kubernetes.Interface {
	cs, err := fastClient(c.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// createAll creates Services 0..n-1 and their slices with 32 workers (the
// API server's per-Service ClusterIP allocation is the bottleneck, see
// shared/reference/control-plane.md, section 4).
func createAll(ctx context.Context, cs kubernetes.Interface, n, eps int, logf func(string, ...any)) error {
	const workers = 32
	jobs := make(chan int)
	var firstErr error
	var once sync.Once
	var done atomic.Int64
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := createOne(ctx, cs, i, eps); err != nil {
					once.Do(func() { firstErr = err; cancel() })
					continue
				}
				if d := done.Add(1); d%1000 == 0 {
					logf("seed: %d/%d Services after %v", d, n, time.Since(t0).Round(time.Second))
				}
			}
		}()
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return firstErr
}

// createOne creates Service i and its slice. A retry after a timed-out
// create may find the object there already; that counts as created.
func createOne(ctx context.Context, cs kubernetes.Interface, i, eps int) error {
	err := retry(ctx, func() error {
		_, err := cs.CoreV1().Services(F.Namespace).Create(ctx, benchService(i), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("Service %s: %w", serviceName(i), err)
	}
	err = retry(ctx, func() error {
		_, err := cs.DiscoveryV1().EndpointSlices(F.Namespace).Create(ctx, benchSlice(i, eps), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("EndpointSlice %s: %w", sliceName(i), err)
	}
	return nil
}

func retry(ctx context.Context, f func() error) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		err = f()
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (after %v)", ctx.Err(), err)
		case <-time.After(time.Duration(attempt+1) * 500 * time.Millisecond):
		}
	}
	return err
}

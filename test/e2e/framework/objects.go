package framework

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Namespace holds every Service and EndpointSlice of the suite. No
// controller-manager runs: the tests write EndpointSlices themselves, as
// the EndpointSlice controller would.
const Namespace = "default"

// WebPorts: HTTP over TCP and a UDP echo, both port 80 → podserver's 8080.
var WebPorts = []corev1.ServicePort{
	{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)},
	{Name: "echo", Protocol: corev1.ProtocolUDP, Port: 80, TargetPort: intstr.FromInt32(8080)},
}

// NewService returns a selector-less Service with WebPorts; mutate it
// before CreateService.
func NewService(name string, typ corev1.ServiceType) *corev1.Service {
	ports := make([]corev1.ServicePort, len(WebPorts))
	copy(ports, WebPorts)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
		Spec:       corev1.ServiceSpec{Type: typ, Ports: ports},
	}
}

// CreateService creates svc and returns it as stored (ClusterIP, node ports).
func (c *Cluster) CreateService(svc *corev1.Service) *corev1.Service {
	c.T.Helper()
	ctx, cancel := c.Ctx(20 * time.Second)
	defer cancel()
	out, err := c.Admin.CoreV1().Services(Namespace).Create(ctx, svc, metav1.CreateOptions{})
	c.must(err, "creating Service "+svc.Name)
	return out
}

// UpdateService reads the Service, applies mutate and writes it back.
func (c *Cluster) UpdateService(name string, mutate func(*corev1.Service)) *corev1.Service {
	c.T.Helper()
	ctx, cancel := c.Ctx(20 * time.Second)
	defer cancel()
	svc, err := c.Admin.CoreV1().Services(Namespace).Get(ctx, name, metav1.GetOptions{})
	c.must(err, "getting Service "+name)
	mutate(svc)
	out, err := c.Admin.CoreV1().Services(Namespace).Update(ctx, svc, metav1.UpdateOptions{})
	c.must(err, "updating Service "+name)
	return out
}

// SetLoadBalancerIP writes status.loadBalancer.ingress, as a cloud
// controller would.
func (c *Cluster) SetLoadBalancerIP(svc *corev1.Service, ip string) *corev1.Service {
	c.T.Helper()
	ctx, cancel := c.Ctx(20 * time.Second)
	defer cancel()
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
	out, err := c.Admin.CoreV1().Services(Namespace).UpdateStatus(ctx, svc, metav1.UpdateOptions{})
	c.must(err, "setting the LB IP of "+svc.Name)
	return out
}

// DeleteService deletes the Service (and its slices, which no garbage
// collector would remove here).
func (c *Cluster) DeleteService(name string) {
	c.T.Helper()
	ctx, cancel := c.Ctx(20 * time.Second)
	defer cancel()
	err := c.Admin.CoreV1().Services(Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	c.must(err, "deleting Service "+name)
	for _, slice := range []string{name + "-e2e", name + "-e2e-v6"} {
		err = c.Admin.DiscoveryV1().EndpointSlices(Namespace).Delete(ctx, slice, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			c.must(err, "deleting the slice "+slice)
		}
	}
}

// NewServiceAnswers creates a ClusterIP Service with one endpoint, a new
// pod on node n, and returns how soon after its EndpointSlice's creation
// it answered from the pod client on node 1, or an error when it did not
// within limit: how fast a proxy that just started follows the API.
func (c *Cluster) NewServiceAnswers(n *Node, name string, limit time.Duration) (time.Duration, error) {
	c.T.Helper()
	pod := c.AddPod(n, "p"+name)
	svc := c.CreateService(NewService(name, corev1.ServiceTypeClusterIP))
	t0 := time.Now()
	c.SetEndpoints(svc, EP{Pod: pod})
	err := c.EventuallyWithin("cli1", TCP(svc.Spec.ClusterIP, 80), 1, 300*time.Millisecond, limit, OnlyBy(pod.Name))
	return time.Since(t0), err
}

// EP is one endpoint of a slice. The zero value is a ready endpoint.
type EP struct {
	Pod         *Pod
	NotReady    bool   // ready=false
	Terminating bool   // terminating=true (serving stays true unless NotServing)
	NotServing  bool   // serving=false
	ZoneHint    string // hints.forZones
	Address     string // overrides Pod.IP (malformed-slice tests)
}

func (e EP) endpoint() discoveryv1.Endpoint {
	ready, serving, term := !e.NotReady, !e.NotServing, e.Terminating
	addr := e.Address
	if addr == "" {
		addr = e.Pod.IP
	}
	node, zone := e.Pod.Node.Name, e.Pod.Node.Zone
	ep := discoveryv1.Endpoint{
		Addresses:  []string{addr},
		Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &term},
		NodeName:   &node,
		Zone:       &zone,
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: Namespace, Name: e.Pod.Name},
	}
	if e.ZoneHint != "" {
		ep.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: e.ZoneHint}}}
	}
	return ep
}

// Slice builds the EndpointSlice "<svc>-e2e" for the Service's ports.
func Slice(svc *corev1.Service, eps ...EP) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name + "-e2e", Namespace: Namespace, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc.Name,
			discoveryv1.LabelManagedBy:   "e2e.svcproxy.test",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{},
	}
	for _, e := range eps {
		s.Endpoints = append(s.Endpoints, e.endpoint())
	}
	for _, p := range svc.Spec.Ports {
		name, port, proto := p.Name, p.TargetPort.IntVal, p.Protocol
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: &name, Port: &port, Protocol: &proto})
	}
	return s
}

// Slice6 is Slice for the IPv6 family: "<svc>-e2e-v6", addressType IPv6,
// the pods' IPv6 addresses. A dual-stack Service has one slice per family,
// as the EndpointSlice controller writes them.
func Slice6(svc *corev1.Service, eps ...EP) *discoveryv1.EndpointSlice {
	v6 := make([]EP, len(eps))
	for i, e := range eps {
		if e.Address == "" {
			e.Address = e.Pod.IP6
		}
		v6[i] = e
	}
	s := Slice(svc, v6...)
	s.Name += "-v6"
	s.AddressType = discoveryv1.AddressTypeIPv6
	return s
}

// SetEndpoints creates or replaces the Service's slice with eps.
func (c *Cluster) SetEndpoints(svc *corev1.Service, eps ...EP) {
	c.T.Helper()
	c.must(c.ApplySlice(Slice(svc, eps...)), fmt.Sprintf("endpoints of %s", svc.Name))
}

// SetEndpoints6 creates or replaces the Service's IPv6 slice with eps.
func (c *Cluster) SetEndpoints6(svc *corev1.Service, eps ...EP) {
	c.T.Helper()
	c.must(c.ApplySlice(Slice6(svc, eps...)), fmt.Sprintf("IPv6 endpoints of %s", svc.Name))
}

// ApplySlice creates or replaces an EndpointSlice as given.
func (c *Cluster) ApplySlice(want *discoveryv1.EndpointSlice) error {
	ctx, cancel := c.Ctx(20 * time.Second)
	defer cancel()
	slices := c.Admin.DiscoveryV1().EndpointSlices(Namespace)
	cur, err := slices.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = slices.Create(ctx, want, metav1.CreateOptions{})
	case err == nil:
		want.ResourceVersion = cur.ResourceVersion
		_, err = slices.Update(ctx, want, metav1.UpdateOptions{})
	}
	return err
}

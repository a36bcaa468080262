package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

const managedBy = "e2ectl.svcproxy.test"

// nodesCmd creates or updates one Node per NAME=IP[,PODCIDR] argument.
func nodesCmd(ctx context.Context, cs *kubernetes.Clientset, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("no nodes given")
	}
	for _, a := range args {
		name, rest, ok := strings.Cut(a, "=")
		if !ok || name == "" {
			return fmt.Errorf("bad node %q, want NAME=IP[,PODCIDR]", a)
		}
		ip, podCIDR, _ := strings.Cut(rest, ",")
		if _, err := netip.ParseAddr(ip); err != nil {
			return fmt.Errorf("node %s: %v", name, err)
		}
		if err := applyNode(ctx, cs, name, ip, podCIDR); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		fmt.Printf("node %s: InternalIP %s podCIDR %s\n", name, ip, podCIDR)
	}
	return nil
}

func applyNode(ctx context.Context, cs *kubernetes.Clientset, name, ip, podCIDR string) error {
	want := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
		}},
	}
	if podCIDR != "" {
		want.Spec.PodCIDR = podCIDR
		want.Spec.PodCIDRs = []string{podCIDR}
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		node, err = cs.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{})
	case err == nil:
		node.Labels = want.Labels
		node.Spec.PodCIDR, node.Spec.PodCIDRs = want.Spec.PodCIDR, want.Spec.PodCIDRs
		node, err = cs.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	// No kubelet runs: set what it would report.
	node.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: ip},
		{Type: corev1.NodeHostName, Address: name},
	}
	node.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "E2E",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
	}}
	_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	return err
}

// portSpec is one port of -ports: NAME/PROTO/PORT/TARGETPORT[/NODEPORT].
type portSpec struct {
	name     string
	proto    corev1.Protocol
	port     int32
	target   int32
	nodePort int32
}

func parsePorts(list string) ([]portSpec, error) {
	var out []portSpec
	for _, item := range strings.Split(list, ",") {
		f := strings.Split(item, "/")
		if len(f) < 4 || len(f) > 5 {
			return nil, fmt.Errorf("bad port %q, want NAME/PROTO/PORT/TARGETPORT[/NODEPORT]", item)
		}
		var nums [3]int32
		for i, v := range f[2:] {
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil || n < 0 || n > 65535 {
				return nil, fmt.Errorf("bad port number %q in %q", v, item)
			}
			nums[i] = int32(n)
		}
		proto := corev1.Protocol(strings.ToUpper(f[1]))
		if proto != corev1.ProtocolTCP && proto != corev1.ProtocolUDP && proto != corev1.ProtocolSCTP {
			return nil, fmt.Errorf("bad protocol %q in %q", f[1], item)
		}
		out = append(out, portSpec{name: f[0], proto: proto, port: nums[0], target: nums[1], nodePort: nums[2]})
	}
	return out, nil
}

// serviceCmd creates or updates a NodePort Service and prints its ClusterIP.
func serviceCmd(ctx context.Context, cs *kubernetes.Clientset, ns string, args []string) error {
	fs := flag.NewFlagSet("service", flag.ContinueOnError)
	name := fs.String("name", "", "service name")
	ports := fs.String("ports", "http/TCP/80/8080", "ports: NAME/PROTO/PORT/TARGETPORT[/NODEPORT],...")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" {
		return fmt.Errorf("-name is required")
	}
	specs, err := parsePorts(*ports)
	if err != nil {
		return err
	}
	var sps []corev1.ServicePort
	for _, p := range specs {
		sps = append(sps, corev1.ServicePort{
			Name: p.name, Protocol: p.proto, Port: p.port,
			TargetPort: intstr.FromInt32(p.target), NodePort: p.nodePort,
		})
	}
	svcs := cs.CoreV1().Services(ns)
	svc, err := svcs.Get(ctx, *name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		svc, err = svcs.Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: *name},
			Spec: corev1.ServiceSpec{
				Type:  corev1.ServiceTypeNodePort,
				Ports: sps,
				// No selector: the EndpointSlice is managed by e2ectl, as no controller runs.
			},
		}, metav1.CreateOptions{})
	case err == nil:
		svc.Spec.Type = corev1.ServiceTypeNodePort
		svc.Spec.Ports = sps
		svc, err = svcs.Update(ctx, svc, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	fmt.Println(svc.Spec.ClusterIP)
	return nil
}

// endpointsCmd sets the EndpointSlice "<service>-e2e" to the given ready endpoints.
func endpointsCmd(ctx context.Context, cs *kubernetes.Clientset, ns string, args []string) error {
	fs := flag.NewFlagSet("endpoints", flag.ContinueOnError)
	service := fs.String("service", "", "service name")
	ports := fs.String("ports", "http/TCP/80/8080", "the Service's ports (same syntax as for service; TARGETPORT is used)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *service == "" {
		return fmt.Errorf("-service is required")
	}
	specs, err := parsePorts(*ports)
	if err != nil {
		return err
	}
	ready := true
	var eps []discoveryv1.Endpoint
	for _, a := range fs.Args() {
		pod, rest, ok1 := strings.Cut(a, "=")
		ip, node, ok2 := strings.Cut(rest, "@")
		if !ok1 || !ok2 {
			return fmt.Errorf("bad endpoint %q, want POD=IP@NODE", a)
		}
		if _, err := netip.ParseAddr(ip); err != nil {
			return fmt.Errorf("endpoint %s: %v", pod, err)
		}
		eps = append(eps, discoveryv1.Endpoint{
			Addresses:  []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready},
			NodeName:   &node,
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod},
		})
	}
	var eports []discoveryv1.EndpointPort
	for _, p := range specs {
		eports = append(eports, discoveryv1.EndpointPort{Name: &p.name, Port: &p.target, Protocol: &p.proto})
	}
	want := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: *service + "-e2e",
			Labels: map[string]string{
				discoveryv1.LabelServiceName: *service,
				discoveryv1.LabelManagedBy:   managedBy,
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
		Ports:       eports,
	}
	slices := cs.DiscoveryV1().EndpointSlices(ns)
	cur, err := slices.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = slices.Create(ctx, want, metav1.CreateOptions{})
	case err == nil:
		want.ResourceVersion = cur.ResourceVersion
		_, err = slices.Update(ctx, want, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	fmt.Printf("endpointslice %s/%s: %d endpoints\n", ns, want.Name, len(eps))
	return nil
}

package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
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

// serviceCmd creates or updates a NodePort Service with one named port and prints its ClusterIP.
func serviceCmd(ctx context.Context, cs *kubernetes.Clientset, ns string, args []string) error {
	fs := flag.NewFlagSet("service", flag.ContinueOnError)
	name := fs.String("name", "", "service name")
	portName := fs.String("port-name", "http", "port name")
	port := fs.Int("port", 80, "service port")
	target := fs.Int("target-port", 8080, "endpoint port")
	nodePort := fs.Int("node-port", 0, "node port (0: allocated)")
	proto := fs.String("protocol", "TCP", "TCP, UDP or SCTP")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" {
		return fmt.Errorf("-name is required")
	}
	sp := corev1.ServicePort{
		Name: *portName, Port: int32(*port), TargetPort: intstr.FromInt32(int32(*target)),
		NodePort: int32(*nodePort), Protocol: corev1.Protocol(*proto),
	}
	svcs := cs.CoreV1().Services(ns)
	svc, err := svcs.Get(ctx, *name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		svc, err = svcs.Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: *name},
			Spec: corev1.ServiceSpec{
				Type:  corev1.ServiceTypeNodePort,
				Ports: []corev1.ServicePort{sp},
				// No selector: the EndpointSlice is managed by e2ectl, as no controller runs.
			},
		}, metav1.CreateOptions{})
	case err == nil:
		svc.Spec.Type = corev1.ServiceTypeNodePort
		svc.Spec.Ports = []corev1.ServicePort{sp}
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
	portName := fs.String("port-name", "http", "port name (must match the Service's)")
	port := fs.Int("port", 8080, "endpoint port")
	proto := fs.String("protocol", "TCP", "TCP, UDP or SCTP")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *service == "" {
		return fmt.Errorf("-service is required")
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
	p32, pr := int32(*port), corev1.Protocol(*proto)
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
		Ports:       []discoveryv1.EndpointPort{{Name: portName, Port: &p32, Protocol: &pr}},
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

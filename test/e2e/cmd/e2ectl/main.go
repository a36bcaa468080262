// Command e2ectl plays the parts of a cluster that the e2e tests and the demo do not run
// (kubelet, EndpointSlice controller) and probes services from inside a namespace.
//
//	e2ectl -kubeconfig K nodes node-1=198.18.0.11,10.244.1.0/24 ...
//	e2ectl -kubeconfig K service -name web -ports http/TCP/80/8080/30080,echo/UDP/80/8080/30080
//	e2ectl -kubeconfig K endpoints -service web -ports ... pod-a=10.244.1.10@node-1 ...
//	e2ectl probe -url http://10.96.0.10:80/ -n 30 [-wait 30s] [-expect pod-a,pod-b]
//	e2ectl probe -udp 10.96.0.10:80 -n 30
//	e2ectl ask -url http://10.96.0.10:80/ -n 0 -interval 50ms   (until SIGTERM; for the Go tests)
//	e2ectl rate -addr 10.96.0.10:80 -conns 16 -duration 10s     (new connections/s; bench-e2e)
//
// Objects are created or updated in place, so each subcommand can be repeated.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func usage() {
	fmt.Fprintln(os.Stderr, `usage: e2ectl [-kubeconfig FILE] COMMAND [flags] [args]

commands:
  nodes      NAME=IP[,PODCIDR]...              create or update Nodes (InternalIP, podCIDR)
  service    -name N -ports NAME/PROTO/PORT/TARGETPORT[/NODEPORT],...
             create or update a NodePort Service; prints its ClusterIP
  endpoints  -service N -ports (as for service) POD=IP@NODE...
             set the Service's EndpointSlice to these ready endpoints
  probe      (-url URL | -udp HOST:PORT) -n N   send N requests, print how they were balanced
  ask        (-url URL | -udp HOST:PORT) [-n N] [-keep]  one parseable line per request (tests)
  rate       -addr HOST:PORT [-conns N] [-duration D]   new TCP connections (+ 1 request) per second`)
}

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file")
	namespace := flag.String("namespace", "default", "namespace of Services and EndpointSlices")
	flag.Usage = usage
	flag.Parse()
	if flag.NArg() < 1 {
		usage()
		os.Exit(2)
	}
	cmd, args := flag.Arg(0), flag.Args()[1:]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	var err error
	switch cmd {
	case "probe":
		err = probeCmd(ctx, args)
	case "ask":
		err = askCmd(ctx, args)
	case "rate":
		err = rateCmd(ctx, args)
	case "nodes", "service", "endpoints":
		var cs *kubernetes.Clientset
		cs, err = client(*kubeconfig)
		if err != nil {
			break
		}
		switch cmd {
		case "nodes":
			err = nodesCmd(ctx, cs, args)
		case "service":
			err = serviceCmd(ctx, cs, *namespace, args)
		case "endpoints":
			err = endpointsCmd(ctx, cs, *namespace, args)
		}
	default:
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2ectl %s: %v\n", cmd, err)
		os.Exit(1)
	}
}

func client(kubeconfig string) (*kubernetes.Clientset, error) {
	if kubeconfig == "" {
		return nil, fmt.Errorf("-kubeconfig (or KUBECONFIG) is required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 30 * time.Second
	return kubernetes.NewForConfig(cfg)
}

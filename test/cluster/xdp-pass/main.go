// Command xdp-pass attaches to each network device it is given (in its own
// network namespace: run it with nsenter --net) an XDP program that passes
// every frame on, so that the veth takes the frames XDP on its peer sends
// it (pkg/testing/xdppass). The devices keep the program after it exits.
//
//	xdp-pass DEV...
package main

import (
	"fmt"
	"os"

	"github.com/svcproxy/svcproxy/pkg/testing/xdppass"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: xdp-pass DEV...")
		os.Exit(2)
	}
	for _, dev := range os.Args[1:] {
		if err := xdppass.Attach(dev); err != nil {
			fmt.Fprintln(os.Stderr, "xdp-pass:", err)
			os.Exit(1)
		}
	}
}

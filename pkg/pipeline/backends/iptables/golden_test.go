package iptables

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// goldenCases are shared worlds whose full dumps are kept in testdata, so
// a reviewer sees every rule the backend emits.
var goldenCases = []string{
	"cluster IP",
	"no usable endpoints rejects on every frontend",
	"loadBalancerSourceRanges",
	"session affinity",
	"externalTrafficPolicy Local with a local endpoint",
	"internalTrafficPolicy Local without a local endpoint",
	"nodePortAddresses primary",
	"localhost node ports",
	"detectLocalMode InterfaceNamePrefix",
}

func TestGolden(t *testing.T) {
	for _, name := range goldenCases {
		for _, family := range proxy.Families {
			file := strings.NewReplacer(" ", "-", ",", "").Replace(strings.ToLower(name)) + "-" + strings.ToLower(string(family)) + ".golden"
			t.Run(file, func(t *testing.T) {
				fake, _ := syncFake(t, caseStateWith(t, name, family, localhostIPTables), Options{})
				proxytest.CheckGolden(t, filepath.Join("testdata", file), fake.Dump(), *update)
			})
		}
	}
}

// Ensure every golden case exists in the shared table.
func TestGoldenCasesExist(t *testing.T) {
	names := map[string]bool{}
	for _, c := range proxytest.Cases() {
		names[c.Name] = true
	}
	for _, n := range goldenCases {
		if !names[n] {
			t.Errorf("golden case %q is not in proxytest.Cases()", n)
		}
	}
}

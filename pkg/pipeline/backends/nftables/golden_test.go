package nftables

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// goldenCases are representative worlds whose full table dumps are kept in
// testdata: a reviewer sees every rule and element the backend emits.
var goldenCases = []string{
	"cluster IP",
	"no usable endpoints rejects on every frontend",
	"loadBalancerSourceRanges",
	"session affinity",
	"externalTrafficPolicy Local with a local endpoint",
	"nodePortAddresses primary",
	"detectLocalMode InterfaceNamePrefix",
	"several external IPs and LB IPs",
	"externalTrafficPolicy Local with several LB IPs",
}

// ownGoldenCases are also dumped with chains of their own for every
// service port with several external frontends ("-own" files).
var ownGoldenCases = []string{
	"several external IPs and LB IPs",
	"externalTrafficPolicy Local with several LB IPs",
}

func TestGolden(t *testing.T) {
	cases := map[string]proxytest.Case{}
	for _, c := range proxytest.Cases() {
		cases[c.Name] = c
	}
	for _, list := range []struct {
		names    []string
		suffix   string
		ownSlots int
	}{{goldenCases, "", defaultOwnSlots}, {ownGoldenCases, "-own", 0}} {
		for _, name := range list.names {
			c, ok := cases[name]
			if !ok {
				t.Errorf("golden case %q is not in proxytest.Cases()", name)
				continue
			}
			for _, family := range proxy.Families {
				file := strings.NewReplacer(" ", "-", ",", "").Replace(strings.ToLower(name)) + "-" + strings.ToLower(string(family)) + list.suffix + ".golden"
				t.Run(file, func(t *testing.T) {
					got := syncFakeOwn(t, proxytest.BuildState(t, c, family), list.ownSlots).Dump()
					proxytest.CheckGolden(t, filepath.Join("testdata", file), got, *update)
				})
			}
		}
	}
}

package hostile

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/iptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// TestKernelCorpus replays the seed corpus, the committed crashers and a
// fixed set of generated inputs through the real nftables and iptables
// backends in a fresh network namespace (the fakes check element types;
// only the kernel says whether it accepts the transaction: overlapping
// interval elements, for one, pass every fake). Each input gets new
// Proxiers over the previous input's tables, so restarts over someone
// else's rules are part of it. HOSTILE_KERNEL_INPUTS sets how many
// generated inputs (default 24). IPVS is not in this kernel; its fake runs.
func TestKernelCorpus(t *testing.T) {
	netnstest.RequireKernel(t, "nft", "iptables-nft-restore", "ip6tables-nft-restore")
	ns, err := netnstest.New(t).NewNS("hostile")
	if err != nil {
		t.Fatal(err)
	}
	// In name order, so that a failure restarting over the previous
	// input's tables (how the interval-set ordering bug showed) repeats.
	inputs := kernelInputs(t)
	for _, name := range slices.Sorted(maps.Keys(inputs)) {
		data := inputs[name]
		t.Run(name, func(t *testing.T) {
			g := &gen{data: data}
			first, second := g.world(), g.world()
			for _, family := range proxy.Families {
				backends := append(kernelBackends(t, ns, family), fakeBackends(family)...)
				runFamily(t, family, first, second, backends)
			}
		})
	}
}

// kernelInputs: the seeds, testdata's crashers, then generated inputs of
// 64–512 random bytes from a fixed seed (the same inputs every run).
func kernelInputs(t *testing.T) map[string][]byte {
	t.Helper()
	inputs := map[string][]byte{}
	for _, s := range seedCorpus() {
		inputs["seed "+s.class] = s.data
	}
	files, err := filepath.Glob("testdata/fuzz/FuzzHostileServices/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := readCorpusFile(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		inputs["crasher "+filepath.Base(f)] = data
	}
	n := 24
	if v := os.Getenv("HOSTILE_KERNEL_INPUTS"); v != "" {
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatalf("HOSTILE_KERNEL_INPUTS=%q: %v", v, err)
		}
	}
	rng := rand.New(rand.NewPCG(13, 13))
	for i := range n {
		data := make([]byte, 64+rng.IntN(449))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		inputs[fmt.Sprintf("generated %02d", i)] = data
	}
	return inputs
}

// readCorpusFile decodes a `go test fuzz v1` file holding one []byte.
func readCorpusFile(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 2 || lines[0] != "go test fuzz v1" {
		return nil, fmt.Errorf("not a one-value go fuzz corpus file")
	}
	lit, prefixed := strings.CutPrefix(lines[1], "[]byte(")
	lit, suffixed := strings.CutSuffix(lit, ")")
	if !prefixed || !suffixed {
		return nil, fmt.Errorf("value is not []byte(...)")
	}
	s, err := strconv.Unquote(lit)
	if err != nil {
		return nil, fmt.Errorf("value: %w", err)
	}
	return []byte(s), nil
}

// kernelBackends are new nftables and iptables (nft flavour) Proxiers in
// ns; their check lists what the kernel holds, which must parse back.
func kernelBackends(t *testing.T, ns *netnstest.NS, family proxy.IPFamily) []backend {
	t.Helper()
	ctx := context.Background()
	var nft *nftables.Proxier
	var ipt *iptables.Proxier
	err := ns.Do(func() (err error) {
		if nft, err = nftables.New(family, nftables.Options{}); err != nil {
			return err
		}
		if err = nft.Init(ctx); err != nil {
			return err
		}
		opts := iptables.Options{Flavour: kiptables.FlavourNFT, SyncPeriod: time.Hour}
		if ipt, err = iptables.New(ctx, family, opts); err != nil {
			return err
		}
		return ipt.Init(ctx)
	})
	if err != nil {
		t.Fatalf("%s proxiers: %v", family, err)
	}
	inNS := func(sync func(context.Context, *desired.State, proxy.SyncMode) error) func(*desired.State) error {
		return func(st *desired.State) error {
			return ns.Do(func() error { return sync(ctx, st, proxytest.ModeOf(st)) })
		}
	}
	listed := func(name string, args ...string) func(reporter, *desired.State) {
		return func(t reporter, _ *desired.State) {
			t.Helper()
			var out []byte
			err := ns.Do(func() (err error) { out, err = exec.Command(args[0], args[1:]...).CombinedOutput(); return err })
			if err != nil || !bytes.Contains(out, []byte("KUBE-")) && !bytes.Contains(out, []byte("kube-proxy")) {
				t.Errorf("%s %s: listing the kernel's rules: %v\n%s", name, family, err, out)
			}
		}
	}
	nftFamily, save := "ip", "iptables-nft-save"
	if family == proxy.IPv6 {
		nftFamily, save = "ip6", "ip6tables-nft-save"
	}
	return []backend{
		{name: "nftables kernel", sync: inNS(nft.Sync), check: listed("nftables kernel", "nft", "list", "table", nftFamily, nftables.TableName)},
		{name: "iptables kernel", sync: func(st *desired.State) error { return inNS(ipt.Sync)(localhostDNAT(st)) },
			check: listed("iptables kernel", save)},
	}
}

package knft

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// Kernel tests of the sockets a Kernel keeps between calls (conns.go), in
// throwaway network namespaces.

const testTable = "knft-test"

// inTable runs fn in a throwaway network namespace, with a Kernel whose
// table has the sets s and u (createSets).
func inTable(t *testing.T, role string, fn func(ctx context.Context, k *Kernel) error) {
	t.Helper()
	ns := newTestNS(t, role)
	err := ns.Do(func() error {
		k, err := New(knftables.IPv4Family, testTable)
		if err != nil {
			return err
		}
		defer k.Close()
		ctx := context.Background()
		if _, err := k.Apply(ctx, [][]*Unit{{createSets}}); err != nil {
			return err
		}
		return fn(ctx, k)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// newTestNS returns a throwaway network namespace, deleted after the test.
func newTestNS(t *testing.T, role string) *netnstest.NS {
	t.Helper()
	netnstest.RequireKernel(t, "nft")
	ns, err := netnstest.New(t).NewNS(role)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// createSets is a unit that creates the test table with the sets s and u.
var createSets = &Unit{Objects: func(tx *knftables.Transaction) {
	tx.Add(&knftables.Table{})
	tx.Add(&knftables.Set{Name: "s", Type: "ipv4_addr"})
	tx.Add(&knftables.Set{Name: "u", Type: "ipv4_addr"})
}, Ops: 3}

// testLayouts are the layouts of the tests' sets, by name.
var testLayouts = map[string]*Layout{
	"s": DeclaredLayout("ipv4_addr", "", nil, false),
	"u": DeclaredLayout("ipv4_addr", "", nil, false),
	"h": DeclaredLayout("ipv4_addr . ipv4_addr", "", nil, false),
	"m": DeclaredLayout("ipv4_addr . inet_proto . inet_service : verdict", "", nil, true),
}

// elems is a unit of cs, changes of set spelled as nft spells them, sent
// as the backend sends them: data in set's layout (testLayouts).
func elems(set string, cs ...Change) *Unit {
	l := testLayouts[set]
	data := make([]Change, len(cs))
	for i, c := range cs {
		b, keyEnd, err := l.l.parseElem(nil, c.Key, c.Value)
		if err != nil {
			panic(fmt.Sprintf("test element {%s : %s} of %s: %v", c.Key, c.Value, set, err))
		}
		data[i] = Change{Key: string(b[:keyEnd]), Value: string(b[keyEnd:]), Del: c.Del, Add: c.Add}
	}
	return &Unit{Set: set, IsMap: l.l.verdict || l.l.data != nil, Layout: l, Ops: len(cs), Elems: slices.Values(data)}
}

// idleFDs lists the sockets k keeps, sorted.
func idleFDs(k *Kernel) []int {
	k.conns.mu.Lock()
	defer k.conns.mu.Unlock()
	var fds []int
	for _, c := range k.conns.idle {
		fds = append(fds, c.fd)
	}
	slices.Sort(fds)
	return fds
}

// requireQuiet fails t if a message waits on any socket k keeps: a later
// call would read it.
func requireQuiet(t *testing.T, k *Kernel) {
	t.Helper()
	buf := make([]byte, 64<<10)
	for _, fd := range idleFDs(k) {
		_, _, _, _, err := unix.Recvmsg(fd, buf, nil, unix.MSG_DONTWAIT|unix.MSG_PEEK)
		if !errors.Is(err, unix.EAGAIN) {
			t.Errorf("socket %d kept with a message queued (or %v)", fd, err)
		}
	}
}

// listSet is the elements of set as nft lists them, sorted.
func listSet(set string) (string, error) {
	out, err := exec.Command("nft", "list", "set", "ip", testTable, set).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("nft list set %s: %w: %s", set, err, out)
	}
	_, after, _ := strings.Cut(string(out), "elements = {")
	before, _, _ := strings.Cut(after, "}")
	fields := strings.FieldsFunc(before, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' })
	slices.Sort(fields)
	return strings.Join(fields, " "), nil
}

// Every call reuses the sockets the first one opened, and leaves nothing
// queued on them.
func TestKernelKeepsSockets(t *testing.T) {
	inTable(t, "knftkeep", func(ctx context.Context, k *Kernel) error {
		first := idleFDs(k)
		if len(first) != 2 {
			return fmt.Errorf("after an Apply %d sockets kept, want 2 (batches, layouts)", len(first))
		}
		for i := range 4 {
			c := Change{Key: "10.0.0.1", Add: i%2 == 0, Del: i%2 == 1} // a delete: what made close wait
			if _, err := k.Apply(ctx, [][]*Unit{{elems("s", c)}}); err != nil {
				return err
			}
			if _, err := k.Exists(ctx); err != nil {
				return err
			}
			if got := idleFDs(k); !slices.Equal(got, first) {
				return fmt.Errorf("call %d: sockets %v, want the first Apply's %v", i, got, first)
			}
			requireQuiet(t, k)
		}
		if err := k.ReadBack(ctx, newRecordSink(t)); err != nil {
			return err
		}
		if got := idleFDs(k); !isSubset(first, got) || len(got) > maxIdleConns {
			return fmt.Errorf("after a read-back: sockets %v, want the Apply's %v among at most %d", got, first, maxIdleConns)
		}
		requireQuiet(t, k)
		k.Close()
		if got := idleFDs(k); len(got) != 0 {
			return fmt.Errorf("Close kept %v", got)
		}
		// After Close, calls still work, each with sockets of its own.
		if _, err := k.Apply(ctx, [][]*Unit{{elems("s", Change{Key: "10.0.0.3", Add: true})}}); err != nil {
			return fmt.Errorf("Apply after Close: %w", err)
		}
		if got := idleFDs(k); len(got) != 0 {
			return fmt.Errorf("a closed Kernel kept %v", got)
		}
		return nil
	})
}

func isSubset(small, big []int) bool {
	for _, x := range small {
		if !slices.Contains(big, x) {
			return false
		}
	}
	return true
}

// A batch the kernel rejects (an element delete of a key that is not
// there) fails its Apply, commits nothing, and leaves the socket clean:
// the next Apply on the same socket commits.
func TestKernelRejectedBatchThenGood(t *testing.T) {
	inTable(t, "knftreject", func(ctx context.Context, k *Kernel) error {
		before := idleFDs(k)
		// One batch: an add to u, the refused delete, another add (the
		// message asked to ack).
		bad := []*Unit{
			elems("u", Change{Key: "10.0.0.1", Add: true}),
			elems("s", Change{Key: "10.9.9.9", Del: true}),
			elems("u", Change{Key: "10.0.0.2", Add: true}),
		}
		_, err := k.Apply(ctx, [][]*Unit{bad})
		if !errors.Is(err, unix.ENOENT) || !strings.Contains(err.Error(), "deleting elements from s") {
			return fmt.Errorf("the refused batch: %v, want ENOENT naming the delete from s", err)
		}
		if got := idleFDs(k); !slices.Equal(got, before) {
			return fmt.Errorf("after a refused batch: sockets %v, want the same %v", got, before)
		}
		requireQuiet(t, k)
		if got, err := listSet("u"); err != nil || got != "" {
			return fmt.Errorf("set u after the refused batch: %q, %v; want nothing committed", got, err)
		}
		st, err := k.Apply(ctx, [][]*Unit{{elems("u", Change{Key: "10.0.0.3", Add: true})}})
		if err != nil || st.NetlinkOps != 1 {
			return fmt.Errorf("the good batch after it: %+v, %v", st, err)
		}
		if got := idleFDs(k); !slices.Equal(got, before) {
			return fmt.Errorf("after the good batch: sockets %v, want the same %v", got, before)
		}
		if got, err := listSet("u"); err != nil || got != "10.0.0.3" {
			return fmt.Errorf("set u: %q, %v; want 10.0.0.3", got, err)
		}
		return nil
	})
}

// A Kernel called from another network namespace than its sockets' opens
// new ones there: its writes go to the caller's namespace.
func TestKernelSocketsFollowNamespace(t *testing.T) {
	a, b := newTestNS(t, "knftnsa"), newTestNS(t, "knftnsb")
	k, err := New(knftables.IPv4Family, testTable)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	ctx := context.Background()
	for _, ns := range []*netnstest.NS{a, b} {
		if err := ns.Do(func() error { _, err := k.Apply(ctx, [][]*Unit{{createSets}}); return err }); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Do(func() error {
		_, err := k.Apply(ctx, [][]*Unit{{elems("s", Change{Key: "10.0.0.7", Add: true})}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for ns, want := range map[*netnstest.NS]string{a: "", b: "10.0.0.7"} {
		var got string
		if err := ns.Do(func() (err error) { got, err = listSet("s"); return err }); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("set s in %s: %q, want %q", ns.Name, got, want)
		}
	}
}

// The canary (Exists) runs beside the syncer's Apply: both take sockets
// from the same Kernel at once (run with -race).
func TestKernelConcurrentCalls(t *testing.T) {
	ns := newTestNS(t, "knftconc")
	k, err := New(knftables.IPv4Family, testTable)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	ctx := context.Background()
	if err := ns.Do(func() error { _, err := k.Apply(ctx, [][]*Unit{{createSets}}); return err }); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() {
		errs[0] = ns.Do(func() error {
			for i := range 50 {
				c := Change{Key: "10.0.1.1", Add: i%2 == 0, Del: i%2 == 1}
				if _, err := k.Apply(ctx, [][]*Unit{{elems("s", c)}}); err != nil {
					return err
				}
			}
			return nil
		})
	})
	wg.Go(func() {
		errs[1] = ns.Do(func() error {
			for range 50 {
				if ok, err := k.Exists(ctx); err != nil || !ok {
					return fmt.Errorf("Exists = %v, %v", ok, err)
				}
			}
			return nil
		})
	})
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if n := len(idleFDs(k)); n > 3 {
		t.Errorf("%d sockets kept, want at most 3 (two for Apply, one for Exists)", n)
	}
}

// recordSink is a Sink that records the elements reported, and fails t
// when a set's elements come after its SetListed, or twice.
type recordSink struct {
	t      *testing.T
	elems  map[string][]string // by set: "key : value", in the order reported
	listed map[string]bool
	hooks  map[string]*ChainHook // by chain
	types  map[string]*SetType   // by set
	refs   map[string][][]string // by chain, per rule
	as     map[string]*Layout    // the sets asked as data
}

func newRecordSink(t *testing.T) *recordSink {
	return &recordSink{t: t, elems: map[string][]string{}, listed: map[string]bool{}, hooks: map[string]*ChainHook{},
		types: map[string]*SetType{}, refs: map[string][][]string{}}
}

func (r *recordSink) Table()                             {}
func (r *recordSink) Chain(name string, hook *ChainHook) { r.hooks[name] = hook }
func (r *recordSink) Rule(chain, _ string, refs []string) {
	r.refs[chain] = append(r.refs[chain], refs)
}
func (r *recordSink) Set(s SetInfo) (bool, *Layout) {
	r.types[s.Name] = s.Type
	delete(r.elems, s.Name)
	return true, r.as[s.Name]
}

func (r *recordSink) Element(set string, key, value []byte) {
	if r.listed[set] {
		r.t.Errorf("element %s of %s after its SetListed", key, set)
	}
	r.elems[set] = append(r.elems[set], string(key)+" : "+string(value))
}

func (r *recordSink) SetListed(set string) {
	if r.listed[set] {
		r.t.Errorf("SetListed(%s) twice", set)
	}
	r.listed[set] = true
}

// The read-back spells every element of every set, and tells when each
// set is complete; a set of many reply messages (thousands of elements)
// too.
func TestKernelReadBackReportsSets(t *testing.T) {
	inTable(t, "knftread", func(ctx context.Context, k *Kernel) error {
		verdicts := &Unit{Objects: func(tx *knftables.Transaction) {
			tx.Add(&knftables.Chain{Name: "c"})
			tx.Add(&knftables.Map{Name: "m", Type: "ipv4_addr . inet_proto . inet_service : verdict"})
		}, Ops: 2}
		var many []Change
		want := map[string][]string{"m": {"10.0.0.1 . tcp . 80 : goto c"}, "u": {"10.0.0.9 : "}}
		for i := range 3000 {
			key := fmt.Sprintf("10.1.%d.%d", i/256, i%256)
			many = append(many, Change{Key: key, Add: true})
			want["s"] = append(want["s"], key+" : ")
		}
		txs := [][]*Unit{{verdicts}, {elems("s", many...), elems("u", Change{Key: "10.0.0.9", Add: true}),
			elems("m", Change{Key: "10.0.0.1 . tcp . 80", Value: "goto c", Add: true})}}
		if _, err := k.Apply(ctx, txs); err != nil {
			return err
		}
		r := newRecordSink(t)
		if err := k.ReadBack(ctx, r); err != nil {
			return err
		}
		for set, w := range want {
			got := slices.Sorted(slices.Values(r.elems[set]))
			slices.Sort(w)
			if !slices.Equal(got, w) || !r.listed[set] {
				return fmt.Errorf("set %s: %d elements (listed %v), want %d: %.200q", set, len(got), r.listed[set], len(w), got)
			}
		}
		return nil
	})
}

// The read-back reports each base chain's type, hook and numeric priority
// (symbolic priorities resolved as the kernel stores them), and the zero
// hook for a regular chain.
func TestReadBackReportsChainHooks(t *testing.T) {
	inTable(t, "knfthook", func(ctx context.Context, k *Kernel) error {
		u := &Unit{Objects: func(tx *knftables.Transaction) {
			base := func(name string, typ knftables.BaseChainType, hook knftables.BaseChainHook, prio knftables.BaseChainPriority) {
				tx.Add(&knftables.Chain{Name: name, Type: &typ, Hook: &hook, Priority: &prio})
			}
			base("pre", knftables.FilterType, knftables.PreroutingHook, knftables.DNATPriority+"-10")
			base("out", knftables.FilterType, knftables.OutputHook, knftables.FilterPriority)
			base("post", knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority)
			tx.Add(&knftables.Chain{Name: "regular"})
		}}
		if _, err := k.Apply(ctx, [][]*Unit{{u}}); err != nil {
			return err
		}
		sink := newRecordSink(t)
		if err := k.ReadBack(ctx, sink); err != nil {
			return err
		}
		want := map[string]*ChainHook{"pre": {"filter", "prerouting", -110}, "out": {"filter", "output", 0},
			"post": {"nat", "postrouting", 100}, "regular": {}}
		for name, w := range want {
			got, ok := sink.hooks[name]
			if !ok || got == nil || *got != *w {
				return fmt.Errorf("chain %s: hook %+v (reported %v), want %+v", name, got, ok, w)
			}
		}
		return nil
	})
}

// A unit of spelled elements (no Layout) goes through nft, which parses
// them: the Kernel encodes data only.
func TestKernelSpelledUnitThroughNft(t *testing.T) {
	inTable(t, "knftspelled", func(ctx context.Context, k *Kernel) error {
		u := &Unit{Set: "s", Ops: 1, Elems: slices.Values([]Change{{Key: "10.0.0.5", Add: true}})}
		st, err := k.Apply(ctx, [][]*Unit{{u}})
		if err != nil || st.NetlinkOps != 0 || st.Operations != 1 {
			return fmt.Errorf("a spelled unit: %+v, %v; want 1 operation, none over netlink", st, err)
		}
		if got, err := listSet("s"); err != nil || got != "10.0.0.5" {
			return fmt.Errorf("set s: %q, %v; want 10.0.0.5", got, err)
		}
		return nil
	})
}

package reconcile

import (
	"cmp"
	"errors"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// own is a test owner, ordered by number.
type own int

func (o own) Compare(p own) int { return cmp.Compare(o, p) }

var intKind = Kind[int, string]{Name: "test", Equal: func(a, b string) bool { return a == b },
	AddPhase: 1, UpdatePhase: 1, DeletePhase: 2}

func items(kv ...any) []Item[int, string] {
	var out []Item[int, string]
	for i := 0; i < len(kv); i += 2 {
		out = append(out, Item[int, string]{Key: kv[i].(int), Value: kv[i+1].(string)})
	}
	return out
}

// commitDiff diffs tb and records every change as made.
func commitDiff[V any](tb *Table[own, int, V]) {
	for _, c := range tb.Diff() {
		tb.Commit(c)
	}
}

func TestDiffAddUpdateDelete(t *testing.T) {
	tb := NewTable[own](intKind)
	tb.SetKernel(1, "old")
	tb.SetKernel(2, "same")
	tb.SetKernel(3, "gone")
	tb.ResetClaims()
	tb.Replace(7, items(1, "new", 2, "same", 4, "fresh"))
	got := tb.Diff()
	slices.SortFunc(got, func(a, b Change[int, string]) int { return a.Key - b.Key })
	want := []Change[int, string]{
		{Op: Update, Key: 1, Want: "new", Have: "old"},
		{Op: Delete, Key: 3, Have: "gone"},
		{Op: Add, Key: 4, Want: "fresh"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Diff = %v, want %v", got, want)
	}
	if again := tb.Diff(); len(again) != 0 {
		t.Errorf("a second Diff without changes = %v, want none", again)
	}
}

// TestReserveTakesOnlyAnEmptyTable: the hint never drops what a table
// holds; an empty table reserved for its keys diffs as one not reserved.
func TestReserveTakesOnlyAnEmptyTable(t *testing.T) {
	tb := NewTable[own](intKind)
	tb.SetKernel(1, "kept")
	tb.Replace(2, items(2, "claimed"))
	tb.Reserve(100)
	if v, ok := tb.Kernel(1); !ok || v != "kept" || !tb.Claimed(2) || tb.Len() != 1 {
		t.Errorf("after Reserve on a table with entries: kernel 1 = %q %t, 2 claimed %t, Len %d; want all kept", v, ok, tb.Claimed(2), tb.Len())
	}
	if got, want := tb.Diff(), []Change[int, string]{{Op: Add, Key: 2, Want: "claimed"}}; !slices.Equal(got, want) {
		t.Errorf("Diff after Reserve = %v, want %v (the touched key only)", got, want)
	}

	reserved, plain := NewTable[own](intKind), NewTable[own](intKind)
	reserved.Reserve(3)
	for _, tb := range []*Table[own, int, string]{reserved, plain} {
		tb.Replace(1, items(1, "a", 2, "b", 3, "c", 4, "d"))
	}
	if got, want := reserved.Diff(), plain.Diff(); !slices.Equal(got, want) {
		t.Errorf("a reserved table's Diff = %v, an unreserved one's %v", got, want)
	}
}

func TestLowestOwnerWinsAndTheNextTakesOver(t *testing.T) {
	tb := NewTable[own](intKind)
	tb.Replace(5, items(1, "five"))
	tb.Replace(3, items(1, "three"))
	tb.Replace(9, items(1, "nine"))
	if v, _ := tb.Want(1); v != "three" {
		t.Fatalf("Want = %q, want the lowest owner's %q", v, "three")
	}
	commitDiff(tb)
	tb.Replace(3, nil)
	got := tb.Diff()
	want := []Change[int, string]{{Op: Update, Key: 1, Want: "five", Have: "three"}}
	if !slices.Equal(got, want) {
		t.Fatalf("after the winner left: Diff = %v, want %v", got, want)
	}
}

func TestPartialDiffsOnlyTouchedKeys(t *testing.T) {
	tb := NewTable[own](intKind)
	tb.Replace(1, items(1, "a"))
	tb.Replace(2, items(2, "b"))
	commitDiff(tb)
	// The kernel lost key 1 behind our back: a partial sync of owner 2
	// does not see it; a full one does.
	tb.DropKernel(1)
	tb.Replace(2, items(2, "c"))
	if got := tb.Diff(); len(got) != 1 || got[0].Key != 2 {
		t.Fatalf("partial Diff = %v, want only key 2", got)
	}
	tb.ResetClaims()
	tb.Replace(1, items(1, "a"))
	tb.Replace(2, items(2, "c"))
	got := tb.Diff()
	want := []Change[int, string]{{Op: Add, Key: 1, Want: "a"}, {Op: Update, Key: 2, Want: "c", Have: "b"}}
	slices.SortFunc(got, func(a, b Change[int, string]) int { return a.Key - b.Key })
	if !slices.Equal(got, want) {
		t.Fatalf("full Diff = %v, want %v", got, want)
	}
}

func TestOwnerClaimingAKeyTwice(t *testing.T) {
	tb := NewTable[own](intKind)
	tb.Replace(1, items(1, "x", 1, "x"))
	tb.Replace(2, items(1, "y"))
	tb.Replace(1, nil)
	if v, ok := tb.Want(1); !ok || v != "y" {
		t.Fatalf("Want = %q, %t after owner 1 left; want owner 2's %q", v, ok, "y")
	}
	if tb.Len() != 1 {
		t.Fatalf("Len = %d with one key claimed", tb.Len())
	}
	tb.Replace(2, nil)
	if tb.Claimed(1) || tb.Len() != 0 {
		t.Fatalf("key 1 still claimed after both owners left (Len %d)", tb.Len())
	}
}

func TestStepsRunInPhaseOrder(t *testing.T) {
	targets := NewTable[own](Kind[int, string]{Name: "targets", Equal: func(a, b string) bool { return a == b },
		AddPhase: 0, UpdatePhase: 0, DeletePhase: 3})
	pointers := NewTable[own](Kind[int, string]{Name: "pointers", Equal: func(a, b string) bool { return a == b },
		AddPhase: 1, UpdatePhase: 1, DeletePhase: 2})
	targets.SetKernel(9, "t")
	pointers.SetKernel(9, "p")
	targets.ResetClaims()
	pointers.ResetClaims()
	targets.Replace(1, items(1, "t"))
	pointers.Replace(1, items(1, "p"))
	var seen []string
	log := func(kind string) func(c Change[int, string]) (Result[string], error) {
		return func(c Change[int, string]) (Result[string], error) {
			seen = append(seen, kind+" "+c.Op.String())
			return Applied(c), nil
		}
	}
	if err := RunAll(Each(pointers, log("pointer")), Each(targets, log("target"))); err != nil {
		t.Fatal(err)
	}
	want := []string{"target add", "pointer add", "pointer delete", "target delete"}
	if !slices.Equal(seen, want) {
		t.Fatalf("order = %q, want %q", seen, want)
	}
}

func TestEachRecordsWhatTheKernelHolds(t *testing.T) {
	tb := NewTable[own](intKind)
	tb.Replace(1, items(1, "a", 2, "b", 3, "c"))
	boom := errors.New("refused")
	err := RunAll(Each(tb, func(c Change[int, string]) (Result[string], error) {
		switch c.Key {
		case 2:
			return Unchanged(c), boom
		case 3:
			return Result[string]{Value: "partly", Present: true}, boom
		}
		return Applied(c), nil
	}))
	if !errors.Is(err, boom) {
		t.Fatalf("RunAll = %v, want the failures", err)
	}
	for k, want := range map[int]string{1: "a", 3: "partly"} {
		if v, ok := tb.Kernel(k); !ok || v != want {
			t.Errorf("kernel %d = %q, %t; want %q", k, v, ok, want)
		}
	}
	if _, ok := tb.Kernel(2); ok {
		t.Error("kernel holds key 2, whose add failed")
	}
}

func TestBatchCommitsOnlyOnSuccess(t *testing.T) {
	tb := NewTable[own](intKind)
	tb.Replace(1, items(1, "a"))
	n, err := RunUntilFailure(Batch(tb, func([]Change[int, string]) error { return errors.New("full") }))
	if err == nil || n != 0 {
		t.Fatalf("RunUntilFailure = %d, %v; want 0 and the error", n, err)
	}
	if tb.KernelLen() != 0 {
		t.Fatal("a failed batch was recorded as made")
	}
	tb.ResetClaims()
	tb.Replace(1, items(1, "a"))
	n, err = RunUntilFailure(Batch(tb, func([]Change[int, string]) error { return nil }))
	if err != nil || n != 1 {
		t.Fatalf("RunUntilFailure = %d, %v; want 1, nil", n, err)
	}
	if v, _ := tb.Kernel(1); v != "a" {
		t.Fatalf("kernel 1 = %q after the batch, want %q", v, "a")
	}
}

func TestSyncsModes(t *testing.T) {
	var s Syncs
	if _, err := s.Begin(proxy.PartialSync, "test"); !errors.Is(err, proxy.ErrFullSyncNeeded) {
		t.Fatalf("partial before any read-back: %v, want ErrFullSyncNeeded", err)
	}
	if p, _ := s.Begin(proxy.FullSync, "test"); !p.ReadBack || !p.Full {
		t.Fatalf("first full sync: plan %+v, want a read-back and a full diff", p)
	}
	s.ReadDone()
	if p, err := s.Begin(proxy.PartialSync, "test"); err != nil || p.ReadBack || p.Full {
		t.Fatalf("partial after read-back: %+v, %v; want neither", p, err)
	}
	if p, _ := s.Begin(proxy.FullSync, "test"); p.ReadBack || !p.Full {
		t.Fatalf("full after read-back: %+v, want full without read-back", p)
	}
	if p, _ := s.Begin(proxy.RecoverySync, "test"); !p.ReadBack || !p.Full {
		t.Fatalf("recovery: %+v, want read-back and full", p)
	}
	s.ReadDone()
	s.Failed()
	if _, err := s.Begin(proxy.PartialSync, "test"); !errors.Is(err, proxy.ErrFullSyncNeeded) {
		t.Fatalf("partial after a failure: %v, want ErrFullSyncNeeded", err)
	}
}

// TestSharedKeyFirstClaimGoesThenTheSecond follows a key that a second
// owner claims after a first: the first claim is the one kept with the
// key, the second kept aside. When the first goes the second is the key's
// only claim, also for an owner that comes after it; when the second goes
// too the key is deleted.
func TestSharedKeyFirstClaimGoesThenTheSecond(t *testing.T) {
	tb := NewTable[own](intKind)
	tb.Replace(5, items(1, "five", 2, "own"))
	tb.Replace(3, items(1, "three"))
	if v, _ := tb.Want(1); v != "three" {
		t.Fatalf("Want = %q, want the lowest owner's %q", v, "three")
	}
	commitDiff(tb)
	tb.Replace(5, nil)
	tb.Replace(7, items(3, "seven")) // may take owner 5's place
	got := tb.Diff()
	want := []Change[int, string]{{Op: Delete, Key: 2, Have: "own"}, {Op: Add, Key: 3, Want: "seven"}}
	slices.SortFunc(got, func(a, b Change[int, string]) int { return a.Key - b.Key })
	if !slices.Equal(got, want) {
		t.Fatalf("after the first claim went: Diff = %v, want %v", got, want)
	}
	if v, ok := tb.Want(1); !ok || v != "three" || tb.Len() != 2 {
		t.Fatalf("Want(1) = %q, %t, Len %d; want owner 3's %q and 2 keys", v, ok, tb.Len(), "three")
	}
	for _, c := range got {
		tb.Commit(c)
	}
	tb.Replace(3, nil)
	got = tb.Diff()
	want = []Change[int, string]{{Op: Delete, Key: 1, Have: "three"}}
	if !slices.Equal(got, want) {
		t.Fatalf("after the second claim went: Diff = %v, want %v", got, want)
	}
	if tb.Claimed(1) || tb.Len() != 1 {
		t.Fatalf("key 1 claimed %t, Len %d after both its owners left; want false, 1", tb.Claimed(1), tb.Len())
	}
}

// TestGrowSizesTheIndexOnce: a table grown for n keys while it holds some
// claims the rest without rehashing its index, and finds every key.
func TestGrowSizesTheIndexOnce(t *testing.T) {
	tb := NewTable[own](intKind)
	tb.Replace(1, []Item[int, string]{{Key: 0, Value: "a"}})
	tb.Grow(5000)
	cells := len(tb.index.cells)
	var items []Item[int, string]
	for k := range 5000 {
		items = append(items, Item[int, string]{Key: k, Value: "b"})
	}
	tb.Replace(2, items)
	if len(tb.index.cells) != cells {
		t.Errorf("the index went from %d to %d cells after Grow(5000)", cells, len(tb.index.cells))
	}
	for k := range 5000 {
		if !tb.Claimed(k) {
			t.Fatalf("key %d not found after Grow", k)
		}
	}
}

// TestReplaceKeepsNoItems: the table keeps the values claimed, not the
// items handed over, so a caller that claims for owner after owner from
// one buffer (as nftables does) leaves each owner's claims as they were;
// and the next Replace of an owner releases what it claimed, whatever
// became of the buffer.
func TestReplaceKeepsNoItems(t *testing.T) {
	tb := NewTable[own](intKind)
	buf := items(1, "a", 2, "b")
	tb.Replace(1, buf)
	buf[0], buf[1] = Item[int, string]{Key: 3, Value: "c"}, Item[int, string]{Key: 4, Value: "d"}
	tb.Replace(2, buf)
	clear(buf)
	for k, want := range map[int]string{1: "a", 2: "b", 3: "c", 4: "d"} {
		if v, ok := tb.Want(k); !ok || v != want {
			t.Fatalf("Want(%d) = %q, %t after the buffer was reused; want %q", k, v, ok, want)
		}
	}
	tb.Replace(1, items(2, "b2"))
	if _, ok := tb.Want(1); ok || tb.Len() != 3 {
		t.Fatalf("owner 1's old claim on key 1 stands (Len %d) after its Replace", tb.Len())
	}
	if v, _ := tb.Want(2); v != "b2" {
		t.Fatalf("Want(2) = %q, want owner 1's new value", v)
	}
}

package reconcile

import (
	"errors"
	"slices"
	"testing"
)

// TestColdBatchLeavesWhatDidNotRunDirty: a cold table's batch is diffed
// when its Step runs, so a Step that RunUntilFailure never ran (an
// earlier one failed) leaves its keys to the next diff instead of losing
// them.
func TestColdBatchLeavesWhatDidNotRunDirty(t *testing.T) {
	first, second := NewTable[own](intKind), NewTable[own](intKind)
	first.Replace(1, items(1, "a"))
	second.Replace(1, items(2, "b", 3, "c"))
	var ran []string
	refuse := func([]Change[int, string]) error { ran = append(ran, "first"); return errors.New("full") }
	accept := func([]Change[int, string]) error { ran = append(ran, "second"); return nil }
	n, err := RunUntilFailure(Batch(first, refuse), Batch(second, accept))
	if err == nil || n != 0 || !slices.Equal(ran, []string{"first"}) {
		t.Fatalf("RunUntilFailure = %d, %v, ran %v; want 0, the error, only the first", n, err, ran)
	}
	var keys []int
	for _, c := range second.Diff() {
		if c.Op != Add {
			t.Errorf("the second table's diff has %v", c)
		}
		keys = append(keys, c.Key)
	}
	if !slices.Equal(keys, []int{2, 3}) {
		t.Errorf("after a batch that did not run, the next diff adds %v, want [2 3]", keys)
	}
	if first.KernelLen() != 0 || len(first.Diff()) != 0 {
		t.Errorf("a refused batch: %d keys recorded in the kernel and the next diff has %v; want none and nothing",
			first.KernelLen(), first.Diff())
	}
}

// TestColdBatchAddsTheWinningClaims: a cold batch writes each claimed key
// once, with the lowest owner's value, in one Step of the add phase, and
// records them; a key nobody claims any more is not written.
func TestColdBatchAddsTheWinningClaims(t *testing.T) {
	tb := NewTable[own](intKind)
	tb.Replace(2, items(1, "two", 2, "b"))
	tb.Replace(1, items(1, "one", 9, "gone"))
	tb.Replace(1, items(1, "one"))
	steps := Batch(tb, func(cs []Change[int, string]) error {
		got := map[int]string{}
		for _, c := range cs {
			if c.Op != Add {
				t.Errorf("a cold batch has %v", c)
			}
			got[c.Key] = c.Want
		}
		if len(cs) != 2 || got[1] != "one" || got[2] != "b" {
			t.Errorf("a cold batch writes %v, want 1=one and 2=b", cs)
		}
		return nil
	})
	if len(steps) != 1 || steps[0].Phase != intKind.AddPhase || steps[0].Len != 2 {
		t.Fatalf("a cold batch is %+v, want one step of 2 adds in phase %d", steps, intKind.AddPhase)
	}
	if err := steps[0].Run(); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[int]string{1: "one", 2: "b"} {
		if v, ok := tb.Kernel(k); !ok || v != want {
			t.Errorf("kernel %d = %q, %t after the batch; want %q", k, v, ok, want)
		}
	}
	if _, ok := tb.Kernel(9); ok || tb.KernelLen() != 2 || len(tb.Diff()) != 0 {
		t.Errorf("after the batch the kernel side holds %d keys (9: %t) and the diff is %v; want 2, not 9, nothing",
			tb.KernelLen(), ok, tb.Diff())
	}
}

// TestColdBatchOfATableChangedSinceIsDiffedAsUsual: a cold table's Step
// that runs after the table changed (here: the kernel found holding a
// key) diffs what the table is then, updates included.
func TestColdBatchOfATableChangedSinceIsDiffedAsUsual(t *testing.T) {
	tb := NewTable[own](intKind)
	tb.Replace(1, items(1, "a", 2, "b"))
	var got []Change[int, string]
	steps := Batch(tb, func(cs []Change[int, string]) error { got = append(got, cs...); return nil })
	tb.SetKernel(2, "old")
	if err := RunAll(steps); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != (Change[int, string]{Op: Add, Key: 1, Want: "a"}) ||
		got[1] != (Change[int, string]{Op: Update, Key: 2, Want: "b", Have: "old"}) {
		t.Errorf("the batch wrote %v, want the add of 1 and the update of 2", got)
	}
	if v, _ := tb.Kernel(2); v != "b" || tb.KernelLen() != 2 {
		t.Errorf("kernel 2 = %q and %d keys held after the batch, want b and 2", v, tb.KernelLen())
	}
}

// TestColdBatchInChunks: a cold batch larger than a chunk hands do its
// adds a chunk at a time, each key once, and records every chunk do took;
// after a chunk fails nothing more is written, and what was not written
// is not recorded.
func TestColdBatchInChunks(t *testing.T) {
	defer func(n int) { coldChunk = n }(coldChunk)
	coldChunk = 2
	for _, refuse := range []int{-1, 1} { // the call that fails, -1 none
		tb := NewTable[own](intKind)
		tb.Replace(1, items(1, "a", 2, "b", 3, "c"))
		tb.Replace(2, items(4, "d", 5, "e"))
		var calls [][]int
		err := steps1(t, Batch(tb, func(cs []Change[int, string]) error {
			var keys []int
			for _, c := range cs {
				keys = append(keys, c.Key)
			}
			calls = append(calls, keys)
			if len(calls)-1 == refuse {
				return errors.New("full")
			}
			return nil
		}))
		written := slices.Concat(calls...)
		slices.Sort(written)
		switch {
		case refuse < 0 && (err != nil || len(calls) != 3 || !slices.Equal(written, []int{1, 2, 3, 4, 5})):
			t.Errorf("a batch of 5 in chunks of 2: calls %v, %v; want 3 calls writing each key once", calls, err)
		case refuse < 0 && tb.KernelLen() != 5:
			t.Errorf("after the chunks the kernel side holds %d keys, want 5", tb.KernelLen())
		case refuse >= 0 && (err == nil || len(calls) != 2):
			t.Errorf("the second chunk refused: calls %v, %v; want 2 calls and the error", calls, err)
		case refuse >= 0 && tb.KernelLen() != 2:
			t.Errorf("the second chunk refused: the kernel side holds %d keys, want the first chunk's 2", tb.KernelLen())
		}
		for _, k := range calls[0] {
			if _, ok := tb.Kernel(k); !ok {
				t.Errorf("refuse %d: key %d of the first chunk is not recorded", refuse, k)
			}
		}
		if refuse >= 0 {
			for _, k := range calls[1] {
				if _, ok := tb.Kernel(k); ok {
					t.Errorf("key %d of the refused chunk is recorded as held", k)
				}
			}
		}
	}
}

// steps1 runs the one Step of a cold batch.
func steps1(t *testing.T, steps []Step) error {
	t.Helper()
	if len(steps) != 1 {
		t.Fatalf("a cold batch is %d steps, want 1", len(steps))
	}
	return steps[0].Run()
}

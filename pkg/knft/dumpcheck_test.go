package knft

import (
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeDumps plays the kernel's element dumps of an ipv4_addr set: the
// i-th dump is dumps[i], a reply message per inner slice (its addresses,
// 4 bytes each). n counts the dumps asked for.
type fakeDumps struct {
	dumps [][][]byte
	n     int
}

func (f *fakeDumps) dump(each func([]byte) error) error {
	dump := f.dumps[f.n]
	f.n++
	for _, msg := range dump {
		var list [][]byte
		for a := range slices.Chunk(msg, 4) {
			list = append(list, nest(unix.NFTA_LIST_ELEM, nest(unix.NFTA_SET_ELEM_KEY, nest(unix.NFTA_DATA_VALUE, a))))
		}
		if err := each(nest(unix.NFTA_SET_ELEM_LIST_ELEMENTS, list...)); err != nil {
			return err
		}
	}
	return nil
}

// readDump reads set s through f as the read-back does, and reports its
// batches to sink.
func readDump(t *testing.T, f *fakeDumps, sink Sink) error {
	t.Helper()
	l, ok := setLayout(nlSet{keyType: typeIPAddr, keyLen: 4})
	if !ok {
		t.Fatal("ipv4_addr: no layout")
	}
	d := &setDump{info: SetInfo{Name: "s"}, layout: l}
	out := make(chan *elemBatch, 64)
	err := d.read(f.dump, keySeens.Get().(*keySeen), out)
	close(out)
	for b := range out {
		b.report(sink)
	}
	return err
}

// A set's dump that lists an element twice (the kernel resumed it in
// another walk order, and missed an element) is dumped again, and the
// Sink is told to forget what the first dump reported: it ends with the
// set's elements, each once.
func TestReadBackDumpsAgainAfterRepeatedElement(t *testing.T) {
	a1, a2, a3, a4 := []byte{10, 0, 0, 1}, []byte{10, 0, 0, 2}, []byte{10, 0, 0, 3}, []byte{10, 0, 0, 4}
	f := &fakeDumps{dumps: [][][]byte{
		{slices.Concat(a1, a2), slices.Concat(a2, a4)}, // 10.0.0.3 missed, 10.0.0.2 twice
		{slices.Concat(a1, a2), slices.Concat(a3, a4)},
	}}
	r := newRecordSink(t)
	if err := readDump(t, f, r); err != nil {
		t.Fatal(err)
	}
	if f.n != 2 {
		t.Errorf("%d dumps, want 2", f.n)
	}
	want := []string{"10.0.0.1 : ", "10.0.0.2 : ", "10.0.0.3 : ", "10.0.0.4 : "}
	if got := r.elems["s"]; !slices.Equal(got, want) || !r.listed["s"] {
		t.Errorf("set s: %q (listed %v), want %q", got, r.listed["s"], want)
	}
}

// A set that lists an element twice in every dump fails the read-back
// after maxDumpAttempts dumps, with an error that names it, and is never
// reported complete.
func TestReadBackGivesUpOnRepeatingDumps(t *testing.T) {
	a1 := []byte{10, 0, 0, 1}
	f := &fakeDumps{dumps: make([][][]byte, maxDumpAttempts+1)}
	for i := range f.dumps {
		f.dumps[i] = [][]byte{slices.Concat(a1, a1)}
	}
	r := newRecordSink(t)
	err := readDump(t, f, r)
	if err == nil || !strings.Contains(err.Error(), "listing elements of s:") {
		t.Fatalf("err = %v, want one naming set s", err)
	}
	if f.n != maxDumpAttempts {
		t.Errorf("%d dumps, want %d", f.n, maxDumpAttempts)
	}
	if r.listed["s"] {
		t.Error("set s reported complete")
	}
}

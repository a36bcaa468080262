package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
)

// heapProfiler writes a heap profile (in-use memory, after a GC) at the
// moments svcproxy's own memory peaks: while iptables-restore reads the
// input, and just after an iptables-save returned its output. Each
// phase (cold, change, restart) and moment is written once, on its first
// occurrence. The forced GCs cost the measured process CPU, so timings of
// a profiled run are not comparable with others.
type heapProfiler struct {
	dir, prefix string
	phase       string
	done        map[string]bool
}

// at writes the profile for the current phase and moment unless it has
// been written; a nil profiler does nothing.
func (h *heapProfiler) at(moment string) {
	if h == nil {
		return
	}
	name := fmt.Sprintf("%s-%s-%s.pprof", h.prefix, h.phase, moment)
	if h.done[name] {
		return
	}
	h.done[name] = true
	runtime.GC()
	f, err := os.Create(filepath.Join(h.dir, name))
	if err != nil {
		fmt.Fprintln(os.Stderr, "heap profile:", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		fmt.Fprintln(os.Stderr, "heap profile:", err)
	}
}

func (h *heapProfiler) setPhase(phase string) {
	if h != nil {
		h.phase = phase
	}
}

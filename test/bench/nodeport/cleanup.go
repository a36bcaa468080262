package main

import (
	"fmt"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
)

// undo holds what a run must remove even when interrupted: namespaces,
// bpffs mounts. Deferred calls do not run when a signal ends the process.
var undo struct {
	sync.Mutex
	fns map[int]func()
	n   int
}

// onExit registers fn and returns the function that runs it (once) and
// forgets it: call that where the work is normally undone.
func onExit(fn func()) func() {
	var once sync.Once
	run := func() { once.Do(fn) }
	undo.Lock()
	defer undo.Unlock()
	if undo.fns == nil {
		undo.fns = map[int]func(){}
	}
	id := undo.n
	undo.n++
	undo.fns[id] = run
	return func() {
		undo.Lock()
		delete(undo.fns, id)
		undo.Unlock()
		run()
	}
}

// undoOnSignal runs whatever is registered, newest first, when SIGINT or
// SIGTERM arrives, and exits.
func undoOnSignal() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "%v: removing the namespaces and mounts\n", s)
		undo.Lock()
		ids := make([]int, 0, len(undo.fns))
		for id := range undo.fns {
			ids = append(ids, id)
		}
		fns := undo.fns
		undo.fns = nil
		undo.Unlock()
		slices.Sort(ids)
		for _, id := range slices.Backward(ids) {
			fns[id]()
		}
		os.Exit(1)
	}()
}

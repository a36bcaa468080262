//go:build startprofile

package main

// Test tooling, built only with -tags startprofile (hack/bench-e2e.sh does so
// with BENCH_E2E_PROFILE=true): a CPU profile from the process's start, which
// /debug/pprof cannot give — its server starts once the Node exists and the
// backends are initialized, after the initial lists began. Where a start's
// time goes can only be seen in a profile of the whole start.

import (
	"fmt"
	"os"
	"runtime/pprof"
	"time"
)

// startProfileSeconds bounds the profile: the first sync at 10k × 10 ends
// about 2 s after the start; 50k needs longer (SVCPROXY_START_CPUPROFILE_SECONDS).
const startProfileSeconds = 6

func init() {
	pattern := os.Getenv("SVCPROXY_START_CPUPROFILE") // %d: the process ID
	if pattern == "" {
		return
	}
	secs := startProfileSeconds
	if s := os.Getenv("SVCPROXY_START_CPUPROFILE_SECONDS"); s != "" {
		if _, err := fmt.Sscan(s, &secs); err != nil {
			fmt.Fprintf(os.Stderr, "SVCPROXY_START_CPUPROFILE_SECONDS: %v\n", err)
		}
	}
	f, err := os.Create(fmt.Sprintf(pattern, os.Getpid()))
	if err != nil {
		fmt.Fprintf(os.Stderr, "start CPU profile: %v\n", err)
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(os.Stderr, "start CPU profile: %v\n", err)
		f.Close()
		return
	}
	time.AfterFunc(time.Duration(secs)*time.Second, func() {
		pprof.StopCPUProfile()
		f.Close()
	})
}

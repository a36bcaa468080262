package kiptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

// A tool run is killed when it stops making progress, not after a fixed
// time: a restore of a large table on a loaded node can take many minutes
// while it works, and killing it there would fail every full sync for
// ever. Progress is CPU time the tool consumed (its own and the kernel's
// work on its behalf) or input it read.
var (
	// stallTimeout is how long a run may go without progress: a tool
	// blocked on a lock outside its -w wait, or a call that never returns.
	stallTimeout = 2 * time.Minute
	// runLimit bounds a run that keeps consuming CPU without ending.
	runLimit = 30 * time.Minute
	// progressPoll is how often the tool's CPU time is read.
	progressPoll = 2 * time.Second
)

// errStalled and errRunLimit are why watchProgress killed a run.
var (
	errStalled  = errors.New("made no progress")
	errRunLimit = errors.New("ran too long")
)

// countingWriter counts what the tool read of its input.
type countingWriter struct {
	w io.Writer
	n atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// watchProgress cancels the run (kill) with errStalled when process pid
// consumed no CPU time and read no input (fed) for stallTimeout, and with
// errRunLimit after runLimit. It returns when ctx is done.
func watchProgress(ctx context.Context, pid int, fed *atomic.Int64, kill context.CancelCauseFunc) {
	start := time.Now()
	lastCPU, lastFed, lastAt := cpuTicks(pid), fed.Load(), start
	t := time.NewTicker(progressPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		if cpu, in := cpuTicks(pid), fed.Load(); cpu != lastCPU || in != lastFed {
			lastCPU, lastFed, lastAt = cpu, in, now
		}
		switch {
		case now.Sub(lastAt) >= stallTimeout:
			kill(fmt.Errorf("%w for %v", errStalled, stallTimeout))
			return
		case now.Sub(start) >= runLimit:
			kill(fmt.Errorf("%w (over %v)", errRunLimit, runLimit))
			return
		}
	}
}

// cpuTicks returns the user and system time process pid consumed, in clock
// ticks, or -1 when it cannot be read (the process is gone).
func cpuTicks(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields counted start after its last ')'. utime and stime are fields
	// 14 and 15, the 12th and 13th after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	fields := bytes.Fields(b[i+1:])
	if len(fields) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseInt(string(fields[11]), 10, 64)
	stime, err2 := strconv.ParseInt(string(fields[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return utime + stime
}

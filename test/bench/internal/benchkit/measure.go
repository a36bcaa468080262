package benchkit

import (
	"bufio"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Times is one operation's wall time and the CPU time (ms) that this
// process (Self*) and the child processes it waited for (Child*: nft,
// iptables-restore...) spent in it.
type Times struct {
	WallMS      float64
	ChildUserMS float64
	ChildSysMS  float64
	SelfUserMS  float64
	SelfSysMS   float64
}

// Measure runs fn and records its Times.
func Measure(fn func() error) (Times, error) {
	self0, kids0 := rusage(syscall.RUSAGE_SELF), rusage(syscall.RUSAGE_CHILDREN)
	start := time.Now()
	err := fn()
	wall := time.Since(start)
	self1, kids1 := rusage(syscall.RUSAGE_SELF), rusage(syscall.RUSAGE_CHILDREN)
	return Times{
		WallMS:      MS(wall),
		ChildUserMS: MS(tv(kids1.Utime) - tv(kids0.Utime)),
		ChildSysMS:  MS(tv(kids1.Stime) - tv(kids0.Stime)),
		SelfUserMS:  MS(tv(self1.Utime) - tv(self0.Utime)),
		SelfSysMS:   MS(tv(self1.Stime) - tv(self0.Stime)),
	}, err
}

func rusage(who int) syscall.Rusage {
	var ru syscall.Rusage
	_ = syscall.Getrusage(who, &ru)
	return ru
}

func tv(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }

// MS is d in milliseconds, to the microsecond.
func MS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// ChildrenMaxRSS is the largest resident set of any waited-for child, KiB.
func ChildrenMaxRSS() int64 { return rusage(syscall.RUSAGE_CHILDREN).Maxrss }

// ReadHWM returns this process's peak resident set (VmHWM), KiB, or -1.
func ReadHWM() int64 { return readStatusKiB("VmHWM:") }

// ReadRSS returns this process's resident set (VmRSS), KiB, or -1.
func ReadRSS() int64 { return readStatusKiB("VmRSS:") }

// ResetHWM sets this process's peak resident set to its current one, so
// that ReadHWM tells the peak of what follows. It first returns the
// heap's free pages to the kernel (a collection, then the scavenger), so
// that the peak is not hidden by pages an earlier phase left resident.
func ResetHWM() error {
	debug.FreeOSMemory()
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

func readStatusKiB(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), field); ok {
			v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return -1
			}
			return v
		}
	}
	return -1
}

package benchkit

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
)

// Stat is median, min and max of a metric over all samples.
type Stat struct{ Med, Min, Max float64 }

// Summarize returns the Stat of xs (the median of an even count is the
// mean of the middle two); zero for none.
func Summarize(xs []float64) Stat {
	if len(xs) == 0 {
		return Stat{}
	}
	s := slices.Sorted(slices.Values(xs))
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stat{Med: med, Min: s[0], Max: s[len(s)-1]}
}

// FmtStat prints s as "median [min … max]".
func FmtStat(s Stat) string {
	return fmt.Sprintf("%s [%s … %s]", FmtMS(s.Med), FmtMS(s.Min), FmtMS(s.Max))
}

// FmtMS prints milliseconds with one decimal below 100.
func FmtMS(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// Verdict is a report's "met" column.
func Verdict(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// ScaleName prints a service count: 10000 is "10k".
func ScaleName(n int) string {
	if n%1000 == 0 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// Machine describes where the numbers were taken: CPU, kernel, the
// version the tool command prints (e.g. "nft", "--version") and Go's.
func Machine(tool ...string) string {
	cpu := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	version, _ := exec.Command(tool[0], tool[1:]...).Output()
	return fmt.Sprintf("%s, %d CPUs, kernel %s, %s, %s", cpu, runtime.NumCPU(),
		strings.TrimSpace(string(kernel)), strings.TrimSpace(string(version)), runtime.Version())
}

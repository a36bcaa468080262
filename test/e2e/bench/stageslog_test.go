//go:build benche2e

package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// syncStageKeys are the durations svcproxy's "Sync stages" line carries
// (pkg/pipeline/syncer/stages.go; logged at -v=4: E2E_SVCPROXY_V=4).
var syncStageKeys = []string{"triggerToRequest", "waited", "commit", "compute", "backend", "after"}

// stageQuantiles is one stage's p50 and p99 over the churn's partial
// syncs, in seconds.
type stageQuantiles struct{ P50, P99 float64 }

// proxyLog is node n's svcproxy log (framework's logPath).
func proxyLog(c *F.Cluster, n *F.Node) string {
	return filepath.Join(c.Work, "logs", "svcproxy-"+n.Name+".log")
}

// logSize is the log's size now: where the churn's lines start.
func logSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

var stageValue = regexp.MustCompile(`(\w+)="([^"]*)"`)

// proxyStages reads the partial syncs' stages logged from offset on;
// nil when the proxy did not log them (another verbosity, another binary).
func proxyStages(path string, offset int64) (map[string]stageQuantiles, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, 0, err
	}
	values := map[string][]float64{}
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `"Sync stages"`) || !strings.Contains(line, `mode="partial"`) {
			continue
		}
		n++
		for _, m := range stageValue.FindAllStringSubmatch(line, -1) {
			if d, err := time.ParseDuration(m[2]); err == nil {
				values[m[1]] = append(values[m[1]], d.Seconds())
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, 0, fmt.Errorf("reading %s: %w", path, err)
	}
	if n == 0 {
		return nil, 0, nil
	}
	out := map[string]stageQuantiles{}
	for k, v := range values {
		sort.Float64s(v)
		out[k] = stageQuantiles{P50: quantile(v, 0.5), P99: quantile(v, 0.99)}
	}
	return out, n, nil
}

// formatStages prints the stages in pipeline order, in milliseconds.
func formatStages(st map[string]stageQuantiles) string {
	var parts []string
	for _, k := range syncStageKeys {
		if q, ok := st[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %.2f/%.2f", k, q.P50*1000, q.P99*1000))
		}
	}
	return strings.Join(parts, ", ")
}

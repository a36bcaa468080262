//go:build benche2e

package bench

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// The metric families the benchmark reads from svcproxy's :10249/metrics.
const (
	metricLastSync    = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"
	metricSyncs       = "kubeproxy_sync_proxy_rules_duration_seconds_count"
	metricProgramming = "kubeproxy_network_programming_duration_seconds"
	ipv4              = `ip_family="IPv4"`
	// ebpf mode's own.
	metricMapWrites  = "svcproxy_ebpf_map_writes_total"
	metricMapEntries = "svcproxy_ebpf_map_entries"
	// The connect-time path's (the socket hooks' maps) own time and
	// latency, ebpf mode's only.
	metricConnectTime        = "svcproxy_sync_connect_time_last_timestamp_seconds"
	metricConnectProgramming = "svcproxy_connect_time_programming_duration_seconds"
)

// mapWrites is ebpf mode's map entries written since the proxy started,
// -1 in the other modes (no such series).
func (s samples) mapWrites() float64 {
	v, ok := s[metricMapWrites+"{"+ipv4+"}"]
	if !ok {
		return -1
	}
	return v
}

// mapEntries is the entries of ebpf mode's map name, -1 when absent.
func (s samples) mapEntries(name string) float64 {
	v, ok := s[metricMapEntries+"{"+ipv4+`,map="`+name+`"}`]
	if !ok {
		return -1
	}
	return v
}

// samples are one scrape: series ("name{labels}") → value.
type samples map[string]float64

// parseMetrics reads the Prometheus text format (no client library: the
// e2e module keeps its dependencies to client-go).
func parseMetrics(text string) samples {
	out := samples{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// ipv4Value is the value of name{ip_family="IPv4"} (0 when absent).
func (s samples) ipv4Value(name string) float64 { return s[name+"{"+ipv4+"}"] }

// bucket is one cumulative histogram bucket.
type bucket struct {
	le    float64
	count float64
}

// hist is one histogram series: cumulative buckets by le, with sum and count.
type hist struct {
	buckets    []bucket
	sum, count float64
}

// histogram extracts name's IPv4 series.
func (s samples) histogram(name string) hist {
	var h hist
	prefix := name + "_bucket{"
	for series, v := range s {
		if !strings.HasPrefix(series, prefix) || !strings.Contains(series, ipv4) {
			continue
		}
		le, ok := label(series, "le")
		if !ok {
			continue
		}
		bound, err := strconv.ParseFloat(le, 64) // "+Inf" parses as +Inf
		if err == nil {
			h.buckets = append(h.buckets, bucket{bound, v})
		}
	}
	sort.Slice(h.buckets, func(i, j int) bool { return h.buckets[i].le < h.buckets[j].le })
	h.sum = s.ipv4Value(name + "_sum")
	h.count = s.ipv4Value(name + "_count")
	return h
}

func label(series, name string) (string, bool) {
	_, rest, ok := strings.Cut(series, name+`="`)
	if !ok {
		return "", false
	}
	v, _, ok := strings.Cut(rest, `"`)
	return v, ok
}

// minus is the histogram of the observations made between base and h
// (both scraped from the same process, so the buckets line up).
func (h hist) minus(base hist) hist {
	out := hist{sum: h.sum - base.sum, count: h.count - base.count}
	for i, b := range h.buckets {
		if i < len(base.buckets) {
			b.count -= base.buckets[i].count
		}
		out.buckets = append(out.buckets, b)
	}
	return out
}

// upperBound is the le of the first bucket holding the q-quantile: the
// honest answer a histogram gives ("at most this").
func (h hist) upperBound(q float64) float64 {
	rank := q * h.count
	for _, b := range h.buckets {
		if b.count >= rank && b.count > 0 {
			return b.le
		}
	}
	return math.NaN()
}

// interpolated is Prometheus' histogram_quantile: linear within the bucket
// that holds the rank, from the bucket below's bound. It assumes the
// observations are spread evenly inside that bucket.
func (h hist) interpolated(q float64) float64 {
	rank := q * h.count
	lower, below := 0.0, 0.0
	for _, b := range h.buckets {
		if b.count >= rank && b.count > 0 {
			if math.IsInf(b.le, 1) {
				return lower
			}
			if b.count == below {
				return b.le
			}
			return lower + (b.le-lower)*(rank-below)/(b.count-below)
		}
		lower, below = b.le, b.count
	}
	return math.NaN()
}

// mean is sum/count: exact, unlike the quantiles.
func (h hist) mean() float64 {
	if h.count == 0 {
		return math.NaN()
	}
	return h.sum / h.count
}

// bucketCounts prints the non-empty buckets (le:count), for the log.
func (h hist) bucketCounts() string {
	var parts []string
	prev := 0.0
	for _, b := range h.buckets {
		if n := b.count - prev; n > 0 {
			parts = append(parts, fmt.Sprintf("≤%gs:%g", b.le, n))
		}
		prev = b.count
	}
	return strings.Join(parts, " ")
}

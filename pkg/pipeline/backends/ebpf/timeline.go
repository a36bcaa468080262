package ebpf

import (
	"time"

	"k8s.io/klog/v2"
)

// timeline times the steps of a sync, for the log line of the first one
// (where a start's connect-time path spends its time) and of a grow.
type timeline struct {
	start, last time.Time
	kv          []any
}

func newTimeline() *timeline {
	now := time.Now()
	return &timeline{start: now, last: now}
}

// step records the time since the previous step as name's; a nil
// timeline records nothing.
func (t *timeline) step(name string) {
	if t == nil {
		return
	}
	now := time.Now()
	t.kv = append(t.kv, name, now.Sub(t.last))
	t.last = now
}

// log logs msg with each step's time and the whole; a nil timeline logs
// nothing.
func (t *timeline) log(msg string, kv ...any) {
	if t == nil {
		return
	}
	kv = append(kv, t.kv...)
	klog.InfoS(msg, append(kv, "elapsed", time.Since(t.start))...)
}

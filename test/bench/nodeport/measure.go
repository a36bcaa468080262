package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
)

// cpuTicks are the machine's CPU times from /proc/stat's "cpu" line, in
// USER_HZ ticks.
type cpuTicks struct{ busy, softirq uint64 }

// userHZ is the unit of /proc/stat (USER_HZ, 100 on every Linux
// architecture that matters here).
const userHZ = 100

func readCPU() (cpuTicks, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTicks{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return cpuTicks{}, fmt.Errorf("unexpected /proc/stat line %q", line)
	}
	var v [8]uint64 // user nice system idle iowait irq softirq steal
	for i := range v {
		if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
			return cpuTicks{}, err
		}
	}
	return cpuTicks{busy: v[0] + v[1] + v[2] + v[5] + v[6], softirq: v[6]}, nil
}

// sample is one measurement window.
type sample struct {
	// Forwarded is packets/s counted at the endpoint; Arrived, packets/s
	// the node's outside link received (what the sender got through).
	Forwarded, Arrived float64
	// SoftirqNS and BusyNS are CPU time per forwarded packet: the
	// machine's softirq time (where the node's receive path runs: the
	// veth's NAPI), and all of its non-idle time (the sender and other
	// load on the machine included).
	SoftirqNS, BusyNS float64
}

type reading struct {
	at      time.Time
	count   uint64
	arrived uint64
	cpu     cpuTicks
}

func (t *topo) read() (reading, error) {
	r := reading{at: time.Now()}
	var err error
	if r.count, err = readCount(t.counts); err != nil {
		return r, err
	}
	if r.cpu, err = readCPU(); err != nil {
		return r, err
	}
	err = t.node.Do(func() error {
		l, err := netlink.LinkByName(extIf)
		if err != nil {
			return err
		}
		if s := l.Attrs().Statistics; s != nil {
			r.arrived = s.RxPackets
		}
		return nil
	})
	return r, err
}

func between(a, b reading) sample {
	secs := b.at.Sub(a.at).Seconds()
	n := float64(b.count - a.count)
	s := sample{Forwarded: n / secs, Arrived: float64(b.arrived-a.arrived) / secs}
	if n > 0 {
		tick := float64(time.Second) / userHZ
		s.SoftirqNS = float64(b.cpu.softirq-a.cpu.softirq) * tick / n
		s.BusyNS = float64(b.cpu.busy-a.cpu.busy) * tick / n
	}
	return s
}

// measure runs the sender and takes runs windows of the given length
// after a warm-up (the flows' first packets, table entries created).
func (t *topo) measure(runs int, warm, window time.Duration) ([]sample, error) {
	stop := make(chan struct{})
	sent := make(chan error, 1)
	go func() { sent <- t.send(stop) }()
	out, err := t.windows(runs, warm, window, sent)
	close(stop)
	if serr := <-sent; err == nil {
		err = serr
	}
	return out, err
}

// windows reads the counters runs times; a sender that stopped ends it
// (its error is put back for measure).
func (t *topo) windows(runs int, warm, window time.Duration, sent chan error) ([]sample, error) {
	var out []sample
	time.Sleep(warm)
	for range runs {
		a, err := t.read()
		if err != nil {
			return nil, err
		}
		select {
		case err := <-sent:
			sent <- err
			return nil, fmt.Errorf("the sender stopped: %w", err)
		case <-time.After(window):
		}
		b, err := t.read()
		if err != nil {
			return nil, err
		}
		out = append(out, between(a, b))
	}
	return out, nil
}

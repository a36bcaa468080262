package desired

import "slices"

// IPVSScheduling resolves the IPVS scheduler of every service port once,
// in Compute; only IPVS mode sets it (Options.Scheduling).
type IPVSScheduling struct {
	// Default is ipvs.scheduler, already defaulted (round robin when the
	// configuration leaves it unset).
	Default string
	// Known lists the scheduler names the kernel ships. An annotation
	// ipvs.svcproxy.io/scheduler naming another is ignored: the port gets
	// Default, and Scheduler.Ignored keeps the value for the Event.
	Known []string
}

// Scheduler is the IPVS scheduler decided for one service port.
type Scheduler struct {
	// Name is the scheduler its virtual servers use.
	Name string
	// Ignored is the annotation's value when it names no scheduler of
	// Known, so that the app can tell the Service's owner; "" otherwise.
	Ignored string
}

// schedulers resolves annotations under one IPVSScheduling for one Compute;
// ports without a (valid) annotation share one value, as they share routes.
type schedulers struct {
	opts     *IPVSScheduling
	fallback *Scheduler
}

func newSchedulers(opts *IPVSScheduling) schedulers {
	if opts == nil {
		return schedulers{}
	}
	return schedulers{opts: opts, fallback: &Scheduler{Name: opts.Default}}
}

// of returns the scheduler of a port whose Service's annotation says
// annotation ("" when absent); nil outside IPVS mode.
func (s schedulers) of(annotation string) *Scheduler {
	switch {
	case s.opts == nil:
		return nil
	case annotation == "":
		return s.fallback
	case slices.Contains(s.opts.Known, annotation):
		return &Scheduler{Name: annotation}
	}
	return &Scheduler{Name: s.opts.Default, Ignored: annotation}
}

// equalSchedulers compares two decisions by value: every Compute has its
// own shared fallback.
func equalSchedulers(a, b *Scheduler) bool {
	return a == b || (a != nil && b != nil && *a == *b)
}

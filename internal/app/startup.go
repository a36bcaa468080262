package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kube-proxy/config/v1alpha1"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// processStart is when this process started, for /statusz.
var processStart = time.Now()

// checkConfig runs upstream's startup checks once this Node is known: the
// nodePortAddresses remark, the IP-family mismatches (some fatal), and the
// mode warnings with their events (mode unset: KEP-5343; ipvs: KEP-5495).
func (d *daemon) checkConfig() error {
	facts := d.nodeFacts()
	if err := config.CheckBadConfig(d.cfg, facts); err != nil {
		d.logger.Error(err, "Kube-proxy configuration may be incomplete or incorrect")
	}
	if err, fatal := config.CheckBadIPConfig(d.cfg, facts); err != nil {
		if fatal {
			return fmt.Errorf("kube-proxy configuration is incorrect: %w", err)
		}
		d.logger.Error(err, "Kube-proxy configuration may be incomplete or incorrect")
	}
	if d.cfg.Mode == proxy.ModeIPTables && d.cfg.ModeDefaulted {
		d.logger.Error(nil, config.DefaultModeMessage)
		d.events.nodeWarning("KubeProxyDefaultMode", config.DefaultModeMessage)
	}
	if d.backend.Check == nil {
		return nil
	}
	w, err := d.backend.Check(d.cfg)
	if err != nil {
		return err
	}
	if w != nil {
		d.logger.Error(nil, w.Message)
		d.events.nodeWarning(w.Reason, w.Message)
	}
	return nil
}

// nodeFacts is what the checks need: the primary family as upstream picks
// it (bindAddress if set, else the Node's first IP, else IPv4), the node IP
// of each family, the podCIDRs, and whether both families are programmed.
func (d *daemon) nodeFacts() config.NodeFacts {
	n, _ := d.node.get()
	facts := config.NodeFacts{
		PodCIDRs:  n.PodCIDRs,
		DualStack: len(d.backend.Families()) == 2,
	}
	for i, ip := range n.IPs {
		if i == 0 {
			facts.PrimaryIPv6 = ip.Is6()
		}
		if ip.Is4() && !facts.IPv4.IsValid() {
			facts.IPv4 = ip
		}
		if ip.Is6() && !facts.IPv6.IsValid() {
			facts.IPv6 = ip
		}
	}
	return facts
}

// listenerFailure is the failure of the health or metrics listener under
// bindAddressHardFail, with the reason of the Event upstream records for it.
type listenerFailure struct {
	reason string
	err    error
}

func (f listenerFailure) Error() string { return f.err.Error() }
func (f listenerFailure) Unwrap() error { return f.err }

// hardFail returns the channel a server reports its listener failure on
// under bindAddressHardFail; the failure goes to d.fatal with its reason.
func (d *daemon) hardFail(reason string) chan<- error {
	ch := make(chan error, 1)
	go func() { d.fatal <- listenerFailure{reason: reason, err: <-ch} }()
	return ch
}

// awaitFatal blocks until ctx ends or something fatal happens. As
// upstream's Run, only the first fatal error counts, and a listener failure
// is recorded as a Warning Event about this Node then, after the "Starting"
// one; unlike upstream's, whose process exits before its event broadcaster
// sends it, the Event is sent before the error is returned.
func (d *daemon) awaitFatal(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-d.fatal:
		var lf listenerFailure
		if errors.As(err, &lf) {
			if werr := d.events.finalWarning(ctx, lf.reason, err.Error()); werr != nil {
				d.logger.Error(werr, "Recording the Event failed", "reason", lf.reason)
			}
		}
		return err
	}
}

// nodeWarning records a Warning event about this Node, as upstream's
// startup warnings are recorded (action StartKubeProxy).
func (e *eventSink) nodeWarning(reason, note string) {
	ref := &v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: e.nodeName}
	e.recorder.Eventf(ref, nil, v1.EventTypeWarning, reason, "StartKubeProxy", "%s", note)
}

// configzObject is the running configuration as upstream's /configz shows
// it: the v1alpha1 object with apiVersion and kind set.
func configzObject(cfg *config.Config) *v1alpha1.KubeProxyConfiguration {
	obj := cfg.Versioned.DeepCopy()
	obj.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind("KubeProxyConfiguration"))
	return obj
}

package nodestatus

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteStatus prints s for a human, in 80 columns; now dates the ages.
func WriteStatus(w io.Writer, s Status, now time.Time) error {
	var b strings.Builder
	fmt.Fprintf(&b, "svcproxy %s on node %s, mode %s", s.Version, s.Node, s.Mode)
	if s.IPTablesFlavour != "" {
		fmt.Fprintf(&b, " (iptables %s)", s.IPTablesFlavour)
	}
	fmt.Fprintf(&b, "\nstarted %s, %s\n\n", ago(s.Started, now), healthWord(s.Healthy))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FAMILY\tHEALTH\tLAST SYNC\tKIND\tTOOK\tPORTS\tENDPOINTS\tQUARANTINED")
	for _, f := range s.Families {
		last, kind := "never", "-"
		if f.LastSync != nil {
			last, kind = ago(*f.LastSync, now), f.LastSyncMode
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", f.Family, healthWord(f.Healthy), last, kind,
			orDash(f.LastDuration), f.ServicePorts, f.Endpoints, len(f.Quarantined))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, f := range s.Families {
		if f.LastError != "" {
			fmt.Fprintf(&b, "\n%s: the last sync failed %s:\n  %s\n", f.Family, ago(*f.LastAttempt, now), f.LastError)
		}
	}
	writeQuarantine(&b, s.Families, now)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeQuarantine lists the quarantined ports with their errors.
func writeQuarantine(b *strings.Builder, families []Family, now time.Time) {
	header := false
	for _, f := range families {
		for _, q := range f.Quarantined {
			if !header {
				b.WriteString("\nquarantined service ports (the kernel rejected their rules):\n")
				header = true
			}
			fmt.Fprintf(b, "  %s %s (%s), since %s; the kernel serves %s\n    %s\n",
				q.ServicePortName(), q.Protocol, f.Family, ago(q.Since, now), q.Kernel, q.Error)
		}
	}
	if header {
		b.WriteString("  (`svcproxy services --quarantined -o wide` shows the rejected versions)\n")
	}
}

func healthWord(ok bool) string {
	if ok {
		return "healthy"
	}
	return "UNHEALTHY"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ago is how long before now t was, in a human's unit ("42s ago").
func ago(t, now time.Time) string {
	d := now.Sub(t)
	switch {
	case t.IsZero():
		return "never"
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

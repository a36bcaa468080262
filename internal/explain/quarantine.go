package explain

import (
	"fmt"
	"time"
)

// Quarantine says that the Service port a packet is for is quarantined:
// the kernel rejected its rules, so what the State shows for it is not
// what its Service asks.
type Quarantine struct {
	ServicePort string    `json:"servicePort"`
	Since       time.Time `json:"since"`
	Error       string    `json:"error"`
	// Kernel is what the kernel serves for the port meanwhile.
	Kernel string `json:"kernel"`
}

// Quarantined records q in e, with its reason.
func (e *Explanation) Quarantined(q Quarantine) {
	e.Quarantine = &q
	e.because("%s is quarantined: the kernel rejected its rules (%s) at %s; the kernel serves %s for it meanwhile",
		q.ServicePort, q.Error, q.Since.UTC().Format(time.RFC3339), q.Kernel)
}

func (q *Quarantine) line() string {
	return fmt.Sprintf("quarantine: %s, rules rejected by the kernel since %s (serving %s)",
		q.ServicePort, q.Since.UTC().Format(time.RFC3339), q.Kernel)
}

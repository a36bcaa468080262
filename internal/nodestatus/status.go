// Package nodestatus is what `svcproxy status` and `svcproxy services` show:
// the daemon's view of itself on this node (mode, each IP family's last
// sync, health, the service ports the kernel rejected), its wire form on
// the local API's socket, and the text those commands print.
package nodestatus

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/svcproxy/svcproxy/internal/debugstate"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Path is where the status is served on the local API's socket.
const Path = "/status"

// Status is the daemon's report on this node.
type Status struct {
	Version string    `json:"version"`
	Mode    string    `json:"mode"`
	Node    string    `json:"node"`
	Started time.Time `json:"started"`
	// IPTablesFlavour is "nft" or "legacy" in iptables and IPVS modes.
	IPTablesFlavour string `json:"iptablesFlavour,omitempty"`
	// Healthy is what /healthz answers, less the node's eligibility.
	Healthy  bool     `json:"healthy"`
	Families []Family `json:"families"`
}

// Family is one IP family's sync loop.
type Family struct {
	Family  proxy.IPFamily `json:"family"`
	Healthy bool           `json:"healthy"`
	// LastSync is when the last successful sync ended (nil: none yet),
	// LastSyncMode what it reconciled: partial, full or recovery.
	LastSync     *time.Time `json:"lastSync,omitempty"`
	LastSyncMode string     `json:"lastSyncMode,omitempty"`
	// LastAttempt is when the last attempt ended, LastDuration how long
	// it took and LastError why it failed ("" when it succeeded).
	LastAttempt  *time.Time `json:"lastAttempt,omitempty"`
	LastDuration string     `json:"lastDuration,omitempty"`
	LastError    string     `json:"lastError,omitempty"`
	// ServicePorts and Endpoints count what the last successful sync
	// programmed (endpoints: distinct address and port pairs).
	ServicePorts int           `json:"servicePorts"`
	Endpoints    int           `json:"endpoints"`
	Quarantined  []Quarantined `json:"quarantined"`
}

// Quarantined is a service port kept out of the dataplane because the
// kernel rejected its rules.
type Quarantined struct {
	Namespace string         `json:"namespace"`
	Name      string         `json:"name"`
	PortName  string         `json:"portName,omitempty"`
	Protocol  proxy.Protocol `json:"protocol"`
	Error     string         `json:"error"`
	Since     time.Time      `json:"since"`
	// Kernel says what the kernel serves for the port meanwhile.
	Kernel string `json:"kernel"`
	// Rejected is the version the kernel refused; absent while a port
	// quarantined by a previous process has not been met again.
	Rejected *debugstate.ServicePort `json:"rejected,omitempty"`
}

// What a quarantined port's Kernel field says.
const (
	KernelServesNothing  = "nothing"
	KernelServesPrevious = "the previous version"
	// A rejected update with load-balancer IPs whose previous version is
	// served without them: had the update narrowed
	// loadBalancerSourceRanges, the wider ranges must not stay open.
	KernelServesPreviousWithoutLB = "the previous version, without load-balancer IPs"
)

// ServicePortName returns the quarantined port's name.
func (q Quarantined) ServicePortName() proxy.ServicePortName {
	return proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: q.Namespace, Name: q.Name},
		Port: q.PortName, Protocol: q.Protocol}
}

// Handler serves status() as JSON.
func Handler(status func() Status) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "only GET is allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if req.Method == http.MethodHead {
			return
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		// An error here is the client going away: nothing to tell it.
		_ = enc.Encode(status())
	})
}

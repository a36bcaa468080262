package proxy

// ExpectedSize is an estimate of how large one IP family's first State
// will be, made before the initial lists end from what their first pages
// said: a backend that creates something sized from the State (ebpf
// mode's maps) can create it at that size while the rest of the lists
// arrive. It is only an estimate: the first sync still makes room when the
// State turns out larger.
type ExpectedSize struct {
	// ServicePorts is how many service ports have a cluster IP of the
	// family.
	ServicePorts int
	// EndpointPorts is how many endpoint and port pairs the family's
	// EndpointSlices hold: an endpoint of a slice with two ports counts
	// twice.
	EndpointPorts int
}

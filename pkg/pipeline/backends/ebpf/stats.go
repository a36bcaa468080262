package ebpf

// Stats is what the Proxier's last successful sync left in the kernel, for
// metrics.
type Stats struct {
	// Entries and Capacity are per map name (services, backends).
	Entries  map[string]int
	Capacity map[string]uint32
	// Links is the number of programs attached to the cgroup.
	Links int
	// Writes counts the map entries written or deleted since the Proxier
	// started, failed syncs' included: an unchanged restart adds none.
	Writes uint64
}

// published records, after a successful sync, that the programs run and
// what the maps hold. The counts come from the store's record of the
// maps' contents, so that a scrape reads no map.
func (p *Proxier) published() {
	p.programmed.Store(true)
	st := &Stats{Entries: map[string]int{}, Capacity: map[string]uint32{}, Links: len(p.kernel.links), Writes: p.writes}
	st.Entries[mapServices] = p.store.records.KernelLen()
	st.Entries[mapBackends] = p.store.slots.KernelLen()
	for _, name := range []string{mapServices, mapBackends} {
		st.Capacity[name] = p.kernel.mapOf(name).MaxEntries()
	}
	p.stats.Store(st)
}

// Stats returns what the last successful sync left, nil before one.
func (p *Proxier) Stats() *Stats { return p.stats.Load() }

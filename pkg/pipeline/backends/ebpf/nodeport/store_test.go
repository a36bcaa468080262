package nodeport

import (
	"slices"
	"testing"
)

// logger is a map that logs each batch it is given: "put slot", ...
type logger[K, V any] struct {
	what string
	log  *[]string
}

func (l logger[K, V]) Put([]K, []V) error { *l.log = append(*l.log, "put "+l.what); return nil }
func (l logger[K, V]) Del([]K) error      { *l.log = append(*l.log, "del "+l.what); return nil }

// TestWriteOrder: no frontend ever counts a slot, Maglev table, source
// range, affinity member, DSR tunnel or peer that is not written, or
// masquerades with a configuration not yet written; and
// a second write of the same contents writes nothing.
func TestWriteOrder(t *testing.T) {
	var log []string
	tb := tables[[4]byte]{frontends: logger[svcKey, svcVal]{"frontend", &log}, slots: logger[beKey, beVal]{"slot", &log},
		maglev: logger[uint64, maglevVal]{"maglev", &log}, ranges: logger[srcKey, uint32]{"range", &log},
		members: logger[memberKey, uint32]{"member", &log}, tunnels: logger[[4]byte, tunnelOf[[4]byte]]{"tunnel", &log},
		peers: logger[[4]byte, peerVal]{"peer", &log}, config: logger[uint32, cfgVal]{"config", &log}}
	contents := func(id uint64, addr byte) *Contents {
		be := beVal{Addr: [4]byte{10, 0, 0, addr}}
		return &Contents{
			Services: map[svcKey]svcVal{{Addr: [4]byte{192, 0, 2, addr}}: {ID: id, Count: 1}},
			Backends: map[beKey]beVal{{ID: id}: be},
			Maglev:   map[uint64]maglevVal{id: {Size: 16381, Sum: uint64(addr)}},
			Ranges:   map[srcKey]uint32{{Prefixlen: 64, ID: [2]uint32{uint32(id)}}: 1},
			Members:  map[memberKey]uint32{{ID: [2]uint32{uint32(id)}, Addr: be.Addr}: 1},
			Tunnels:  map[[4]byte]tunnelOf[[4]byte]{be.Addr: {Node: [4]byte{192, 0, 2, 100 + addr}}},
			Peers:    map[[4]byte]peerVal{{192, 0, 2, 100 + addr}: 1},
			Config:   cfgVal{SNAT: [4]byte{192, 0, 2, addr}},
		}
	}
	s := newStore[[4]byte]()
	for _, c := range []struct {
		contents *Contents
		want     []string
	}{
		{contents(1, 1), []string{"put slot", "put maglev", "put range", "put member", "put tunnel", "put peer", "put config",
			"put frontend"}},
		{contents(1, 1), nil},
		{contents(2, 2), []string{"put slot", "put maglev", "put range", "put member", "put tunnel", "put peer", "put config",
			"put frontend", "del frontend", "del peer", "del tunnel", "del member", "del range", "del maglev", "del slot"}},
	} {
		log = nil
		s.claim(c.contents)
		if _, err := s.write(tb); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(log, c.want) {
			t.Errorf("writing %v: %v, want %v", c.contents.Services, log, c.want)
		}
	}
}

// TestConntrackTableBounded: the conntrack table grows with the endpoints
// the State serves, between its floor and its bound; the bound holds at
// 50k Services × 10 endpoints, where per endpoint it would be 2^27
// entries, preallocated.
func TestConntrackTableBounded(t *testing.T) {
	contents := func(frontends, eps int) *Contents {
		c := newContents[[4]byte]()
		for i := range frontends {
			c.Services[svcKey{Addr: [4]byte{198, 18, byte(i >> 8), byte(i)}, Port: netPort(uint16(i)), Proto: 6}] = svcVal{Count: uint32(eps)}
		}
		return &c
	}
	for _, tc := range []struct {
		frontends int
		want      uint32
	}{{1, minCTEntries}, {300, 1 << 20}, {50000, maxCTEntries}} {
		sz := sizesFor(contents(tc.frontends, 10), minEntries)
		if sz.ct != tc.want || sz.affinity != tc.want/ctPerClient {
			t.Errorf("%d frontends × 10 endpoints: conntrack %d, affinity %d entries; want %d, %d",
				tc.frontends, sz.ct, sz.affinity, tc.want, tc.want/ctPerClient)
		}
	}
}

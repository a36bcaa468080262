package knft

import "testing"

// TestEncodeRejects: what the encoder cannot spell exactly is an error (the
// element then goes through nft), never a guess.
func TestEncodeRejects(t *testing.T) {
	v4 := &layout{key: []field{{typeIPAddr, 4}, {typeInetProto, 1}, {typeInetService, 2}}, verdict: true}
	for _, c := range []struct{ key, value string }{
		{"10.0.0.1 . tcp", "drop"},             // too few fields
		{"10.0.0.1 . tcp . 80 . 1", "drop"},    // too many
		{"fd00::1 . tcp . 80", "drop"},         // wrong family
		{"10.0.0.1 . tcp . 65536", "drop"},     // port out of range
		{"10.0.0.1 . tcp . 80", "goto"},        // goto without chain
		{"10.0.0.1 . tcp . 80", "reject"},      // not a verdict
		{"10.0.0.1 . tcp . 80-90", "drop"},     // a range in a set without intervals
		{"10.0.0.0/8 . tcp . 80", "goto x"},    // a prefix likewise
		{"10.0.0.1 . bogus . 80", "goto x"},    // unknown protocol name
		{"10.0.0.1 . tcp . 80", "drop . drop"}, // not one verdict
	} {
		if _, err := v4.appendElem(nil, c.key, c.value, true); err == nil {
			t.Errorf("{%s : %s}: encoded, want an error", c.key, c.value)
		}
	}
}

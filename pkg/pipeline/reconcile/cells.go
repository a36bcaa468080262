package reconcile

// The cells of an open-addressing index (a table's keys, its owners):
// each holds a position plus one, 0 when empty; their number is a power of
// two, and a value's home is its hash masked by that number less one.

// rehashCells returns n cells holding the positions old holds, each at
// the first empty cell from its home.
func rehashCells(old []int32, n int, home func(c int32) int) []int32 {
	cells := make([]int32, n)
	mask := n - 1
	for _, c := range old {
		if c == 0 {
			continue
		}
		i := home(c) & mask
		for cells[i] != 0 {
			i = (i + 1) & mask
		}
		cells[i] = c
	}
	return cells
}

// emptyCell empties cells[hole]. The cells after it in its probe run move
// back, so that no run has a hole (backward-shift deletion).
func emptyCell(cells []int32, hole int, home func(c int32) int) {
	mask := len(cells) - 1
	for i := (hole + 1) & mask; cells[i] != 0; i = (i + 1) & mask {
		// The cell at i may fill the hole unless its home lies after
		// the hole, cyclically up to i.
		if h := home(cells[i]) & mask; (i-h)&mask >= (i-hole)&mask {
			cells[hole] = cells[i]
			hole = i
		}
	}
	cells[hole] = 0
}

package reconcile

// KeepSlots orders want, the values of a group of numbered slots (a
// service's endpoints, as render listed them), against the values the
// kernel holds in the group's slots 0 to held-1 (have): a value held in a
// slot below len(want) keeps it; the others fill the free slots, first
// those held in slots the group no longer has (it shrank: they move down
// into the holes), then the new ones, each in want's order. So a change
// rewrites only the slots it must, and what remembers a client's slot
// (ClientIP affinity) survives other values' coming and going.
//
// It returns the new order, or nil when want is the kernel's already (the
// usual case of a full sync). Values are unique within want.
func KeepSlots[V comparable](want []V, held int, have func(slot int) (V, bool)) []V {
	if held == len(want) && heldAsIs(want, have) {
		return nil
	}
	n := len(want)
	find := indexIn(want)
	out := make([]V, n)
	filled := make([]bool, n)
	placed := make([]bool, n) // want[i] has its slot, or is one of moved
	var moved []int
	for s := range held {
		v, ok := have(s)
		i := -1
		if ok {
			i = find(v)
		}
		switch {
		case i < 0 || placed[i]:
		case s < n:
			out[s], filled[s], placed[i] = v, true, true
		default:
			moved, placed[i] = append(moved, i), true
		}
	}
	next := 0
	fill := func(i int) {
		for filled[next] {
			next++
		}
		out[next], filled[next] = want[i], true
	}
	for _, i := range moved {
		fill(i)
	}
	for i := range want {
		if !placed[i] {
			fill(i)
		}
	}
	return out
}

func heldAsIs[V comparable](want []V, have func(slot int) (V, bool)) bool {
	for s, w := range want {
		if v, ok := have(s); !ok || v != w {
			return false
		}
	}
	return true
}

// indexIn returns a function that finds v's index in values (-1: none): a
// scan for a few values, a map for many.
func indexIn[V comparable](values []V) func(v V) int {
	if len(values) <= 16 {
		return func(v V) int {
			for i := range values {
				if values[i] == v {
					return i
				}
			}
			return -1
		}
	}
	index := make(map[V]int, len(values))
	for i, v := range values {
		index[v] = i
	}
	return func(v V) int {
		if i, ok := index[v]; ok {
			return i
		}
		return -1
	}
}

package reconcile

// The entries of a Table, in chunks of a fixed number each: a position
// names its chunk and its place in it. A table grows without copying its
// entries (a cold sync adds every key, and a slice grown by append copies
// a large one many times over) and holds at most a chunk's room beyond
// its keys. The first chunk grows by doubling up to its full size, so that
// a table of a few keys holds a few entries; the others are made whole. A grouped table keeps its
// entries' links (groups.go) in chunks of the same shape, by position.

// chunkBits is the log2 of a chunk's number of entries.
const chunkBits = 10

const chunkLen = 1 << chunkBits

// chunked holds the elements at positions 0 to n-1.
type chunked[T any] struct {
	chunks [][]T
	n      int
}

// at is the element at pos, which is below n.
func (s *chunked[T]) at(pos int32) *T {
	return &s.chunks[pos>>chunkBits][pos&(chunkLen-1)]
}

// add appends e and returns its position.
func (s *chunked[T]) add(e T) int32 {
	c := s.n >> chunkBits
	if c == len(s.chunks) {
		var chunk []T
		if c > 0 {
			// A table past its first chunk is a large one: its next
			// chunk is made whole rather than grown by copies.
			chunk = make([]T, 0, chunkLen)
		}
		s.chunks = append(s.chunks, chunk)
	}
	last := s.chunks[c]
	if len(last) == cap(last) {
		grown := make([]T, len(last), min(max(2*cap(last), 8), chunkLen))
		copy(grown, last)
		last = grown
	}
	s.chunks[c] = append(last, e)
	s.n++
	return int32(s.n - 1)
}

// reserve makes room for n elements in an empty store: full chunks, the
// last one of the size it needs.
func (s *chunked[T]) reserve(n int) {
	s.chunks, s.n = s.chunks[:0], 0
	for ; n > 0; n -= chunkLen {
		s.chunks = append(s.chunks, make([]T, 0, min(n, chunkLen)))
	}
}

// all yields each element with its position, in order.
func (s *chunked[T]) all(yield func(int32, *T) bool) {
	for c, chunk := range s.chunks {
		for i := range chunk {
			if !yield(int32(c<<chunkBits|i), &chunk[i]) {
				return
			}
		}
	}
}

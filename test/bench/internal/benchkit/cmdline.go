package benchkit

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ParseScales parses a comma-separated list of service counts, each in
// 1..limit.
func ParseScales(s string, limit int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || n > limit {
			return nil, fmt.Errorf("bad scale %q (1..%d)", f, limit)
		}
		out = append(out, n)
	}
	return out, nil
}

// WriteJSON writes v, indented, to path.
func WriteJSON(path string, v any) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

package benchkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
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

// RunChild runs cmd (a benchmark's measuring child) and decodes the JSON
// it prints into result; a failure carries the last lines of its stderr.
func RunChild(cmd *exec.Cmd, result any) error {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s", err, lastLines(stderr.String(), 5))
	}
	if err := json.Unmarshal(stdout.Bytes(), result); err != nil {
		return fmt.Errorf("child output: %w", err)
	}
	return nil
}

// lastLines joins the last n lines of s with " | " (a child's stderr in
// one error line).
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

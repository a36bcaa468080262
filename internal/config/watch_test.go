package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestWatchReportsChanges(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(path string) error
	}{
		{"write", func(p string) error { return os.WriteFile(p, []byte("mode: ipvs\n"), 0o600) }},
		{"rename", func(p string) error { return os.Rename(p, p+".old") }},
		{"remove", os.Remove},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.conf")
			if err := os.WriteFile(path, []byte(header), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ch := Watch(ctx, path)
			if err := tc.change(path); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-ch:
				if !errors.Is(err, ErrConfigFileChanged) {
					t.Fatalf("got %v, want ErrConfigFileChanged", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no report after the file changed")
			}
		})
	}
}

func TestWatchQuietUntilCancelled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.conf")
	if err := os.WriteFile(path, []byte(header), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := Watch(ctx, path)
	if _, err := os.ReadFile(path); err != nil { // reading is not a change
		t.Fatal(err)
	}
	select {
	case err := <-ch:
		t.Fatalf("unexpected report %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	select {
	case err, ok := <-ch:
		if ok {
			t.Fatalf("got %v after cancel, want a closed channel", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("channel not closed after cancel")
	}
}

func TestWatchMissingFile(t *testing.T) {
	ch := Watch(context.Background(), filepath.Join(t.TempDir(), "absent"))
	if err := <-ch; err == nil || errors.Is(err, ErrConfigFileChanged) {
		t.Fatalf("got %v, want a watch setup error", err)
	}
}

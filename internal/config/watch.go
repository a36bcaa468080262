package config

import (
	"context"
	"errors"
	"fmt"

	"github.com/fsnotify/fsnotify"
)

// ErrConfigFileChanged is what Watch reports when the file changes. Like
// upstream, svcproxy has no hot reload: the caller exits with this error so
// that the pod restarts with the new configuration.
var ErrConfigFileChanged = errors.New("content of the proxy server's configuration file was updated")

// Watch watches the file at path and sends one error on the returned
// channel: ErrConfigFileChanged when the file is written, renamed or
// removed (a ConfigMap update swaps a symlink, which shows up as a removal
// of the watched file), or the watcher's own failure. The channel is closed
// after that, or when ctx is done.
func Watch(ctx context.Context, path string) <-chan error {
	out := make(chan error, 1)
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		out <- fmt.Errorf("watching config file: %w", err)
		close(out)
		return out
	}
	if err := watcher.Add(path); err != nil {
		_ = watcher.Close()
		out <- fmt.Errorf("watching config file %q: %w", path, err)
		close(out)
		return out
	}
	go func() {
		defer close(out)
		defer watcher.Close()
		if err := waitForChange(ctx, watcher); err != nil {
			out <- err
		}
	}()
	return out
}

// waitForChange returns the error to report, or nil when ctx ended first.
func waitForChange(ctx context.Context, w *fsnotify.Watcher) error {
	const changed = fsnotify.Write | fsnotify.Rename | fsnotify.Remove | fsnotify.Create
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("config file watcher closed")
			}
			if ev.Op&changed != 0 {
				return fmt.Errorf("%w (%s)", ErrConfigFileChanged, ev)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("config file watcher closed")
			}
			return fmt.Errorf("watching config file: %w", err)
		}
	}
}

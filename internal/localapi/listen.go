// Package localapi serves svcproxy's local API: HTTP on a unix socket that
// only root on the node can open (the socket is 0600, its directory 0700).
// It is for operators' tools on the node (`svcproxy explain` reads the
// programmed state from it), and carries what must not reach the network:
// the state lists every Service, endpoint and source range of the cluster,
// and any process of the node's network namespace (every hostNetwork pod)
// can reach the metrics port.
package localapi

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
)

// DefaultPath is where the daemon listens and its clients connect unless
// --state-socket says otherwise.
const DefaultPath = "/run/svcproxy/svcproxy.sock"

// maxPath is the longest path a unix socket can be bound at (sun_path, less
// its terminating NUL).
const maxPath = 107

// listener is a unix listener whose socket file is removed on Close, unless
// another process has replaced it meanwhile.
type listener struct {
	*net.UnixListener
	path string
	file fs.FileInfo // the socket as created, to recognize it at Close
	once sync.Once
	err  error
}

// listen creates the socket at path with mode 0600, replacing a stale socket
// (from a process that was killed) and refusing to replace anything else.
// Its directory is created with mode 0700 if missing.
//
// The socket is bound in a private (0700) temporary directory, made 0600
// there, and renamed into place: bound directly at path it would exist with
// the umask's mode until the chmod, and a client that connected in between
// would be served later. The rename also replaces a stale socket atomically.
func listen(path string) (*listener, error) {
	if len(path) > maxPath {
		return nil, fmt.Errorf("socket path %s is %d bytes long, more than a unix socket's %d", path, len(path), maxPath)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the socket's directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() != fs.ModeSocket {
		return nil, fmt.Errorf("%s exists and is not a socket (%v): not replacing it", path, fi.Mode().Type())
	}
	// ".", then a number of at most 10 digits: with "/s" in it, the
	// temporary path is no longer than the default path in the same dir.
	tmpDir, err := os.MkdirTemp(dir, ".")
	if err != nil {
		return nil, fmt.Errorf("creating the socket: %w", err)
	}
	defer os.RemoveAll(tmpDir)
	l, err := bindPrivate(filepath.Join(tmpDir, "s"))
	if err != nil {
		return nil, err
	}
	if err := os.Rename(filepath.Join(tmpDir, "s"), path); err != nil {
		l.Close()
		return nil, fmt.Errorf("moving the socket into place: %w", err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		l.Close()
		return nil, err
	}
	return &listener{UnixListener: l, path: path, file: fi}, nil
}

// bindPrivate listens on a unix socket at path and makes it mode 0600. The
// listener will not unlink path on Close: the socket is moved from there.
func bindPrivate(path string) (*net.UnixListener, error) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listening: %w", err)
	}
	l.SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("restricting the socket to its owner: %w", err)
	}
	return l, nil
}

// Close stops listening and removes the socket file if it is still this
// listener's: a successor that already replaced it (a rolling update that
// starts the new process before the old one ends) keeps its own.
func (l *listener) Close() error {
	l.once.Do(func() {
		l.err = l.UnixListener.Close()
		if fi, err := os.Lstat(l.path); err == nil && os.SameFile(fi, l.file) {
			if err := os.Remove(l.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				l.err = errors.Join(l.err, err)
			}
		}
	})
	return l.err
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackUnpack packs two small trees and unpacks the image again: files,
// modes, symlinks and hard links survive, and the later layer wins.
func TestPackUnpack(t *testing.T) {
	tmp := t.TempDir()
	base, app := filepath.Join(tmp, "base"), filepath.Join(tmp, "app")
	mustWrite(t, filepath.Join(base, "usr/sbin/nft"), "nft", 0o755)
	mustWrite(t, filepath.Join(base, "etc/motd"), "base", 0o644)
	if err := os.Link(filepath.Join(base, "usr/sbin/nft"), filepath.Join(base, "usr/sbin/nft-hard")); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(app, "usr/local/bin/svcproxy"), "svcproxy", 0o755)
	mustWrite(t, filepath.Join(app, "etc/motd"), "app", 0o644)
	if err := os.Symlink("svcproxy", filepath.Join(app, "usr/local/bin/kube-proxy")); err != nil {
		t.Fatal(err)
	}
	layoutDir, root := filepath.Join(tmp, "oci"), filepath.Join(tmp, "root")
	if err := pack(packOptions{base: base, app: app, out: layoutDir, ref: "svcproxy:test", version: "v0", arch: "amd64"}); err != nil {
		t.Fatal(err)
	}
	if err := unpack(layoutDir, "svcproxy:test", "amd64", root); err != nil {
		t.Fatal(err)
	}
	checkFile(t, filepath.Join(root, "usr/local/bin/kube-proxy"), "svcproxy")
	checkFile(t, filepath.Join(root, "usr/sbin/nft-hard"), "nft")
	checkFile(t, filepath.Join(root, "etc/motd"), "app")
	if l, err := os.Readlink(filepath.Join(root, "usr/local/bin/kube-proxy")); err != nil || l != "svcproxy" {
		t.Errorf("kube-proxy link = %q, %v; want svcproxy", l, err)
	}
	if fi, err := os.Stat(filepath.Join(root, "usr/local/bin/svcproxy")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("svcproxy mode = %v, %v; want 0755", fi.Mode(), err)
	}
	if err := unpack(layoutDir, "other:tag", "amd64", filepath.Join(tmp, "x")); err == nil {
		t.Error("unpacking an unknown ref succeeded")
	}
}

func TestWithinRefusesEscapes(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("/", filepath.Join(dir, "host")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"../etc/passwd", "host/etc/passwd", "a/../../b"} {
		if _, err := within(dir, name); err == nil {
			t.Errorf("within(%q) accepted an escape", name)
		}
	}
	if got, err := within(dir, "usr/bin/nft"); err != nil || !strings.HasPrefix(got, dir) {
		t.Errorf("within(usr/bin/nft) = %q, %v", got, err)
	}
}

func mustWrite(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func checkFile(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || string(b) != want {
		t.Errorf("%s = %q, %v; want %q", path, b, err, want)
	}
}

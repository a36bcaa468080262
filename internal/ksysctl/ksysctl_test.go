package ksysctl

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestProcPaths(t *testing.T) {
	p := Proc{Root: "/r"}
	for name, want := range map[string]string{
		"net.netfilter.nf_conntrack_max":               "/r/proc/sys/net/netfilter/nf_conntrack_max",
		"/sys/module/nf_conntrack/parameters/hashsize": "/r/sys/module/nf_conntrack/parameters/hashsize",
	} {
		if got := p.Path(name); got != want {
			t.Errorf("Path(%q) = %q, want %q", name, got, want)
		}
	}
	if got := (Proc{}).Path("net.ipv4.conf.all.route_localnet"); got != "/proc/sys/net/ipv4/conf/all/route_localnet" {
		t.Errorf("default root: %q", got)
	}
}

func TestProcReadWrite(t *testing.T) {
	root := t.TempDir()
	p := Proc{Root: root}
	file := p.Path("net.netfilter.nf_conntrack_max")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("131072\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, err := p.ReadInt("net.netfilter.nf_conntrack_max"); err != nil || v != 131072 {
		t.Fatalf("read: %d, %v", v, err)
	}
	if err := p.WriteInt("net.netfilter.nf_conntrack_max", 262144); err != nil {
		t.Fatal(err)
	}
	if v, _ := p.ReadInt("net.netfilter.nf_conntrack_max"); v != 262144 {
		t.Fatalf("after write: %d", v)
	}
	if err := p.WriteInt("net.netfilter.missing", 1); err == nil || errors.Is(err, ErrNotWritable) {
		t.Fatalf("missing tunable: %v; want a plain error", err)
	}
	if os.Geteuid() != 0 { // root ignores file modes
		if err := os.Chmod(file, 0o444); err != nil {
			t.Fatal(err)
		}
		if err := p.WriteInt("net.netfilter.nf_conntrack_max", 1); !errors.Is(err, ErrNotWritable) {
			t.Fatalf("read-only file: %v; want ErrNotWritable", err)
		}
	}
}

func TestFake(t *testing.T) {
	f := NewFake(map[string]int{"a": 1, "b": 2})
	f.ReadOnly["b"] = true
	if err := f.WriteInt("a", 5); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteInt("b", 5); !errors.Is(err, ErrNotWritable) {
		t.Fatalf("read-only: %v", err)
	}
	if _, err := f.ReadInt("c"); err == nil {
		t.Fatal("missing tunable read")
	}
	if len(f.Writes) != 1 || f.Writes[0] != "a=5" {
		t.Fatalf("writes %v", f.Writes)
	}
}

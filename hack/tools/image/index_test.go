package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// TestIndex joins two architectures' layouts into one index: the layout
// names one index, each platform unpacks to its own tree, and an
// architecture the index lacks is an error.
func TestIndex(t *testing.T) {
	tmp := t.TempDir()
	var layouts []string
	for _, arch := range []string{"amd64", "arm64"} {
		base, app := filepath.Join(tmp, arch, "base"), filepath.Join(tmp, arch, "app")
		mustWrite(t, filepath.Join(base, "usr/sbin/nft"), "nft "+arch, 0o755)
		mustWrite(t, filepath.Join(app, "usr/local/bin/svcproxy"), "svcproxy "+arch, 0o755)
		dir := filepath.Join(tmp, arch, "oci")
		if err := pack(packOptions{base: base, app: app, out: dir, ref: "svcproxy:v1", version: "v1", arch: arch}); err != nil {
			t.Fatal(err)
		}
		layouts = append(layouts, dir)
	}
	out := filepath.Join(tmp, "oci")
	if err := index(out, "svcproxy:v1", layouts); err != nil {
		t.Fatal(err)
	}
	var top struct {
		Manifests []struct {
			MediaType   string            `json:"mediaType"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	b, err := os.ReadFile(filepath.Join(out, "index.json"))
	if err != nil || json.Unmarshal(b, &top) != nil {
		t.Fatalf("index.json: %s, %v", b, err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].MediaType != "application/vnd.oci.image.index.v1+json" ||
		top.Manifests[0].Annotations[refAnnotation] != "svcproxy:v1" {
		t.Fatalf("index.json = %s, want one image index named svcproxy:v1", b)
	}
	p, err := layout.FromPath(out)
	if err != nil {
		t.Fatal(err)
	}
	idx, _ := p.ImageIndex()
	m, _ := idx.IndexManifest()
	inner, err := idx.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, _ := inner.IndexManifest()
	if len(im.Manifests) != 2 || im.Manifests[0].Platform.Architecture != "amd64" || im.Manifests[1].Platform.Architecture != "arm64" {
		t.Errorf("platforms %+v, want amd64 and arm64", im.Manifests)
	}
	for _, d := range im.Manifests {
		if d.ArtifactType != "" {
			t.Errorf("%s: artifactType %q, want none (an image, not an artifact)", d.Platform.Architecture, d.ArtifactType)
		}
	}
	for _, arch := range []string{"amd64", "arm64"} {
		root := filepath.Join(tmp, "root-"+arch)
		if err := unpack(out, "svcproxy:v1", arch, root); err != nil {
			t.Fatal(err)
		}
		checkFile(t, filepath.Join(root, "usr/sbin/nft"), "nft "+arch)
		checkFile(t, filepath.Join(root, "usr/local/bin/svcproxy"), "svcproxy "+arch)
	}
	if err := unpack(out, "svcproxy:v1", "s390x", filepath.Join(tmp, "x")); err == nil {
		t.Error("unpacking an architecture the index lacks succeeded")
	}
}

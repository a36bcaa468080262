package main

import (
	"fmt"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// index writes a layout at out holding one image index, named ref, over the
// image named ref in each of the per-architecture layouts: what a registry
// serves as one multi-architecture tag.
func index(out, ref string, layouts []string) error {
	var idx v1.ImageIndex = mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, dir := range layouts {
		img, err := imageOf(dir, ref, "")
		if err != nil {
			return err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return fmt.Errorf("%s: reading the config: %w", dir, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: image{img}, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant},
		}})
	}
	if err := os.RemoveAll(out); err != nil {
		return fmt.Errorf("removing the old layout: %w", err)
	}
	p, err := layout.Write(out, empty.Index)
	if err != nil {
		return fmt.Errorf("creating the layout %s: %w", out, err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{refAnnotation: ref})); err != nil {
		return fmt.Errorf("writing the index: %w", err)
	}
	d, err := idx.Digest()
	if err != nil {
		return fmt.Errorf("digest: %w", err)
	}
	fmt.Printf("%s %s@%s\n", out, ref, d)
	return nil
}

// image is an image whose index descriptor has no artifactType. The library
// otherwise sets it to the config's media type, which image indexes do not
// carry, and registry clients that do not know the field (skopeo 1.9 among
// them) rewrite such an index on copy: the registry's digest would then not
// be the one deploy/ is pinned to.
type image struct{ v1.Image }

// ArtifactType is the empty artifact type of a plain image.
func (image) ArtifactType() (string, error) { return "", nil }

// imageOf is the image named ref in the layout dir; where ref names an
// index, the image in it for arch.
func imageOf(dir, ref, arch string) (v1.Image, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("opening the layout %s: %w", dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("reading the index of %s: %w", dir, err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading the index of %s: %w", dir, err)
	}
	for _, desc := range m.Manifests {
		if desc.Annotations[refAnnotation] != ref {
			continue
		}
		if !desc.MediaType.IsIndex() {
			return top.Image(desc.Digest)
		}
		idx, err := top.ImageIndex(desc.Digest)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", ref, err)
		}
		return platformImage(idx, ref, arch)
	}
	return nil, fmt.Errorf("no image %q in %s", ref, dir)
}

func platformImage(idx v1.ImageIndex, ref, arch string) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", ref, err)
	}
	for _, desc := range m.Manifests {
		if desc.Platform != nil && desc.Platform.Architecture == arch {
			return idx.Image(desc.Digest)
		}
	}
	return nil, fmt.Errorf("%s has no image for architecture %q", ref, arch)
}

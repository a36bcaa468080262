package main

import (
	"bufio"
	"cmp"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
)

// An SPDX 2.3 document, as much of it as an image's SBOM fills. Field
// names and order follow the SPDX 2.3 JSON schema.
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string            `json:"name"`
	SPDXID           string            `json:"SPDXID"`
	VersionInfo      string            `json:"versionInfo,omitempty"`
	Supplier         string            `json:"supplier,omitempty"`
	DownloadLocation string            `json:"downloadLocation"`
	FilesAnalyzed    bool              `json:"filesAnalyzed"`
	Checksums        []spdxChecksum    `json:"checksums,omitempty"`
	LicenseConcluded string            `json:"licenseConcluded"`
	LicenseDeclared  string            `json:"licenseDeclared"`
	CopyrightText    string            `json:"copyrightText"`
	SourceInfo       string            `json:"sourceInfo,omitempty"`
	PrimaryPurpose   string            `json:"primaryPackagePurpose,omitempty"`
	ExternalRefs     []spdxExternalRef `json:"externalRefs,omitempty"`
}

type spdxChecksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxExternalRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

const noAssertion = "NOASSERTION"

// debPackage is one installed package of a dpkg status file.
type debPackage struct {
	name, version, arch, source string
}

// sbomInput is what an image's SBOM is made from.
type sbomInput struct {
	name, version, arch string
	imageDigest         string // the image manifest's, "sha256:…"
	created             string // RFC 3339, UTC
	license             string // svcproxy's own, an SPDX expression
	goBuild             *debug.BuildInfo
	debs                []debPackage
}

// buildSBOM describes an image: the image itself, the svcproxy binary in it
// with the Go modules linked into that binary (what `go version -m` lists),
// and the Debian packages installed in its root file system. Licenses other
// than svcproxy's own are NOASSERTION: the SBOM says what is there, and each
// Debian package carries its copyright file in the image.
func buildSBOM(in sbomInput) spdxDocument {
	b := sbomBuilder{ids: map[string]bool{}}
	image := b.add(spdxPackage{
		Name: in.name, VersionInfo: in.version, DownloadLocation: noAssertion,
		PrimaryPurpose: "CONTAINER", LicenseConcluded: noAssertion, LicenseDeclared: noAssertion,
		Checksums:    digestChecksums(in.imageDigest),
		ExternalRefs: []spdxExternalRef{purlRef(ociPURL(in.name, in.imageDigest, in.arch))},
	}, "Image-"+in.arch)
	b.rel("SPDXRef-DOCUMENT", "DESCRIBES", image)
	if in.goBuild != nil {
		bin := b.goModule(in.goBuild.Main, "APPLICATION", in.license, in.version)
		b.rel(image, "CONTAINS", bin)
		deps := slices.Clone(in.goBuild.Deps)
		slices.SortFunc(deps, func(a, c *debug.Module) int { return cmp.Compare(a.Path, c.Path) })
		for _, m := range deps {
			if m.Replace != nil {
				m = m.Replace
			}
			b.rel(bin, "DEPENDS_ON", b.goModule(*m, "LIBRARY", noAssertion, ""))
		}
		b.rel(bin, "DEPENDS_ON", b.goModule(debug.Module{Path: "stdlib", Version: in.goBuild.GoVersion}, "LIBRARY", "BSD-3-Clause", ""))
	}
	debs := slices.Clone(in.debs)
	slices.SortFunc(debs, func(a, c debPackage) int { return cmp.Compare(a.name, c.name) })
	for _, d := range debs {
		p := spdxPackage{
			Name: d.name, VersionInfo: d.version, Supplier: "Organization: Debian",
			DownloadLocation: noAssertion, LicenseConcluded: noAssertion, LicenseDeclared: noAssertion,
			ExternalRefs: []spdxExternalRef{purlRef(debPURL(d))},
		}
		if d.source != "" && d.source != d.name {
			p.SourceInfo = "built from the Debian source package " + d.source
		}
		b.rel(image, "CONTAINS", b.add(p, "Deb-"+d.name))
	}
	return spdxDocument{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name: fmt.Sprintf("%s-%s-linux-%s", in.name, in.version, in.arch),
		// Unique per image, and the same each time the same image is described.
		DocumentNamespace: fmt.Sprintf("https://svcproxy.io/spdx/%s/%s/%s", in.name, in.version, strings.TrimPrefix(in.imageDigest, "sha256:")),
		CreationInfo:      spdxCreationInfo{Created: in.created, Creators: []string{"Tool: svcproxy-hack-tools-image"}},
		Packages:          b.packages,
		Relationships:     b.rels,
	}
}

type sbomBuilder struct {
	packages []spdxPackage
	rels     []spdxRelationship
	ids      map[string]bool
}

var spdxIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// add gives p a unique SPDX ID from hint and records it.
func (b *sbomBuilder) add(p spdxPackage, hint string) string {
	base := "SPDXRef-" + strings.Trim(spdxIDUnsafe.ReplaceAllString(hint, "-"), "-")
	id := base
	for n := 2; b.ids[id]; n++ {
		id = fmt.Sprintf("%s-%d", base, n)
	}
	b.ids[id] = true
	p.SPDXID, p.CopyrightText = id, noAssertion
	b.packages = append(b.packages, p)
	return id
}

func (b *sbomBuilder) rel(from, typ, to string) {
	b.rels = append(b.rels, spdxRelationship{Element: from, Type: typ, Related: to})
}

// goModule adds a Go module; version overrides the module's own ("(devel)"
// for the main module of a build from a checkout). Go's h1: sums are left
// out: they hash a module's file list, which no SPDX algorithm names.
func (b *sbomBuilder) goModule(m debug.Module, purpose, license, version string) string {
	version = cmp.Or(version, m.Version)
	p := spdxPackage{
		Name: m.Path, VersionInfo: version, DownloadLocation: noAssertion, PrimaryPurpose: purpose,
		LicenseConcluded: license, LicenseDeclared: license,
		ExternalRefs: []spdxExternalRef{purlRef(goPURL(m.Path, version))},
	}
	return b.add(p, "Go-"+m.Path)
}

func purlRef(purl string) spdxExternalRef {
	return spdxExternalRef{Category: "PACKAGE-MANAGER", Type: "purl", Locator: purl}
}

// goPURL is the package URL of a Go module: pkg:golang/NAMESPACE/NAME@VERSION.
func goPURL(path, version string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "pkg:golang/" + strings.Join(segs, "/") + "@" + purlVersion(version)
}

// debPURL is the package URL of a Debian binary package.
func debPURL(d debPackage) string {
	p := fmt.Sprintf("pkg:deb/debian/%s@%s?arch=%s&distro=debian-12", url.PathEscape(d.name), purlVersion(d.version), d.arch)
	if d.source != "" && d.source != d.name {
		p += "&upstream=" + url.QueryEscape(d.source)
	}
	return p
}

// purlVersion escapes the one character of Go and Debian versions that a
// package URL's version may not hold as is ("+incompatible", "+deb12u1").
func purlVersion(v string) string { return strings.ReplaceAll(v, "+", "%2B") }

// ociPURL is the package URL of the image by digest.
func ociPURL(name, digest, arch string) string {
	return fmt.Sprintf("pkg:oci/%s@%s?arch=%s", name, strings.ReplaceAll(digest, ":", "%3A"), arch)
}

func digestChecksums(digest string) []spdxChecksum {
	if algo, hex, ok := strings.Cut(digest, ":"); ok && algo == "sha256" {
		return []spdxChecksum{{Algorithm: "SHA256", Value: hex}}
	}
	return nil
}

// parseDpkgStatus reads the installed packages of a dpkg status file
// (/var/lib/dpkg/status): stanzas of "Field: value" lines, continuation
// lines starting with a space.
func parseDpkgStatus(r io.Reader) ([]debPackage, error) {
	var out []debPackage
	fields := map[string]string{}
	flush := func() {
		if strings.HasSuffix(fields["Status"], " installed") && fields["Package"] != "" {
			src, _, _ := strings.Cut(fields["Source"], " ") // "Source: name (version)"
			out = append(out, debPackage{name: fields["Package"], version: fields["Version"], arch: fields["Architecture"], source: src})
		}
		clear(fields)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			flush()
		case line[0] == ' ' || line[0] == '\t':
			// a continuation of a multi-line field (Description, Conffiles)
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				return nil, fmt.Errorf("dpkg status: malformed line %q", line)
			}
			fields[k] = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("dpkg status: %w", err)
	}
	flush()
	return out, nil
}

func writeSBOM(w io.Writer, doc spdxDocument) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

func readGoBuild(binary string) (*debug.BuildInfo, error) {
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("reading the Go build information of %s: %w", binary, err)
	}
	return info, nil
}

func readDpkgStatus(rootfs string) ([]debPackage, error) {
	f, err := os.Open(filepath.Join(rootfs, "var/lib/dpkg/status"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseDpkgStatus(f)
}

package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/sbom.golden.json")

// TestSBOM builds the SBOM of an arm64 image from fixtures: a dpkg status
// file and a binary's build information as `go version -m` prints it. The
// document must be well-formed SPDX 2.3 (unique, valid IDs; every
// relationship between described elements), list each installed Debian
// package and each Go module with its version, and match the golden file.
func TestSBOM(t *testing.T) {
	text, err := os.ReadFile("testdata/buildinfo.txt")
	if err != nil {
		t.Fatal(err)
	}
	goBuild, err := debug.ParseBuildInfo(string(text))
	if err != nil {
		t.Fatal(err)
	}
	// ParseBuildInfo skips the "go" line; buildinfo.ReadFile, which reads
	// a real binary, sets it.
	goBuild.GoVersion = "go1.26.8"
	debs, err := readDpkgStatus(fixtureRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	doc := buildSBOM(sbomInput{
		name: "svcproxy", version: "v0.1.0", arch: "arm64", license: "Apache-2.0",
		imageDigest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		created:     "2026-11-29T00:00:00Z", goBuild: goBuild, debs: debs,
	})
	checkSPDX(t, doc)
	purls := map[string]string{}
	for _, p := range doc.Packages {
		purls[p.Name] = p.ExternalRefs[0].Locator
	}
	for name, want := range map[string]string{
		"svcproxy":                     "pkg:oci/svcproxy@sha256%3A0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef?arch=arm64",
		"github.com/svcproxy/svcproxy": "pkg:golang/github.com/svcproxy/svcproxy@v0.1.0",
		"sigs.k8s.io/knftables":        "pkg:golang/sigs.k8s.io/knftables@v0.0.22",
		"github.com/new/dep":           "pkg:golang/github.com/new/dep@v1.2.0%2Bincompatible",
		"stdlib":                       "pkg:golang/stdlib@go1.26.8",
		"nftables":                     "pkg:deb/debian/nftables@1.0.6-2%2Bdeb12u2?arch=arm64&distro=debian-12",
		"libip4tc2":                    "pkg:deb/debian/libip4tc2@1.8.9-2?arch=arm64&distro=debian-12&upstream=iptables",
		"tzdata":                       "pkg:deb/debian/tzdata@2025b-0%2Bdeb12u2?arch=all&distro=debian-12",
	} {
		if purls[name] != want {
			t.Errorf("purl of %s = %q, want %q", name, purls[name], want)
		}
	}
	for _, gone := range []string{"ifupdown", "github.com/old/dep"} {
		if _, ok := purls[gone]; ok {
			t.Errorf("%s is listed: it is not in the image", gone)
		}
	}
	var got bytes.Buffer
	if err := writeSBOM(&got, doc); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "sbom.golden.json")
	if *update {
		if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("SBOM differs from %s (go test -run TestSBOM -update rewrites it):\n%s", golden, got.String())
	}
}

// fixtureRoot is a root file system holding only testdata/dpkg-status.
func fixtureRoot(t *testing.T) string {
	t.Helper()
	status, err := os.ReadFile("testdata/dpkg-status")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "var/lib/dpkg/status"), string(status), 0o644)
	return root
}

var spdxID = regexp.MustCompile(`^SPDXRef-[A-Za-z0-9.-]+$`)

// checkSPDX checks the rules of SPDX 2.3 that a generator can break: the
// header, ID syntax and uniqueness, the fields required of every package,
// and relationships only between elements the document has.
func checkSPDX(t *testing.T, doc spdxDocument) {
	t.Helper()
	if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || doc.SPDXID != "SPDXRef-DOCUMENT" ||
		!strings.HasPrefix(doc.DocumentNamespace, "https://") || doc.CreationInfo.Created == "" || len(doc.CreationInfo.Creators) == 0 {
		t.Errorf("document header %+v", doc)
	}
	ids := map[string]bool{doc.SPDXID: true}
	for _, p := range doc.Packages {
		if !spdxID.MatchString(p.SPDXID) || ids[p.SPDXID] {
			t.Errorf("package %s: SPDXID %q invalid or repeated", p.Name, p.SPDXID)
		}
		ids[p.SPDXID] = true
		if p.Name == "" || p.VersionInfo == "" || p.DownloadLocation == "" || p.LicenseConcluded == "" ||
			p.LicenseDeclared == "" || p.CopyrightText == "" || len(p.ExternalRefs) != 1 {
			t.Errorf("package %+v lacks a required field or its purl", p)
		}
	}
	describes := 0
	for _, r := range doc.Relationships {
		if !ids[r.Element] || !ids[r.Related] {
			t.Errorf("relationship %+v names an element the document lacks", r)
		}
		if r.Type == "DESCRIBES" {
			describes++
		}
	}
	if describes != 1 {
		t.Errorf("%d DESCRIBES relationships, want 1 (the image)", describes)
	}
}

package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoRoot is where the repository's Markdown is walked from: this
// package's directory is docs/.
const repoRoot = ".."

var (
	// inlineLink is [text](target) or ![alt](target "title").
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// refLink is a reference definition: [name]: target.
	refLink = regexp.MustCompile(`(?m)^\s*\[[^\]]+\]:\s*(\S+)`)
	// external links are not ours to check: the test runs offline.
	external = regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`)
)

// TestMarkdownLinksResolve: every relative link in the repository's
// Markdown (README.md, docs/, the package READMEs, deploy/) names a file
// or directory that exists, and a link to a section of a Markdown file
// names a heading it has. Pages move; this keeps their readers' links
// from breaking silently.
func TestMarkdownLinksResolve(t *testing.T) {
	pages := markdownFiles(t)
	if len(pages) < 3 {
		t.Fatalf("found %d Markdown files under %s, want README.md, docs/ and more", len(pages), repoRoot)
	}
	anchors := map[string]map[string]bool{}
	checked := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range relativeLinks(string(b)) {
			checked++
			if err := checkLink(page, target, anchors); err != "" {
				t.Errorf("%s: link %q: %s", page, target, err)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the scan is broken")
	}
}

// markdownFiles lists the repository's own Markdown, leaving out build
// output and other checkouts' files.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "_output", "node_modules", "vendor":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// relativeLinks are the link targets of a Markdown text outside its code
// blocks and code spans, less the external ones.
func relativeLinks(text string) []string {
	var targets []string
	fenced := false
	for line := range strings.Lines(text) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		line = stripCodeSpans(line)
		for _, re := range []*regexp.Regexp{inlineLink, refLink} {
			for _, m := range re.FindAllStringSubmatch(line, -1) {
				if !external.MatchString(m[1]) {
					targets = append(targets, m[1])
				}
			}
		}
	}
	return targets
}

// stripCodeSpans removes `code spans`, in which brackets are not links.
func stripCodeSpans(line string) string {
	parts := strings.Split(line, "`")
	var b strings.Builder
	for i, p := range parts {
		if i%2 == 0 {
			b.WriteString(p)
		}
	}
	return b.String()
}

// checkLink says what is wrong with a link from page to target, or "".
func checkLink(page, target string, anchors map[string]map[string]bool) string {
	path, section, _ := strings.Cut(target, "#")
	file := page
	if path != "" {
		file = filepath.Join(filepath.Dir(page), path)
		if _, err := os.Stat(file); err != nil {
			return "no such file"
		}
	}
	if section == "" || !strings.HasSuffix(file, ".md") {
		return ""
	}
	if anchors[file] == nil {
		b, err := os.ReadFile(file)
		if err != nil {
			return err.Error()
		}
		anchors[file] = headingAnchors(string(b))
	}
	if !anchors[file][section] {
		return "no such section"
	}
	return ""
}

// Package docs holds the documentation; this test keeps user/troubleshooting.md
// in step with the code: every Event reason svcproxy can post, every
// svcproxy_* metric it serves, and every log line it quotes.
package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const doc = "user/troubleshooting.md"

// eventSources are the packages that post Events or name their reasons
// (the rows name their modes' Warnings: backends.Warning).
var eventSources = []string{"../internal/app", "../pkg/pipeline/model", "../internal/backends"}

// reasonArg is, for each function that posts an Event or records a
// problem that becomes one, which argument is the reason, and how many
// arguments it takes (which tells model's problemList.add from other adds).
var reasonArg = map[string]struct{ index, args int }{
	"Eventf":       {3, -1}, // client-go's recorder: regarding, related, type, reason, …
	"post":         {1, 4},  // sharedEvents: ref, reason, action, note
	"nodeWarning":  {0, 2},
	"hardFail":     {0, 1},
	"finalWarning": {1, 3},
	"add":          {0, 3}, // model's problemList: reason, field, err
	"parseIPs":     {1, 5},
}

// eventReasons reads the Event reasons out of the Go files of dirs: the
// string given as a reason argument (reasonArg), the strings assigned
// to a variable named reason, which the calls pass on, and the string
// given as a composite literal's Reason (a row's Warning). A reason argument
// that is neither a string nor named reason fails the test: the scan would
// miss what it holds.
func eventReasons(t *testing.T, dirs []string) map[string]string {
	t.Helper()
	reasons := map[string]string{}
	fset := token.NewFileSet()
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CallExpr:
					reasonOfCall(t, fset, n, reasons)
				case *ast.KeyValueExpr:
					if id, ok := n.Key.(*ast.Ident); ok && id.Name == "Reason" {
						addLiteral(n.Value, fset, reasons)
					}
				case *ast.AssignStmt:
					for i, lhs := range n.Lhs {
						if id, ok := lhs.(*ast.Ident); ok && id.Name == "reason" && i < len(n.Rhs) {
							addLiteral(n.Rhs[i], fset, reasons)
						}
					}
				}
				return true
			})
		}
	}
	return reasons
}

func reasonOfCall(t *testing.T, fset *token.FileSet, call *ast.CallExpr, reasons map[string]string) {
	t.Helper()
	var name string
	switch fn := call.Fun.(type) {
	case *ast.Ident:
		name = fn.Name
	case *ast.SelectorExpr:
		name = fn.Sel.Name
	}
	ra, ok := reasonArg[name]
	if !ok || ra.args >= 0 && len(call.Args) != ra.args || ra.index >= len(call.Args) {
		return
	}
	arg := call.Args[ra.index]
	if addLiteral(arg, fset, reasons) {
		return
	}
	switch a := arg.(type) {
	case *ast.Ident:
		if a.Name == "reason" {
			return
		}
	case *ast.SelectorExpr:
		if strings.EqualFold(a.Sel.Name, "reason") {
			return
		}
	}
	t.Errorf("%s: the reason given to %s is neither a string nor a variable named reason; teach this test where it comes from",
		fset.Position(call.Pos()), name)
}

func addLiteral(e ast.Expr, fset *token.FileSet, reasons map[string]string) bool {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return false
	}
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		return false
	}
	reasons[s] = fset.Position(lit.Pos()).String()
	return true
}

func readDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestEveryEventReasonIsDocumented: a new reason cannot be added without
// its row in troubleshooting.md.
func TestEveryEventReasonIsDocumented(t *testing.T) {
	reasons := eventReasons(t, eventSources)
	// The scan must find the reasons of each kind of call, or it finds
	// nothing at all and passes.
	for _, known := range []string{"Starting", "KernelRejectedServicePort", "ExternalIPIsNodeAddress", "FailedToStartMetricServer",
		"InvalidIPVSScheduler", "IPVSDeprecation", "KubeProxyDefaultMode", "InvalidClusterIP", "InvalidEndpointAddress", "InvalidField"} {
		if _, ok := reasons[known]; !ok {
			t.Errorf("the scan did not find the reason %s", known)
		}
	}
	text := readDoc(t)
	for _, reason := range slices.Sorted(maps.Keys(reasons)) {
		if !strings.Contains(text, "| `"+reason+"` |") {
			t.Errorf("Event reason %s (%s) has no row in docs/%s's Events table", reason, reasons[reason], doc)
		}
	}
}

// TestEverySvcproxyMetricIsDocumented reads the metrics inventory
// (internal/app's TestMetricsInventory keeps it).
func TestEverySvcproxyMetricIsDocumented(t *testing.T) {
	b, err := os.ReadFile("../test/monitoring/testdata/metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	text := readDoc(t)
	found := 0
	for line := range strings.Lines(string(b)) {
		name, _, _ := strings.Cut(line, " ")
		if !strings.HasPrefix(name, "svcproxy_") {
			continue
		}
		found++
		if !strings.Contains(text, "| `"+name+"` |") {
			t.Errorf("metric %s has no row in docs/%s", name, doc)
		}
	}
	if found == 0 {
		t.Error("the inventory lists no svcproxy_* metric")
	}
}

// TestDocumentedLogLinesExist: each message of the Log lines table is a
// string of the code, so a reworded log line cannot leave a stale row.
func TestDocumentedLogLinesExist(t *testing.T) {
	text := readDoc(t)
	_, table, ok := strings.Cut(text, "\n## Log lines\n")
	if !ok {
		t.Fatal("no Log lines section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	strs := goStrings(t, []string{"../internal", "../pkg"})
	rows := 0
	for line := range strings.Lines(table) {
		msg, ok := strings.CutPrefix(line, "| `")
		if !ok {
			continue
		}
		msg, _, _ = strings.Cut(msg, "` |")
		rows++
		if !strs[msg] {
			t.Errorf("log line %q is not a string of the code", msg)
		}
	}
	if rows < 10 {
		t.Errorf("%d rows in the Log lines table", rows)
	}
}

// goStrings returns every string literal of the non-test Go files under roots.
func goStrings(t *testing.T, roots []string) map[string]bool {
	t.Helper()
	strs := map[string]bool{}
	fset := token.NewFileSet()
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil {
						strs[s] = true
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return strs
}

// headingAnchors are the anchors GitHub gives a Markdown file's headings.
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		slug := drop.ReplaceAllString(strings.ToLower(title), "")
		anchors[strings.ReplaceAll(slug, " ", "-")] = true
	}
	return anchors
}

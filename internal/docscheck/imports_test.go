package docscheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/pyrula/caseworker"

// rule is one import rule of docs/architecture.md: the packages it applies
// to may import, of the project, only what allow matches (when allow is
// not nil) and nothing that forbid matches. A pattern is a package path
// relative to the module, or "x/..." for x and every package below it.
type rule struct {
	name   string
	pkgs   []string
	except []string // packages of pkgs the rule does not apply to
	allow  []string
	forbid []string
}

// journalPkgs are the journal and its backends (not a new package that
// only lives under journal/).
var journalPkgs = []string{"journal", "journal/memjournal", "journal/valkeyjournal", "journal/pgarchive", "journal/capture", "journal/resolve"}

var rules = []rule{
	{name: "imports nothing of the project", pkgs: []string{"messages", "version", "canonjson", "memvalkey", "internal/jsondiff", "internal/pgmigrate", "internal/valkeyconn", "internal/redact"}, allow: []string{}},
	{name: "runevent sits on messages and canonjson only", pkgs: []string{"runevent"}, allow: []string{"messages", "canonjson"}},
	{name: "bundle sits on canonjson, messages and runevent", pkgs: []string{"bundle/..."}, allow: []string{"bundle/...", "canonjson", "messages", "runevent"}},
	{name: "store never imports the journal, the runtime or what is above them", pkgs: []string{"store/..."},
		forbid: append([]string{"flow/...", "replay/...", "llm/...", "worker/...", "cli/...", "daemon/..."}, journalPkgs...)},
	{name: "the journal never imports stores, the runtime or what is above them", pkgs: []string{"journal/..."},
		forbid: []string{"store/...", "flow/...", "replay/...", "llm/...", "worker/...", "cli/...", "daemon/..."}},
	{name: "flow never imports the journal, stores, replay or llm (flow/journallog joins flow to the journal)", pkgs: []string{"flow/..."}, except: []string{"flow/journallog"},
		forbid: append([]string{"store/...", "replay/...", "llm/...", "worker/...", "cli/...", "daemon/..."}, journalPkgs...)},
	{name: "llm never imports the journal, stores, replay or what is above them", pkgs: []string{"llm/..."},
		forbid: append([]string{"store/...", "replay/...", "worker/...", "cli/...", "daemon/..."}, journalPkgs...)},
	{name: "replay gets its journal as a host.Log and never imports a backend, a store, llm or what is above it", pkgs: []string{"replay/..."},
		forbid: append([]string{"store/...", "llm/...", "worker/...", "cli/...", "daemon/...", "flow/journallog"}, journalPkgs...)},
	{name: "worker/client never imports the worker", pkgs: []string{"worker/client/..."}, forbid: []string{"worker", "cli/...", "daemon/...", "store/...", "replay/..."}},
	{name: "the worker never imports the CLI or the daemon", pkgs: []string{"worker/..."}, forbid: []string{"cli/...", "daemon/...", "cmd/..."}},
	{name: "the worker's parts (worker/internal) import nothing of the project but messages (the consumer: and the batcher)", pkgs: []string{"worker/internal/..."},
		except: []string{"worker/internal/intake", "worker/internal/runexec", "worker/internal/runwire", "worker/internal/consumer"}, allow: []string{"messages"}},
	{name: "the stream consumer (worker/internal/consumer) imports nothing of the project but messages and the batcher", pkgs: []string{"worker/internal/consumer"},
		allow: []string{"messages", "worker/internal/batch"}},
	{name: "the message intake (worker/internal/intake) gets its collaborators from the worker and never imports it, the run executor, the CLI or the daemon", pkgs: []string{"worker/internal/intake"},
		forbid: []string{"worker", "worker/internal/runexec", "worker/client/...", "cli/...", "daemon/...", "cmd/..."}},
	{name: "the run executor (worker/internal/runexec) gets its collaborators from the worker and never imports it, the message intake, the CLI or the daemon", pkgs: []string{"worker/internal/runexec"},
		forbid: []string{"worker", "worker/internal/intake", "worker/client/...", "cli/...", "daemon/...", "cmd/..."}},
	{name: "the wire names the worker's services share (worker/internal/runwire) import no service", pkgs: []string{"worker/internal/runwire"},
		forbid: []string{"worker", "worker/internal/intake", "worker/internal/runexec", "worker/internal/consumer", "worker/internal/batch", "worker/internal/envelope", "worker/internal/maintain", "cli/...", "daemon/..."}},
	{name: "the CLI talks to the worker through worker/client only", pkgs: []string{"cli/..."}, forbid: []string{"worker", "daemon/...", "cmd/..."}},
	{name: "the daemon never imports the CLI", pkgs: []string{"daemon/..."}, forbid: []string{"cli/...", "cmd/..."}},
}

// match reports whether pkg (relative to the module) matches pattern.
func match(pattern, pkg string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}

func matchAny(patterns []string, pkg string) bool {
	for _, p := range patterns {
		if match(p, pkg) {
			return true
		}
	}
	return false
}

// moduleFiles parses, with mode, every non-test Go file of the module's
// packages under root and gives each to fn with its package path (relative
// to the module, "" for the root). Directories with a go.mod of their own
// (other modules), testdata and hidden ones are left out.
func moduleFiles(t *testing.T, root string, mode parser.Mode, fn func(pkg string, f *ast.File) error) {
	t.Helper()
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == root {
				return nil
			}
			if name := d.Name(); strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, mode)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		return fn(filepath.ToSlash(rel), f)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// projectImports reads the imports of the module's packages from their
// non-test Go files: package path (relative to the module, "" for the root)
// → the project packages it imports, relative too.
func projectImports(t *testing.T, root string) map[string][]string {
	t.Helper()
	imports := map[string]map[string]bool{}
	moduleFiles(t, root, parser.ImportsOnly, func(pkg string, f *ast.File) error {
		if imports[pkg] == nil {
			imports[pkg] = map[string]bool{}
		}
		for _, spec := range f.Imports {
			path, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return err
			}
			if dep, ok := strings.CutPrefix(path, module+"/"); ok {
				imports[pkg][dep] = true
			}
		}
		return nil
	})
	out := map[string][]string{}
	for pkg, deps := range imports {
		list := []string{}
		for d := range deps {
			list = append(list, d)
		}
		sort.Strings(list)
		out[pkg] = list
	}
	return out
}

// violations are the imports of graph that break rules, one line each.
func violations(graph map[string][]string, rules []rule) []string {
	var out []string
	for pkg, deps := range graph {
		for _, r := range rules {
			if !matchAny(r.pkgs, pkg) || matchAny(r.except, pkg) {
				continue
			}
			for _, dep := range deps {
				if match(pkg, dep) || strings.HasPrefix(dep, pkg+"/") {
					continue // a package's own sub-packages
				}
				if (r.allow != nil && !matchAny(r.allow, dep)) || matchAny(r.forbid, dep) {
					out = append(out, pkg+" imports "+dep+": "+r.name)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestImportRules checks the direction of imports that docs/architecture.md
// states, on the module's packages as they are.
func TestImportRules(t *testing.T) {
	graph := projectImports(t, repoRoot(t))
	for _, must := range []string{"messages", "bundle", "flow", "journal", "store", "replay", "worker", "cli", "daemon"} {
		if _, ok := graph[must]; !ok {
			t.Fatalf("package %s not found; the walk is broken (found %d packages)", must, len(graph))
		}
	}
	for _, v := range violations(graph, rules) {
		t.Error(v)
	}
}

// TestImportRulesCatch shows that the check fails on the imports the rules
// forbid.
func TestImportRulesCatch(t *testing.T) {
	bad := map[string][]string{
		"messages":        {"bundle"},
		"flow":            {"journal"},
		"flow/journallog": {"journal"},
		"store/filestore": {"journal/valkeyjournal"},
		"replay":          {"store"},
		"runevent":        {"flow"},
		"worker/client":   {"worker"},
		"cli":             {"worker", "worker/client"},
	}
	got := violations(bad, rules)
	want := []string{
		"cli imports worker: the CLI talks to the worker through worker/client only",
		"flow imports journal: flow never imports the journal, stores, replay or llm (flow/journallog joins flow to the journal)",
		"messages imports bundle: imports nothing of the project",
		"replay imports store: replay gets its journal as a host.Log and never imports a backend, a store, llm or what is above it",
		"runevent imports flow: runevent sits on messages and canonjson only",
		"store/filestore imports journal/valkeyjournal: store never imports the journal, the runtime or what is above them",
		"worker/client imports worker: worker/client never imports the worker",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

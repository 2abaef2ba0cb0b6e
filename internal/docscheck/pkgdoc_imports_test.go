package docscheck

import (
	"go/ast"
	"go/parser"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// importClaim is a package doc's sentence saying what the package imports
// of the project, when the sentence is exclusive ("only", "nothing else of
// the project", "nothing of the project").
type importClaim struct {
	sentence string
	allowed  []string // project packages the sentence names
}

var (
	parenthetical = regexp.MustCompile(`\([^()]*\)`)
	// claimSentence finds "<subject> imports …" up to the sentence's end.
	claimSentence = regexp.MustCompile(`(?s)(?:^|[.;:]\s)([\w/]+|It|the package) imports\s(.*?)(?:[.;:](?:\s|$)|$)`)
	exclusive     = regexp.MustCompile(`\bonly\b|nothing else|nothing of the project|no package of the project`)
	listWord      = regexp.MustCompile(`[\w/.-]+`)
)

// importClaims reads the exclusive import sentences of doc, naming the
// module's packages (relative paths) in pkgs.
func importClaims(doc string, pkgs map[string]bool) []importClaim {
	// A parenthesis's words count, its punctuation does not end the
	// sentence.
	text := parenthetical.ReplaceAllStringFunc(doc, func(p string) string { return strings.NewReplacer(".", " ", ";", " ", ":", " ").Replace(p) })
	text = strings.Join(strings.Fields(text), " ")
	var out []importClaim
	for _, m := range claimSentence.FindAllStringSubmatch(text, -1) {
		body := m[2]
		if !exclusive.MatchString(body) {
			continue
		}
		// "nothing of the project but messages": what follows "but" is
		// allowed; "…, nothing else" ends the list.
		c := importClaim{sentence: strings.TrimSpace(strings.TrimLeft(m[0], ".;: ")), allowed: []string{}}
		for _, w := range listWord.FindAllString(body, -1) {
			w = strings.Trim(w, ".`")
			if pkgs[w] {
				c.allowed = append(c.allowed, w)
			}
		}
		out = append(out, c)
	}
	return out
}

// packageDocs reads each package's doc comment under root (the module's
// packages, as projectImports walks them).
func packageDocs(t *testing.T, root string) map[string]string {
	t.Helper()
	docs := map[string]string{}
	moduleFiles(t, root, parser.PackageClauseOnly|parser.ParseComments, func(pkg string, f *ast.File) error {
		if f.Doc != nil {
			docs[pkg] += f.Doc.Text() + "\n"
		}
		return nil
	})
	return docs
}

// claimViolations are the imports of graph a package's own doc says it
// does not make, one line each.
func claimViolations(graph map[string][]string, docs map[string]string) []string {
	pkgs := map[string]bool{}
	for p := range graph {
		pkgs[p] = true
	}
	var out []string
	for pkg, doc := range docs {
		for _, c := range importClaims(doc, pkgs) {
			for _, dep := range graph[pkg] {
				if strings.HasPrefix(dep, pkg+"/") || slices.Contains(c.allowed, dep) ||
					slices.ContainsFunc(c.allowed, func(a string) bool { return strings.HasPrefix(dep, a+"/internal/") }) {
					continue // a package's own sub-packages, a named one or its internal parts
				}
				out = append(out, pkg+" imports "+dep+", which its doc does not allow: "+c.sentence)
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestPackageDocImportClaims: a package doc that says what the package
// imports of the project ("pgstore imports store, bundle and
// internal/pgmigrate, nothing else of the project") is true.
func TestPackageDocImportClaims(t *testing.T) {
	root := repoRoot(t)
	graph := projectImports(t, root)
	docs := packageDocs(t, root)
	claims := 0
	pkgs := map[string]bool{}
	for p := range graph {
		pkgs[p] = true
	}
	for _, doc := range docs {
		claims += len(importClaims(doc, pkgs))
	}
	if claims < 15 {
		t.Fatalf("found only %d import claims in package docs; the parsing is broken", claims)
	}
	for _, v := range claimViolations(graph, docs) {
		t.Error(v)
	}
}

// TestPackageDocImportClaimsCatch: the check fails on a doc that leaves out
// an import, and on "nothing of the project".
func TestPackageDocImportClaimsCatch(t *testing.T) {
	graph := map[string][]string{
		"store/pgstore": {"store", "bundle", "internal/pgmigrate"},
		"store":         {}, "bundle": {}, "internal/pgmigrate": {},
		"memvalkey":          {"messages"},
		"messages":           {},
		"worker/internal/xy": {"messages", "bundle"},
	}
	docs := map[string]string{
		"store/pgstore":      "Package pgstore is a store.\n\npgstore imports store and bundle, nothing else of the project.\n",
		"memvalkey":          "Package memvalkey serves.\n\nIt imports nothing of the project.\n",
		"worker/internal/xy": "Package xy (a part) does things.\n\nIt imports nothing of the project but messages.\n",
	}
	got := claimViolations(graph, docs)
	want := []string{
		"memvalkey imports messages, which its doc does not allow: It imports nothing of the project.",
		"store/pgstore imports internal/pgmigrate, which its doc does not allow: pgstore imports store and bundle, nothing else of the project.",
		"worker/internal/xy imports bundle, which its doc does not allow: It imports nothing of the project but messages.",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

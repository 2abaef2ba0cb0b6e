package docscheck

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// importTableHeading is the section of docs/architecture.md whose table
// lists, for every package of the module, the project packages it imports.
const importTableHeading = "## What each package imports"

// importTable reads that table: package → the packages its row lists
// ("nothing" is an empty list). A row is | `pkg` | `a`, `b` |.
func importTable(t *testing.T, md string) map[string][]string {
	t.Helper()
	_, section, ok := strings.Cut(md, "\n"+importTableHeading+"\n")
	if !ok {
		t.Fatalf("docs/architecture.md has no %q section", importTableHeading)
	}
	if next := strings.Index(section, "\n## "); next >= 0 {
		section = section[:next]
	}
	table := map[string][]string{}
	for line := range strings.SplitSeq(section, "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) != 2 || !strings.HasPrefix(strings.TrimSpace(cells[0]), "`") {
			continue
		}
		pkg := strings.Trim(strings.TrimSpace(cells[0]), "`")
		if _, dup := table[pkg]; dup {
			t.Errorf("docs/architecture.md lists %s twice in %q", pkg, importTableHeading)
		}
		deps := []string{}
		if list := strings.TrimSpace(cells[1]); list != "nothing" {
			for d := range strings.SplitSeq(list, ",") {
				deps = append(deps, strings.Trim(strings.TrimSpace(d), "`"))
			}
		}
		sort.Strings(deps)
		table[pkg] = deps
	}
	return table
}

// importRow is the table row of pkg importing deps.
func importRow(pkg string, deps []string) string {
	if len(deps) == 0 {
		return "| `" + pkg + "` | nothing |"
	}
	return "| `" + pkg + "` | `" + strings.Join(deps, "`, `") + "` |"
}

// TestArchitectureImportTable checks docs/architecture.md's table of what
// each package imports against the module's packages as they are: every
// package has a row, every row is a package, and each row lists exactly
// the project packages its non-test files import. On a failure it prints
// the rows as they should read.
func TestArchitectureImportTable(t *testing.T) {
	root := repoRoot(t)
	md, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	graph := projectImports(t, root)
	table := importTable(t, string(md))
	if len(table) == 0 {
		t.Fatalf("docs/architecture.md's %q section has no rows", importTableHeading)
	}
	var want []string
	for _, pkg := range slices.Sorted(maps.Keys(graph)) {
		if pkg == "" {
			continue
		}
		want = append(want, importRow(pkg, graph[pkg]))
		got, ok := table[pkg]
		switch {
		case !ok:
			t.Errorf("docs/architecture.md has no row for %s in %q", pkg, importTableHeading)
		case !slices.Equal(got, graph[pkg]):
			t.Errorf("docs/architecture.md says %s imports %v; it imports %v", pkg, got, graph[pkg])
		}
	}
	for pkg := range table {
		if _, ok := graph[pkg]; !ok {
			t.Errorf("docs/architecture.md has a row for %s, which is no package of the module", pkg)
		}
	}
	if t.Failed() {
		t.Logf("the rows as they should read:\n%s", strings.Join(want, "\n"))
	}
}

// TestArchitectureImportTableCatch shows that the table's reading finds a
// row that lists too little, and one of no package.
func TestArchitectureImportTableCatch(t *testing.T) {
	md := "# A\n\n" + importTableHeading + "\n\n| package | imports of the project |\n|---|---|\n" +
		importRow("flow", []string{"bundle"}) + "\n" + importRow("messages", nil) + "\n\n## Next\n\n| `x` | `y` |\n"
	table := importTable(t, md)
	if !slices.Equal(table["flow"], []string{"bundle"}) || table["messages"] == nil || len(table["messages"]) != 0 {
		t.Fatalf("table read as %v", table)
	}
	if _, ok := table["x"]; ok {
		t.Fatalf("a row after the section was read: %v", table)
	}
}

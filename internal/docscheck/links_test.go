package docscheck

import (
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the repository's root directory: two levels above this
// package, where go.mod names the module.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !strings.HasPrefix(string(mod), "module github.com/pyrula/caseworker\n") {
		t.Fatalf("%s is not the repository root (go.mod: %v)", root, err)
	}
	return root
}

// markdownFiles lists the repository's Markdown files, relative to root with
// forward slashes, leaving out .git, testdata and hidden directories.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestLinks checks every link of every Markdown file in the repository that
// points inside it: the file or directory exists, and an anchor names a
// heading of the Markdown file it points to. Links to other sites are not
// fetched; links that leave the repository are errors.
func TestLinks(t *testing.T) {
	root := repoRoot(t)
	files := markdownFiles(t, root)
	if len(files) < 5 {
		t.Fatalf("found only %d Markdown files under %s: %v", len(files), root, files)
	}
	anchors := map[string]map[string]bool{} // file → its anchors
	links := map[string][]link{}
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		links[f], anchors[f] = scan(src)
	}
	checked := 0
	for _, f := range files {
		for _, l := range links[f] {
			if problem := check(root, f, l.target, anchors); problem != "" {
				t.Errorf("%s:%d: link %s: %s", f, l.line, l.target, problem)
			}
			checked++
		}
	}
	t.Logf("%d links in %d Markdown files", checked, len(files))
}

// check returns what is wrong with target, a link in file from, or "".
func check(root, from, target string, anchors map[string]map[string]bool) string {
	u, err := url.Parse(target)
	if err != nil {
		return "not a URL: " + err.Error()
	}
	if u.Scheme != "" || u.Host != "" {
		if u.Scheme == "http" || u.Scheme == "https" || u.Scheme == "mailto" {
			return "" // another site: not checked
		}
		return "unknown scheme " + u.Scheme
	}
	p, err := url.PathUnescape(u.Path)
	if err != nil {
		return err.Error()
	}
	var rel string // the target, relative to root
	switch {
	case p == "":
		rel = from
	case strings.HasPrefix(p, "/"):
		rel = path.Clean(strings.TrimPrefix(p, "/"))
	default:
		rel = path.Clean(path.Join(path.Dir(from), p))
	}
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "points outside the repository"
	}
	if rel == "" || rel == "." {
		rel = "."
	}
	if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
		return "no such file in the repository"
	}
	if u.Fragment == "" {
		return ""
	}
	a, ok := anchors[rel]
	if !ok {
		return "an anchor into a file that is not Markdown"
	}
	if !a[u.Fragment] {
		return "no heading of " + rel + " has the anchor #" + u.Fragment
	}
	return ""
}

// TestLinksCatch shows that the link check fails on broken links and
// anchors, and passes over links in code.
func TestLinksCatch(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	page := "# A page\n\n## The `worker demo`: two — steps\n\n## Two\n\n## Two\n"
	if err := os.WriteFile(filepath.Join(root, "docs", "a.md"), []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	src := []byte("See [a](/docs/a.md#the-worker-demo-two--steps), [b](a.md#two-1), [c](#here).\n" +
		"```\n[in a fence](/nowhere.md)\n```\n`[in code](/nowhere.md)` and [d](https://example.com/x).\n" +
		"[e](/docs/b.md) [f](a.md#nope) [g](" + "../../etc/passwd) [h](/docs/a.md#two-2)\n" + // split: no link out of the repo in this file
		"[ref]: /docs/missing.md\n")
	links, _ := scan(src)
	_, pageAnchors := scan([]byte(page))
	anchors := map[string]map[string]bool{"docs/a.md": pageAnchors, "docs/x.md": {"here": true}}
	var got []string
	for _, l := range links {
		if p := check(root, "docs/x.md", l.target, anchors); p != "" {
			got = append(got, l.target+": "+p)
		}
	}
	want := []string{
		"#here: no such file in the repository", // docs/x.md itself does not exist in root
		"/docs/b.md: no such file in the repository",
		"a.md#nope: no heading of docs/a.md has the anchor #nope",
		"../../etc/passwd: points outside the repository",
		"/docs/a.md#two-2: no heading of docs/a.md has the anchor #two-2",
		"/docs/missing.md: no such file in the repository",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestIndexListsEveryDoc checks that docs/README.md, the index of the
// documentation, links every page in docs/, and that the front page links
// the index.
func TestIndexListsEveryDoc(t *testing.T) {
	root := repoRoot(t)
	linked := func(file string) map[string]bool {
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			t.Fatal(err)
		}
		links, _ := scan(src)
		out := map[string]bool{}
		for _, l := range links {
			u, err := url.Parse(l.target)
			if err != nil || u.Scheme != "" {
				continue
			}
			p := u.Path
			if !strings.HasPrefix(p, "/") {
				p = path.Join("/"+path.Dir(file), p)
			}
			out[path.Clean(p)] = true
		}
		return out
	}
	index := linked("docs/README.md")
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		name := "/docs/" + filepath.Base(p)
		if name != "/docs/README.md" && !index[name] {
			t.Errorf("docs/README.md does not list %s", name)
		}
	}
	if !linked("README.md")["/docs/README.md"] {
		t.Errorf("README.md does not link the index, /docs/README.md")
	}
}

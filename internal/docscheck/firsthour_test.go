package docscheck

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// codeBlock is one fenced block of a Markdown file and the paragraph line
// just before it.
type codeBlock struct {
	lang, before, text string
}

// codeBlocks lists the fenced blocks of a Markdown text in order.
func codeBlocks(md string) []codeBlock {
	var out []codeBlock
	lines := strings.Split(md, "\n")
	before := ""
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !strings.HasPrefix(l, "```") {
			if strings.TrimSpace(l) != "" {
				before = l
			}
			continue
		}
		b := codeBlock{lang: strings.TrimPrefix(l, "```"), before: before}
		var body []string
		for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			body = append(body, lines[i])
		}
		b.text = strings.Join(body, "\n") + "\n"
		out = append(out, b)
	}
	return out
}

// The first hour of docs/your-own-targets.md, followed as a new user
// would from an empty directory: its commands make a module that depends
// on this checkout, its code blocks are the module's files, and its build
// and local-loop commands succeed. A step that no longer works fails here.
func TestYourOwnTargetsFirstHour(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module of its own; skipped with -short")
	}
	root := repoRoot(t)
	md, err := os.ReadFile(filepath.Join(root, "docs", "your-own-targets.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := codeBlocks(string(md))
	find := func(lang, before string, nth int) string {
		t.Helper()
		for _, b := range blocks {
			if b.lang == lang && strings.Contains(b.before, before) {
				if nth == 0 {
					return b.text
				}
				nth--
			}
		}
		t.Fatalf("docs/your-own-targets.md has no %s block after a line with %q", lang, before)
		return ""
	}
	work := t.TempDir()
	shop := filepath.Join(work, "shop")
	sh := func(dir, script string) string {
		t.Helper()
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CASEWORKER="+root, "GOFLAGS=-mod=mod")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("in %s:\n%s\n%v\n%s", dir, script, err, out.String())
		}
		return out.String()
	}
	write := func(name, text string) {
		t.Helper()
		path := filepath.Join(shop, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	sh(work, find("bash", "CASEWORKER=", 0)) // mkdir shop, go mod init, the replace
	write("flows/flows.go", find("go", "`flows/flows.go`, whole", 0))
	write("cmd/worker/main.go", find("go", "`cmd/worker/main.go`", 0))
	write("cmd/pyrula/main.go", find("go", "`cmd/pyrula/main.go`", 0))
	sh(shop, find("bash", "record the dependencies and build both", 0))

	// The local loop, every command as the doc gives it (comments dropped).
	loop := regexp.MustCompile(`\s+#.*`).ReplaceAllString(find("bash", "## 3. The local loop", 0), "")
	out := sh(shop, loop)
	for _, want := range []string{`"name":"order"`, `"status":"complete"`, `"type":"outcome"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the local loop printed no %s\n%s", want, out)
		}
	}
}

package testbrowser_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pyrula/caseworker/internal/testbrowser"
	"github.com/pyrula/caseworker/internal/testwait"
)

// page writes html to a file of t's temp dir and returns its file:// URL.
func page(t *testing.T, html string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "page.html")
	if err := os.WriteFile(path, []byte(html), 0o644); err != nil {
		t.Fatal(err)
	}
	return testbrowser.FileURL(t, path)
}

func TestPage(t *testing.T) {
	url := page(t, `<!DOCTYPE html><html><head><meta charset="utf-8"><title>t</title></head><body>
<p id="out">not yet</p><button id="b" type="button">go</button>
<details><summary>more</summary><p>hidden words</p></details>
<script>
console.log("a log line is no problem");
console.warn("nor a warning");
document.getElementById("b").addEventListener("click", () => {
	document.getElementById("out").textContent = "clicked";
});
</script></body></html>`)
	p := testbrowser.Open(t, url)

	var sum int
	p.Eval(t, "1 + 2", &sum)
	if sum != 3 {
		t.Errorf("1 + 2 = %d", sum)
	}
	var obj struct {
		A []string `json:"a"`
	}
	p.Eval(t, `({a: ["x", "y"]})`, &obj)
	if strings.Join(obj.A, ",") != "x,y" {
		t.Errorf("object = %+v", obj)
	}
	p.Eval(t, "void 0", nil)

	if text := p.Text(t); !strings.Contains(text, "not yet") || strings.Contains(text, "hidden words") {
		t.Errorf("text before the click = %q", text)
	}
	p.Click(t, "#b")
	p.Click(t, "summary")
	if text := p.Text(t); !strings.Contains(text, "clicked") || !strings.Contains(text, "hidden words") {
		t.Errorf("text after the clicks = %q", text)
	}
}

// recorder is a testing.TB that keeps the errors reported to it and the
// cleanups registered with it, to see what Open reports at the end.
type recorder struct {
	testing.TB
	mu       sync.Mutex
	errs     []string
	cleanups []func()
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

// end runs the cleanups as the end of a test does, and returns the errors.
func (r *recorder) end() []string {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errs
}

func TestProblemsFailTheTest(t *testing.T) {
	url := page(t, `<!DOCTYPE html><html><head><meta charset="utf-8"><title>t</title></head><body>
<img src="http://127.0.0.1:9/pixel.png" alt="">
<script>
console.error("boom", 42);
alert("hello");
window.done = false;
setTimeout(() => { window.done = true; throw new Error("late failure"); }, 0);
</script></body></html>`)
	r := &recorder{TB: t}
	p := testbrowser.Open(r, url)
	testwait.Eventually(t, 10*time.Second, "the page's timer", func() bool {
		var done bool
		p.Eval(t, "window.done", &done)
		return done
	})
	errs := strings.Join(r.end(), "\n")
	for _, want := range []string{
		"console.error: boom 42",
		`a JavaScript alert dialog: "hello"`,
		"an uncaught exception: Uncaught Error: late failure",
		"a network request: GET http://127.0.0.1:9/pixel.png",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("the errors reported miss %q; they are:\n%s", want, errs)
		}
	}
}

func TestFileURL(t *testing.T) {
	got := testbrowser.FileURL(t, "/tmp/a b/report.html")
	if want := "file:///tmp/a%20b/report.html"; got != want {
		t.Errorf("FileURL = %q, want %q", got, want)
	}
}

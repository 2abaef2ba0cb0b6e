// Package testbrowser opens a page in a real headless Chromium for a test, and
// fails the test when the page logs an error or reaches for the network.
//
// It is for tests only. A test opens a file:// URL with [Open], then evaluates
// JavaScript ([Page.Eval]), clicks elements ([Page.Click]) and reads the text
// of the page ([Page.Text]). Every console error, uncaught exception, error
// entry of the browser log (a failed load, a Content-Security-Policy
// violation), JavaScript dialog (alert, confirm, prompt) and request whose URL
// is not file:, data: or about: is recorded while the page is open, and the
// test fails at its end (t.Cleanup) when any was.
//
// Chromium is the binary named by EnvChromium, else DefaultChromium.
// Without one a test skips with a message naming EnvChromium, unless services
// are required (internal/testenv: PYRULA_TEST_REQUIRE_SERVICES=1, which
// scripts/test sets, or CI=true): then it fails. scripts/test installs
// Debian's chromium and sets EnvChromium.
//
// Each Open starts its own browser with a new empty profile (t.TempDir) and
// the flags a machine without network and running as root needs: --headless
// --no-sandbox --disable-gpu --disable-quic --no-first-run
// --disable-background-networking --disable-component-update --disable-sync.
//
// It imports nothing of the project but internal/testenv.
package testbrowser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/pyrula/caseworker/internal/testenv"
)

// EnvChromium names the environment variable that holds the path of the
// Chromium binary tests run.
const EnvChromium = "PYRULA_TEST_CHROMIUM"

// DefaultChromium is the binary used when EnvChromium is unset: where
// Debian's chromium package installs it.
const DefaultChromium = "/usr/bin/chromium"

// Timeout bounds the start of the browser and each action on a page: a
// navigation, an evaluation, a click.
const Timeout = 30 * time.Second

// Page is a page open in its own headless Chromium, for one test. Its methods
// fail the test they are given (t.Fatal) when the browser does not do what
// they ask.
type Page struct {
	ctx context.Context // the tab's chromedp context

	mu       sync.Mutex
	problems []string
}

// Open starts Chromium, opens rawURL (a file:// URL: see FileURL) in it and
// waits for the page's load event. The browser stops when the test ends;
// before it stops, the test fails with every problem the page logged meanwhile
// (see the package doc). Open skips the test, or fails it when services are
// required, when there is no Chromium.
func Open(t testing.TB, rawURL string) *Page {
	t.Helper()
	bin := chromium(t)

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
	)
	p := &Page{}
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithListener(p.listen))
	p.ctx = ctx
	// Cleanups run last in, first out: the check below runs while the
	// browser is still up, then the browser stops.
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	t.Cleanup(func() { p.check(t) })

	// The first action starts the browser and lives as long as it does, so
	// it gets no deadline of its own: a watchdog stops a browser that hangs.
	watchdog := time.AfterFunc(Timeout, cancel)
	err := chromedp.Do(ctx)
	if !watchdog.Stop() && err == nil {
		err = errors.New("timed out")
	}
	if err != nil {
		t.Fatalf("testbrowser: start %s: %v", bin, err)
	}
	p.do(t, "open "+rawURL, chromedp.Navigate(rawURL))
	return p
}

// FileURL returns the file:// URL of the file at path (made absolute).
func FileURL(t testing.TB, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatalf("testbrowser: %v", err)
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
}

// Eval evaluates the JavaScript expression expr in the page and decodes its
// value, as JSON, into out (a pointer; nil ignores the value). An expression
// that throws, or a value that does not decode into out, fails the test.
func (p *Page) Eval(t testing.TB, expr string, out any) {
	t.Helper()
	raw, err := run(p.ctx, chromedp.Evaluate[[]byte](expr))
	if err != nil {
		t.Fatalf("testbrowser: eval %s: %v", expr, err)
	}
	if out == nil {
		return
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("testbrowser: eval %s: decode %s: %v", expr, raw, err)
	}
}

// Click clicks, with the mouse, the first element that the CSS selector
// matches, once it is visible (scrolled into view first). No such element
// within Timeout fails the test.
func (p *Page) Click(t testing.TB, selector string) {
	t.Helper()
	p.do(t, "click "+selector, chromedp.Click(chromedp.CSS(selector)))
}

// Count returns how many elements match the CSS selector sel.
func (p *Page) Count(t testing.TB, sel string) int {
	t.Helper()
	var n int
	p.Eval(t, "document.querySelectorAll("+jsString(sel)+").length", &n)
	return n
}

// Texts returns the text (textContent) of every element that matches the
// CSS selector sel, in document order.
func (p *Page) Texts(t testing.TB, sel string) []string {
	t.Helper()
	var out []string
	p.Eval(t, "Array.from(document.querySelectorAll("+jsString(sel)+"), e => e.textContent)", &out)
	return out
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Text returns the text of the page as it is rendered
// (document.body.innerText): what is hidden, in a closed <details> for
// example, is left out.
func (p *Page) Text(t testing.TB) string {
	t.Helper()
	var text string
	p.Eval(t, "document.body.innerText", &text)
	return text
}

// do runs one action within Timeout, failing t with what on error.
func (p *Page) do(t testing.TB, what string, a chromedp.Action[chromedp.Void]) {
	t.Helper()
	if _, err := run(p.ctx, a); err != nil {
		t.Fatalf("testbrowser: %s: %v", what, err)
	}
}

// run runs a on the tab of ctx within Timeout.
func run[T any](ctx context.Context, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	return chromedp.Run(ctx, a)
}

// check fails t with every problem recorded. A last round trip to the page
// first lets the events sent before it arrive.
func (p *Page) check(t testing.TB) {
	t.Helper()
	if _, err := run(p.ctx, chromedp.Evaluate[chromedp.Void]("0")); err != nil && !t.Failed() {
		t.Errorf("testbrowser: the page no longer answers: %v", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, problem := range p.problems {
		t.Errorf("testbrowser: the page logged %s", problem)
	}
}

// listen records the problems among the events of the tab. It runs in the
// tab's read loop: it must return fast and run no command.
func (p *Page) listen(ev any) {
	var problem string
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		problem = "an uncaught exception: " + d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			problem += " " + d.Exception.Description
		}
		problem += fmt.Sprintf(" (%s:%d:%d)", d.URL, d.LineNumber+1, d.ColumnNumber+1)
	case *runtime.EventConsoleAPICalled:
		if ev.Type != runtime.ConsoleAPICalledTypeError && ev.Type != runtime.ConsoleAPICalledTypeAssert {
			return
		}
		args := make([]string, 0, len(ev.Args))
		for _, a := range ev.Args {
			args = append(args, remoteText(a))
		}
		problem = fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " "))
	case *log.EventEntryAdded:
		if ev.Entry.Level != log.EntryLevelError {
			return
		}
		problem = fmt.Sprintf("a browser log error (%s): %s", ev.Entry.Source, ev.Entry.Text)
		if ev.Entry.URL != "" {
			problem += " (" + ev.Entry.URL + ")"
		}
	case *network.EventRequestWillBeSent:
		u := ev.Request.URL
		scheme, _, _ := strings.Cut(u, ":")
		switch strings.ToLower(scheme) {
		case "file", "data", "about":
			return
		}
		problem = "a network request: " + ev.Request.Method + " " + u
	case *page.EventJavascriptDialogOpening:
		problem = fmt.Sprintf("a JavaScript %s dialog: %q", ev.Type, ev.Message)
		// A dialog blocks the page until it is answered; answer it from
		// another goroutine (no command may run in the read loop).
		go func() {
			ctx, cancel := context.WithTimeout(p.ctx, Timeout)
			defer cancel()
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}()
	default:
		return
	}
	p.mu.Lock()
	p.problems = append(p.problems, problem)
	p.mu.Unlock()
}

// remoteText is the text of a console argument: a primitive's value, else
// the object's description.
func remoteText(o *runtime.RemoteObject) string {
	if o == nil {
		return ""
	}
	if len(o.Value) > 0 {
		var s string
		if json.Unmarshal(o.Value, &s) == nil {
			return s
		}
		return string(o.Value)
	}
	if o.UnserializableValue != "" {
		return string(o.UnserializableValue)
	}
	return o.Description
}

// chromium returns the Chromium binary to run, or skips t (fails it when
// services are required) when there is none.
func chromium(t testing.TB) string {
	t.Helper()
	return find(t, os.Getenv(EnvChromium), DefaultChromium, testenv.Required())
}

// find is chromium given the variable's value, the default binary and
// whether services are required.
func find(t testing.TB, env, def string, required bool) string {
	t.Helper()
	if env != "" {
		if _, err := os.Stat(env); err != nil {
			t.Fatalf("testbrowser: %s=%s: %v", EnvChromium, env, err)
			return ""
		}
		return env
	}
	if _, err := os.Stat(def); err == nil {
		return def
	}
	if required {
		t.Fatalf("%s not set and no %s: this test needs Chromium and services are required (%s=1 or CI=true); run scripts/test, which installs it", EnvChromium, def, testenv.EnvRequireServices)
	} else {
		t.Skipf("%s not set and no %s: skipping a test that needs Chromium (scripts/test installs it)", EnvChromium, def)
	}
	return ""
}

package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/internal/testenv"
)

// An agent with no model client of its own, run without --llm-ref, is
// refused before it starts, with the flag to pass and its values.
func TestAgentWithoutModelClientSaysWhatToPass(t *testing.T) {
	t.Parallel()
	bin := divergeBinary(t)
	dir := t.TempDir()
	r := runIn(t, bin, dir, "dev", "helpdesk_bare")
	if r.code != 1 || !strings.Contains(r.stderr, "helpdesk_bare is an agent with no model client of its own: name one with --llm-ref anthropic|openai") {
		t.Fatalf("want exit 1 naming --llm-ref and its values\n%s", r)
	}
	// An agent with its own client runs without one.
	if r := runIn(t, bin, dir, "dev", "helpdesk"); r.code != 0 {
		t.Fatalf("dev helpdesk\n%s", r)
	}
}

// pyrula reaches a Valkey behind TLS with a private CA and a client
// certificate (mutual TLS) through the three file variables; without the
// client certificate the server refuses it.
func TestValkeyMutualTLS(t *testing.T) {
	t.Parallel()
	srv := testenv.StartTLSRedis(t)
	env := []string{"PYRULA_VALKEY_URL=" + srv.URL, "PYRULA_NAMESPACE=" + testenv.UniqueName(t, "tls"),
		"PYRULA_VALKEY_CA_FILE=" + srv.CAFile, "PYRULA_VALKEY_CERT_FILE=" + srv.CertFile, "PYRULA_VALKEY_KEY_FILE=" + srv.KeyFile}
	r := run(t, invocation{args: []string{"run", "checkout"}, env: env})
	if r.code != 0 || !strings.Contains(r.stdout, `"status":"complete"`) {
		t.Fatalf("want a complete run over mutual TLS\n%s", r)
	}
	r = run(t, invocation{args: []string{"run", "checkout"}, env: env[:3]})
	if r.code != 1 || !strings.HasPrefix(r.stderr, "error: ") {
		t.Fatalf("want exit 1 without the client certificate\n%s", r)
	}
	r = run(t, invocation{args: []string{"run", "checkout"}, env: append(env[:3:3], "PYRULA_VALKEY_CERT_FILE="+srv.CertFile)})
	if r.code != 1 || !strings.Contains(r.stderr, "PYRULA_VALKEY_CERT_FILE and PYRULA_VALKEY_KEY_FILE go together") {
		t.Fatalf("want exit 1 naming the two variables\n%s", r)
	}
}

// divergePkg is the import path of the package that registers the
// divergence tests' targets and model client.
const divergePkg = "github.com/pyrula/caseworker/cli/internal/divergetest"

// A target and a model client are named as on the product page,
// PACKAGE:NAME (Go's package import path, then the registered name),
// beside the bare name; a package that registered no such target says
// which one did.
func TestPackageQualifiedNames(t *testing.T) {
	t.Parallel()
	bin := divergeBinary(t)
	dir := t.TempDir()
	if r := runIn(t, bin, dir, "dev", divergePkg+":charge"); r.code != 0 || !strings.Contains(r.stdout, `"status":"complete"`) {
		t.Fatalf("dev PACKAGE:NAME\n%s", r)
	}
	file := dir + "/.pyrula/last/charge.case"
	if r := runIn(t, bin, dir, "case", "run", file, "--replay-only", "--target", divergePkg+":charge"); r.code != 0 {
		t.Fatalf("case run --target PACKAGE:NAME\n%s", r)
	}
	r := runIn(t, bin, dir, "case", "run", file, "--replay-only", "--target", "my_app.workflows:charge")
	if r.code != 1 || !strings.Contains(r.stderr, "target charge is registered by package "+divergePkg+", not my_app.workflows") {
		t.Fatalf("want exit 1 naming the package that registered charge\n%s", r)
	}
	r = runIn(t, bin, dir, "case", "test", file, "--target", divergePkg+":nope")
	if r.code != 1 || !strings.Contains(r.stderr, "package "+divergePkg+" registers no target \"nope\"") {
		t.Fatalf("want exit 1 for an unknown name\n%s", r)
	}

	// The registered model client by PACKAGE:NAME answers the live model
	// calls of a what-if run with another prompt.
	_, agent := devCase(t, bin, "helpdesk")
	prompt := dir + "/prompt.txt"
	if err := os.WriteFile(prompt, []byte("Be brief."), 0o644); err != nil {
		t.Fatal(err)
	}
	r = runIn(t, bin, dir, "case", "run", agent, "--prompt-file", prompt, "--llm-ref", divergePkg+":scripted")
	if r.code != 0 || !strings.Contains(r.stdout, `"llm_ref":"`+divergePkg+`:scripted"`) || r.stderr != "" {
		t.Fatalf("want the run answered by the package's client, with no warning\n%s", r)
	}
	r = runIn(t, bin, dir, "case", "run", agent, "--prompt-file", prompt, "--llm-ref", "other/pkg:scripted")
	if r.code != 1 || !strings.Contains(r.stderr, "names no model client") {
		t.Fatalf("want exit 1 for a client of another package\n%s", r)
	}
}

// --app-dir DIR runs the CLI of the module at DIR (built into a cache),
// so one installed pyrula serves any module: the starter's targets, and
// its kept cases replayed by its own targets; a directory with no CLI main
// says what is missing.
func TestAppDir(t *testing.T) {
	t.Parallel()
	starter, err := filepath.Abs(filepath.Join("..", "examples", "starter"))
	if err != nil {
		t.Fatal(err)
	}
	// The go command writes telemetry under the home directory in the
	// background: a home of the test's own, removed without waiting for it.
	home, err := os.MkdirTemp("", "pyrula-appdir-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(home) })
	env := []string{"HOME=" + home, "PYRULA_APP_CACHE=" + t.TempDir(), "GOPROXY=" + goEnv(t, "GOPROXY"),
		"GOCACHE=" + goEnv(t, "GOCACHE"), "GOMODCACHE=" + goEnv(t, "GOMODCACHE")}
	r := run(t, invocation{args: []string{"targets", "--app-dir", starter}, env: env})
	if r.code != 0 || !strings.Contains(r.stdout, `"name":"order"`) || !strings.Contains(r.stdout, `"package":"example.com/starter/flows"`) ||
		strings.Contains(r.stdout, `"name":"checkout"`) {
		t.Fatalf("want the starter's targets, not this binary's\n%s", r)
	}
	r = run(t, invocation{args: []string{"--app-dir=" + starter, "case", "test", filepath.Join(starter, "testdata")}, env: env})
	if r.code != 0 || !strings.Contains(r.stdout, `"type":"summary"`) {
		t.Fatalf("want the starter's kept cases to pass under its own CLI\n%s", r)
	}
	r = run(t, invocation{args: []string{"targets", "--app-dir", t.TempDir()}, env: env})
	if r.code != 1 || !strings.Contains(r.stderr, "--app-dir") {
		t.Fatalf("want exit 1 for a directory without a module\n%s", r)
	}
}

// goEnv is go env NAME.
func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// --deps-ref picks a dependency set a package registered: the charge step
// charges through the set's Charger (flow.Dep) in a live run and in a
// case run's live calls, while the recorded calls replay the same.
func TestDepsRef(t *testing.T) {
	t.Parallel()
	bin := divergeBinary(t)
	dir := t.TempDir()
	r := runIn(t, bin, dir, "dev", "charge", "--deps-ref", "test_cards")
	if r.code != 0 || !strings.Contains(r.stdout, `"result":"charged 25.00 (test_ch_2500)"`) {
		t.Fatalf("dev --deps-ref: want the test charge\n%s", r)
	}
	file := dir + "/.pyrula/last/charge.case"
	if r := runIn(t, bin, dir, "case", "run", file, "--replay-only"); r.code != 0 {
		t.Fatalf("the recorded case replays without the set\n%s", r)
	}
	r = runIn(t, bin, dir, "case", "run", file, "--from-start", "--input", "qty=3", "--allow-write", "step:charge",
		"--deps-ref", divergePkg+":test_cards", "--values")
	if r.code != 0 || !strings.Contains(r.stdout, `"result":"test_ch_3750"`) {
		t.Fatalf("case run --deps-ref PACKAGE:NAME: want the live charge through the set\n%s", r)
	}
	r = runIn(t, bin, dir, "dev", "charge", "--deps-ref", "real_cards")
	if r.code != 1 || !strings.Contains(r.stderr, "--deps-ref real_cards names no dependency set this binary registered (have test_cards)") {
		t.Fatalf("want exit 1 listing the sets\n%s", r)
	}
}

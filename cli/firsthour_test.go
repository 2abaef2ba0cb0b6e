package cli_test

import (
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

package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/daemon"
	"github.com/pyrula/caseworker/flow"
)

// TestStartUpFailureLogFormat: with PYRULA_LOG_FORMAT=json a start-up
// failure of serve (a bad variable, a bad registration) is one JSON log
// line at level error whose message is the error; with console, or the
// variable unset, it stays one plain "error:" line, as it does for the
// commands that print plain text (demo, db migrate).
func TestStartUpFailureLogFormat(t *testing.T) {
	t.Parallel()
	badReg := func(reg *flow.Registry) error {
		return flow.RegisterWorkflow(reg, flow.Workflow[struct{}, int]{Name: "orders", CodeVersion: "v1",
			Steps: []flow.Decl{flow.DeclareChild("receipts")},
			Run:   func(context.Context, struct{}) (int, error) { return 0, nil }})
	}
	const badValue = "invalid setting PYRULA_CONCURRENCY: not a valid int"
	const badTarget = `register targets: flow: invalid target: orders: declared child target "receipts" is not registered`
	for _, tc := range []struct {
		name     string
		format   string // PYRULA_LOG_FORMAT
		register func(*flow.Registry) error
		args     []string
		want     string
		json     bool
	}{
		{"json bad value", "json", nil, []string{"serve"}, badValue, true},
		{"json bad value, default command", "json", nil, nil, badValue, true},
		{"json bad registration", "json", badReg, []string{"serve"}, badTarget, true},
		{"console bad value", "console", nil, []string{"serve"}, badValue, false},
		{"unset bad value", "", nil, []string{"serve"}, badValue, false},
		{"json demo", "json", badReg, []string{"demo"}, badTarget, false},
		{"json db migrate", "json", nil, []string{"db", "migrate"}, "db migrate: PYRULA_POSTGRES_DSN is not set", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"PYRULA_CONCURRENCY": "abc", "PYRULA_VALKEY_URL": "redis://127.0.0.1:1/0", "PYRULA_CONSUMER_NAME": "c"}
			if tc.format != "" {
				env["PYRULA_LOG_FORMAT"] = tc.format
			}
			o := daemon.Options{Getenv: envOf(env), Register: tc.register}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			code := o.Main(ctx, tc.args, &stdout, &stderr)
			if code != 1 || stdout.Len() != 0 || strings.Count(stderr.String(), "\n") != 1 || !strings.HasSuffix(stderr.String(), "\n") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and one line on stderr", code, stdout.String(), stderr.String())
			}
			if !tc.json {
				if want := "error: " + tc.want + "\n"; stderr.String() != want {
					t.Fatalf("stderr %q, want %q", stderr.String(), want)
				}
				return
			}
			var line map[string]any
			if err := json.Unmarshal(stderr.Bytes(), &line); err != nil {
				t.Fatalf("stderr %q is not a JSON line: %v", stderr.String(), err)
			}
			if line["level"] != "error" || line["msg"] != tc.want || line["ts"] == nil {
				t.Fatalf("log line %v, want level error, msg %q and ts", line, tc.want)
			}
		})
	}
}

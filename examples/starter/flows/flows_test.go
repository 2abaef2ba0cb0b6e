package flows_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/cli"
	"github.com/pyrula/caseworker/flow"

	"example.com/starter/flows"
)

// line is one JSON line `pyrula case run` prints: a call or the outcome.
type line struct {
	Type           string    `json:"type"`
	Kind           string    `json:"kind"`
	Key            string    `json:"key"`
	Provenance     any       `json:"provenance"` // a string on calls, counts on the outcome
	Status         string    `json:"status"`
	Code           string    `json:"code"`
	Reason         string    `json:"reason"`
	StopKey        *string   `json:"stop_key"`
	ChangedCalls   []string  `json:"changed_calls"`
	UnconsumedKeys *[]string `json:"unconsumed_keys"`
}

// caseRun runs `pyrula case run ARGS…` through the CLI's entry point, with
// no environment (no store, no Valkey: the case is a file), and returns the
// exit status, the call lines and the outcome line.
func caseRun(t *testing.T, args ...string) (int, []line, line) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Options{Register: flows.Register}.Main(context.Background(),
		append([]string{"case", "run"}, args...), func(string) string { return "" }, nil, &stdout, &stderr)
	var calls []line
	var outcome line
	for _, raw := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var l line
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			t.Fatalf("case run %v: exit %d, a line that is not JSON: %q (%v)\nstderr: %s", args, code, raw, err, stderr.String())
		}
		switch l.Type {
		case "call":
			calls = append(calls, l)
		case "outcome":
			outcome = l
		}
	}
	if outcome.Type == "" {
		t.Fatalf("case run %v: exit %d, no outcome line\nstdout: %s\nstderr: %s", args, code, stdout.String(), stderr.String())
	}
	return code, calls, outcome
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestCasesReplay: the recorded cases replay with no live call. When a change
// to flows makes this fail on purpose, record the case again:
//
//	go run ./cmd/pyrula dev order --dir testdata && rm testdata/.gitignore testdata/order.events.jsonl
func TestCasesReplay(t *testing.T) {
	for _, c := range []struct {
		file  string
		calls int
	}{
		{"../testdata/order.case", 3},    // price, sleep, charge
		{"../testdata/helpdesk.case", 5}, // model, lookup_order, model, cancel_order, model
	} {
		t.Run(strings.TrimPrefix(c.file, "../testdata/"), func(t *testing.T) {
			code, calls, out := caseRun(t, c.file, "--replay-only")
			if code != 0 || out.Status != "complete" {
				t.Fatalf("exit %d, status %q (%s %s at %v), want 0 and complete", code, out.Status, out.Code, out.Reason, deref(out.StopKey))
			}
			if len(calls) != c.calls {
				t.Errorf("%d calls, want %d", len(calls), c.calls)
			}
			for _, l := range calls {
				if l.Provenance != "reused" {
					t.Errorf("call %s:%s: provenance %v, want reused", l.Kind, l.Key, l.Provenance)
				}
			}
			if out.UnconsumedKeys == nil || len(*out.UnconsumedKeys) != 0 {
				t.Errorf("unconsumed_keys %v, want []", out.UnconsumedKeys)
			}
		})
	}
}

// TestChangesDetected: a changed input that changes a recorded call's input
// stops a replay-only case run at that call (replay_diverged, exit 3); a
// changed pure call (the sleep's duration) is free and the run completes.
func TestChangesDetected(t *testing.T) {
	for _, c := range []struct {
		name, file, input string
		exit              int
		status, stopKey   string
		changed           []string
	}{
		{"order sku: the price read", "../testdata/order.case", `sku="SKU-7"`, 3, "error", "step:price:0", nil},
		{"order qty: the charge write", "../testdata/order.case", `qty=3`, 3, "error", "step:charge:0", nil},
		{"order delay_ms: the pure sleep", "../testdata/order.case", `delay_ms=50`, 0, "complete", "", []string{"sleep:0"}},
		{"helpdesk message: the first model call", "../testdata/helpdesk.case", `message="Cancel ord_1002, please."`, 3, "error", "model:0", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, out := caseRun(t, c.file, "--replay-only", "--input", c.input)
			if code != c.exit || out.Status != c.status {
				t.Fatalf("exit %d, status %q, want %d and %q", code, out.Status, c.exit, c.status)
			}
			if c.stopKey == "" {
				if !slices.Equal(out.ChangedCalls, c.changed) {
					t.Errorf("changed_calls %v, want %v", out.ChangedCalls, c.changed)
				}
				return
			}
			if out.Code != "replay_diverged" || out.Reason != "input_changed" || out.StopKey == nil || *out.StopKey != c.stopKey {
				t.Errorf("code %q reason %q stop_key %v, want replay_diverged, input_changed at %s", out.Code, out.Reason, deref(out.StopKey), c.stopKey)
			}
		})
	}
}

// TestRegister: Register registers both targets on a fresh registry, the
// registry passes the start-up check, and registering twice is refused.
func TestRegister(t *testing.T) {
	reg := flow.NewRegistry()
	if err := flows.Register(reg); err != nil {
		t.Fatal(err)
	}
	if err := reg.Check(); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, info := range reg.Targets() {
		names = append(names, info.Name+"/"+string(info.Kind))
	}
	if want := []string{"helpdesk/agent", "order/workflow"}; !slices.Equal(names, want) {
		t.Errorf("targets %v, want %v", names, want)
	}
	if err := flows.Register(reg); !errors.Is(err, flow.ErrDuplicateTarget) {
		t.Errorf("registering twice: %v, want %v", err, flow.ErrDuplicateTarget)
	}
}

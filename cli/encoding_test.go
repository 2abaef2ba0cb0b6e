package cli_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
)

// TestOneEncodingOfEvents checks that an event prints with the same bytes
// wherever it is printed: pyrula run's terminal event is byte for byte the
// last line of pyrula events (from Valkey and, once archived, from the
// PostgreSQL archive); every line has its keys in code-point order and
// microsecond times, as case run --events and dev print theirs; and
// run:submitted is not stamped after run:start.
func TestOneEncodingOfEvents(t *testing.T) {
	t.Parallel()
	e := newJournalEnv(t, true, "PYRULA_COMPLETED_TTL=1s")
	r := e.run("run", "checkout", "--input", "delay_ms=1")
	wantOK(t, r)
	var out struct {
		RunID    string          `json:"run_id"`
		Terminal json.RawMessage `json:"terminal"`
	}
	decodeOne(t, r, &out)
	ev := e.run("events", out.RunID)
	wantOK(t, ev)
	lines := strings.Split(strings.TrimSpace(ev.stdout), "\n")
	if last := lines[len(lines)-1]; last != string(out.Terminal) {
		t.Errorf("run printed the terminal event\n%s\nevents printed\n%s", out.Terminal, last)
	}
	checkCanonicalLines(t, "pyrula events", lines)
	// Once the run's keys expired, the archive prints the same bytes.
	client := testenv.ValkeyClient(t)
	testwait.Eventually(t, 20*time.Second, "the run's events key expired", func() bool {
		n, err := client.Do(context.Background(), client.B().Exists().Key(e.ns+":{"+out.RunID+"}:events").Build()).AsInt64()
		return err == nil && n == 0
	})
	archived := e.run("events", out.RunID)
	wantOK(t, archived)
	if archived.stdout != ev.stdout {
		t.Errorf("the archive prints\n%s\nValkey printed\n%s", archived.stdout, ev.stdout)
	}
	var at [2]time.Time
	for i := range 2 {
		var v struct {
			At   time.Time `json:"at"`
			Kind string    `json:"kind"`
		}
		if err := json.Unmarshal([]byte(lines[i]), &v); err != nil {
			t.Fatal(err)
		}
		at[i] = v.At
	}
	if at[0].After(at[1]) {
		t.Errorf("run:submitted at %v is after run:start at %v", at[0], at[1])
	}

	dir := t.TempDir()
	_, _, kept := dev(t, dir, "checkout", "--dir", dir, "--input", "delay_ms=1")
	evPath := filepath.Join(t.TempDir(), "ev.jsonl")
	cr := run(t, invocation{args: []string{"case", "run", kept.Case, "--replay-only", "--events", evPath}})
	wantOK(t, cr)
	caseLines := strings.Split(strings.TrimSpace(string(readFile(t, evPath))), "\n")
	checkCanonicalLines(t, "case run --events", caseLines)
	// The journaled case:outcome is the outcome line: the same fields and
	// values, last_seq the run's real last run_seq (its terminal event's).
	outLines := strings.Split(strings.TrimSpace(cr.stdout), "\n")
	var line, event, terminal map[string]json.RawMessage
	json.Unmarshal([]byte(outLines[len(outLines)-1]), &line)
	json.Unmarshal([]byte(caseLines[len(caseLines)-2]), &event)
	json.Unmarshal([]byte(caseLines[len(caseLines)-1]), &terminal)
	if string(event["kind"]) != `"case:outcome"` || string(line["last_seq"]) != string(terminal["run_seq"]) {
		t.Fatalf("case:outcome %s, outcome last_seq %s, terminal run_seq %s", event["kind"], line["last_seq"], terminal["run_seq"])
	}
	delete(line, "type")
	for _, k := range []string{"at", "kind", "run_seq"} {
		delete(event, k)
	}
	if len(line) != len(event) {
		t.Errorf("outcome line has %d fields, case:outcome %d", len(line), len(event))
	}
	norm := func(raw json.RawMessage) string {
		var v any
		json.Unmarshal(raw, &v)
		out, _ := json.Marshal(v)
		return string(out)
	}
	for k, v := range line {
		if norm(event[k]) != norm(v) {
			t.Errorf("%s: outcome line %s, case:outcome %s", k, v, event[k])
		}
	}
	checkCanonicalLines(t, "dev", strings.Split(strings.TrimSpace(string(readFile(t, kept.Events))), "\n"))
}

// checkCanonicalLines checks that each line is an event with its keys in
// code-point order, no white space, and "at" with microseconds.
func checkCanonicalLines(t *testing.T, what string, lines []string) {
	t.Helper()
	for _, l := range lines {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%s: %q: %v", what, l, err)
		}
		keys := make([]string, 0, len(m))
		dec := json.NewDecoder(strings.NewReader(l))
		dec.Token() // {
		for dec.More() {
			k, _ := dec.Token()
			keys = append(keys, k.(string))
			var skip json.RawMessage
			dec.Decode(&skip)
		}
		if !slices.IsSorted(keys) {
			t.Errorf("%s: keys %v not in order: %s", what, keys, l)
		}
		var at string
		json.Unmarshal(m["at"], &at)
		if len(at) != len("2006-01-02T15:04:05.000000Z") || !strings.HasSuffix(at, "Z") {
			t.Errorf("%s: at %q is not RFC 3339 UTC with microseconds", what, at)
		}
		if strings.ContainsAny(l, "\n\t") || strings.Contains(l, `": `) {
			t.Errorf("%s: white space in %s", what, l)
		}
	}
}

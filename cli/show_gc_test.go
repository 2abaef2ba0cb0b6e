package cli_test

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// showOut is case show's output, as a test reads it.
type showOut struct {
	FixtureHash  string                     `json:"fixture_hash"`
	FixtureStore string                     `json:"fixture_store"`
	Manifest     map[string]json.RawMessage `json:"manifest"`
	Counts       struct {
		History       int            `json:"history"`
		Results       int            `json:"results"`
		Errors        int            `json:"errors"`
		ResultsByKind map[string]int `json:"results_by_kind"`
	} `json:"counts"`
	History []map[string]json.RawMessage `json:"history"`
	Results []map[string]json.RawMessage `json:"results"`
}

func TestShowWithoutValues(t *testing.T) {
	t.Parallel()
	f := setup(t)
	h := f.importFile(checkoutFile)
	r := f.run("case", "show", h)
	wantOK(t, r)
	var out showOut
	decodeOne(t, r, &out)

	if out.FixtureHash != h || out.FixtureStore != f.identity() {
		t.Fatalf("fixture_hash %q fixture_store %q", out.FixtureHash, out.FixtureStore)
	}
	// No input or call values anywhere: the customer's name is an input,
	// the reservation id a result, the idempotency key a call input.
	for _, secret := range []string{"Jürgen", "rsv_88f1", "CouponExpired", "idempotency_key", "ch_3NZ"} {
		if strings.Contains(r.stdout, secret) {
			t.Errorf("show without --values prints %q\n%s", secret, r.stdout)
		}
	}
	if _, ok := out.Manifest["inputs"]; ok {
		t.Errorf("manifest has inputs without --values: %s", out.Manifest["inputs"])
	}
	if got := string(out.Manifest["input_keys"]); got != `["coupon","currency","customer","items","order_id","shipping"]` {
		t.Errorf("input_keys = %s", got)
	}
	for k, want := range map[string]string{
		"format":         `1`,
		"kind":           `"workflow"`,
		"target_name":    `"checkout"`,
		"code_version":   `"git:3f9a1c2"`,
		"fork_after_seq": `10`,
		"capture":        `{"complete":true,"missing":[]}`,
		"source":         `{"run_id":"run_abc123","namespace":"pyrula","origin":"valkey"}`,
		"pyrula_version": `"0.1.0"`,
	} {
		if got := string(out.Manifest[k]); got != want {
			t.Errorf("manifest %s = %s, want %s", k, got, want)
		}
	}
	if !strings.Contains(string(out.Manifest["registration"]), `{"id":"charge_card","name":"charge_card","effect":"write"}`) {
		t.Errorf("manifest registration = %s", out.Manifest["registration"])
	}

	if out.Counts.History != 10 || out.Counts.Results != 8 || out.Counts.Errors != 1 {
		t.Errorf("counts = %+v", out.Counts)
	}
	if want := map[string]int{"step": 6, "sleep": 1, "now": 1}; !maps.Equal(out.Counts.ResultsByKind, want) {
		t.Errorf("results_by_kind = %v, want %v", out.Counts.ResultsByKind, want)
	}

	if len(out.History) != 10 {
		t.Fatalf("history has %d events, want 10", len(out.History))
	}
	for i, ev := range out.History {
		if got := string(ev["run_seq"]); got != strconv.Itoa(i+1) {
			t.Errorf("history[%d].run_seq = %s", i, got)
		}
		for k := range ev {
			if k != "run_seq" && k != "kind" && k != "call" {
				t.Errorf("history[%d] has %q without --values", i, k)
			}
		}
	}
	if got := string(out.History[6]["call"]); got != `{"kind":"step","key":"reserve_inventory:0"}` {
		t.Errorf("history[6].call = %s", got)
	}
	if _, ok := out.History[0]["call"]; ok {
		t.Errorf("run:submitted has a call: %v", out.History[0])
	}

	var ids []string
	for i, res := range out.Results {
		var kind, key, outcome, fp string
		_ = json.Unmarshal(res["kind"], &kind)
		_ = json.Unmarshal(res["key"], &key)
		_ = json.Unmarshal(res["outcome"], &outcome)
		_ = json.Unmarshal(res["fingerprint"], &fp)
		ids = append(ids, kind+":"+key+"="+outcome)
		if len(fp) != 64 {
			t.Errorf("results[%d].fingerprint = %q", i, fp)
		}
		if len(res) != 4 {
			t.Errorf("results[%d] has %d fields without --values: %v", i, len(res), res)
		}
	}
	want := []string{
		"now:0=result", "sleep:0=result",
		"step:apply_coupon:0=error", "step:charge_card:0=result", "step:fraud_check:0=result",
		"step:reserve_inventory:0=result", "step:send_receipt:0=result", "step:validate_cart:0=result",
	}
	if !slices.Equal(ids, want) {
		t.Errorf("results %v, want %v", ids, want)
	}
}

func TestShowWithValues(t *testing.T) {
	t.Parallel()
	f := setup(t)
	h := f.importFile(checkoutFile)
	r := f.run("case", "show", "--values", h)
	wantOKWarned(t, r)
	var out showOut
	decodeOne(t, r, &out)

	var inputs map[string]json.RawMessage
	if err := json.Unmarshal(out.Manifest["inputs"], &inputs); err != nil {
		t.Fatalf("manifest inputs with --values: %v (%s)", err, out.Manifest["inputs"])
	}
	if got := string(inputs["customer"]); got != `{"email":"jurgen@example.com","id":"cus_1042","name":"Jürgen Weiß"}` {
		t.Errorf("inputs.customer = %s", got)
	}
	if got := string(out.History[1]["inputs"]); !strings.Contains(got, `"order_id":"ord_7Q2K"`) {
		t.Errorf("run:start event without its inputs: %v", out.History[1])
	}
	if got := string(out.History[1]["at"]); got != `"2025-03-14T09:26:53.074Z"` {
		t.Errorf("run:start at = %s", got)
	}
	byID := map[string]map[string]json.RawMessage{}
	for _, res := range out.Results {
		var kind, key string
		_ = json.Unmarshal(res["kind"], &kind)
		_ = json.Unmarshal(res["key"], &key)
		byID[kind+":"+key] = res
	}
	// Numbers keep their text: 0.0001 and 100.0 stay as written by Python.
	if got := string(byID["step:fraud_check:0"]["result"]); got != `{"decision":"allow","rules":[],"score":0.0001}` {
		t.Errorf("fraud_check result = %s", got)
	}
	if got := string(byID["step:apply_coupon:0"]["error"]); !strings.Contains(got, `"type":"CouponExpired"`) {
		t.Errorf("apply_coupon error = %s", got)
	}
	if _, ok := byID["step:apply_coupon:0"]["result"]; ok {
		t.Errorf("an error result shows a result: %v", byID["step:apply_coupon:0"])
	}
	// A null result is a result.
	if got := string(byID["sleep:0"]["result"]); got != "null" {
		t.Errorf("sleep result = %q, want null", got)
	}
	if got := string(byID["step:send_receipt:0"]["result"]); !strings.Contains(got, `"<20250314.ab12@mail.example.com>"`) {
		t.Errorf("send_receipt result is HTML-escaped or missing: %s", got)
	}
}

func TestShowAgent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	h := f.importFile(agentFile)
	r := f.run("case", "show", h)
	wantOK(t, r)
	var out showOut
	decodeOne(t, r, &out)
	if got := string(out.Manifest["registration"]); got != `{"tools":[{"name":"lookup_order","writes":false},{"name":"issue_refund","writes":true}],"steps":[]}` {
		t.Errorf("registration = %s", got)
	}
	if got := string(out.Manifest["recorded_config"]); got != `{"model":"claude-sonnet-4-5"}` {
		t.Errorf("recorded_config = %s", got)
	}
	if want := map[string]int{"model": 3, "tool": 2}; !maps.Equal(out.Counts.ResultsByKind, want) {
		t.Errorf("results_by_kind = %v, want %v", out.Counts.ResultsByKind, want)
	}
	if strings.Contains(r.stdout, "damaged") {
		t.Errorf("show without --values prints the ticket text\n%s", r.stdout)
	}
}

// gcLine is one line of case gc.
type gcLine struct {
	FixtureHash string `json:"fixture_hash"`
	SizeBytes   int64  `json:"size_bytes"`
	Action      string `json:"action"`
}

// gcActions runs gc and returns "hash=action" for each line.
func gcActions(t *testing.T, f *fixture, args ...string) []string {
	t.Helper()
	r := f.run(append([]string{"case", "gc"}, args...)...)
	wantOK(t, r)
	var got []string
	for _, l := range decodeLines[gcLine](t, r) {
		if l.SizeBytes <= 0 {
			t.Errorf("gc line %+v without a size", l)
		}
		got = append(got, l.FixtureHash+"="+l.Action)
	}
	return got
}

// age makes every stored bundle an hour old, as if imported long before the
// gc that follows. (The file store counts a bundle updated in the same
// second as gc's start as new, whatever the file system's time resolution.)
func (f *fixture) age() {
	f.t.Helper()
	old := time.Now().Add(-time.Hour)
	err := filepath.WalkDir(f.dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !strings.HasSuffix(path, ".case") {
			return err
		}
		return os.Chtimes(path, old, old)
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

// listed returns the hashes case list prints.
func listed(t *testing.T, f *fixture) []string {
	t.Helper()
	var hashes []string
	for _, l := range decodeLines[listLine](t, f.run("case", "list")) {
		hashes = append(hashes, l.FixtureHash)
	}
	return hashes
}

func TestGC(t *testing.T) {
	t.Parallel()
	both := []string{agentHash, checkoutHash}
	keepFile := "# cases CI depends on\n\n  " + checkoutHash + "  # checkout happy path\r\n#" + agentHash + "\n"

	for _, tc := range []struct {
		name string
		args []string
		want []string // gc lines
		left []string // listed afterwards
	}{
		{"dry run lists all", nil,
			[]string{agentHash + "=candidate", checkoutHash + "=candidate"}, both},
		{"dry run with keep", []string{"--keep", checkoutHash},
			[]string{agentHash + "=candidate"}, both},
		{"dry run with keep file", []string{"--keep-file", "KEEPFILE"},
			[]string{agentHash + "=candidate"}, both},
		{"yes with keep", []string{"--keep", checkoutHash, "--yes"},
			[]string{agentHash + "=deleted"}, []string{checkoutHash}},
		{"yes with keep file", []string{"--yes", "--keep-file", "KEEPFILE"},
			[]string{agentHash + "=deleted"}, []string{checkoutHash}},
		{"yes keeping both", []string{"--yes", "--keep", checkoutHash, "--keep", agentHash},
			nil, both},
		{"yes keeping absent", []string{"--yes", "--keep", absentHash},
			[]string{agentHash + "=deleted", checkoutHash + "=deleted"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			f.importFile(checkoutFile)
			f.importFile(agentFile)
			f.age()
			args := slices.Clone(tc.args)
			for i, a := range args {
				if a == "KEEPFILE" {
					args[i] = writeFile(t, "keep.txt", []byte(keepFile))
				}
			}
			if got := gcActions(t, f, args...); !slices.Equal(got, tc.want) {
				t.Errorf("gc %v printed %v, want %v", args, got, tc.want)
			}
			if got := listed(t, f); !slices.Equal(got, tc.left) {
				t.Errorf("after gc %v the store lists %v, want %v", args, got, tc.left)
			}
		})
	}
}

func TestGCKeepFileStdin(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.importFile(checkoutFile)
	f.importFile(agentFile)
	f.age()
	r := f.runStdin([]byte(agentHash+"\n"), "case", "gc", "--keep-file", "-", "--yes")
	wantOK(t, r)
	if got := listed(t, f); !slices.Equal(got, []string{agentHash}) {
		t.Fatalf("after gc the store lists %v", got)
	}
}

func TestGCEmptyStore(t *testing.T) {
	t.Parallel()
	if got := gcActions(t, setup(t), "--yes"); len(got) != 0 {
		t.Fatalf("gc of an empty store printed %v", got)
	}
}

func TestGCNeverSweepsNewBundles(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.importFile(checkoutFile)
	h := f.importFile(agentFile)
	f.age()
	// A bundle updated after gc started: the file store's updated time is
	// the blob's modification time.
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(f.blobPath(h), future, future); err != nil {
		t.Fatal(err)
	}
	got := gcActions(t, f, "--yes")
	if want := []string{agentHash + "=skipped_new", checkoutHash + "=deleted"}; !slices.Equal(got, want) {
		t.Fatalf("gc printed %v, want %v", got, want)
	}
	if got := listed(t, f); !slices.Equal(got, []string{agentHash}) {
		t.Fatalf("after gc the store lists %v", got)
	}
}

func TestInvalidKeepHash(t *testing.T) {
	t.Parallel()
	upper := strings.ToUpper(checkoutHash)
	for _, tc := range []struct {
		name     string
		args     []string
		keepFile string
		want     []string // in the message
	}{
		{"short flag", []string{"--keep", "9f2c"}, "", []string{`"9f2c"`, "--keep"}},
		{"upper-case flag", []string{"--keep", checkoutHash, "--keep", upper}, "", []string{upper}},
		{"empty flag", []string{"--keep", ""}, "", []string{`""`}},
		{"file line", nil, "# keep\n" + checkoutHash + "\n\nnot-a-hash # oops\n", []string{`"not-a-hash"`, "keep.txt:4"}},
		{"file upper-case", nil, upper + "\n", []string{upper, "keep.txt:1"}},
		{"file two per line", nil, checkoutHash + " " + agentHash + "\n", []string{"keep.txt:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			f.importFile(checkoutFile)
			args := append([]string{"case", "gc", "--yes"}, tc.args...)
			if tc.keepFile != "" {
				args = append(args, "--keep-file", writeFile(t, "keep.txt", []byte(tc.keepFile)))
			}
			msg := wantRefusal(t, f.run(args...), "invalid_keep_hash")
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not name %q", msg, w)
				}
			}
			// Nothing was swept.
			if got := listed(t, f); !slices.Equal(got, []string{checkoutHash}) {
				t.Errorf("a refused gc changed the store: %v", got)
			}
		})
	}
}

func TestGCUnreadableKeepFile(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.importFile(checkoutFile)
	missing := filepath.Join(t.TempDir(), "keep.txt")
	wantError(t, f.run("case", "gc", "--yes", "--keep-file", missing), "keep.txt")
	if got := listed(t, f); !slices.Equal(got, []string{checkoutHash}) {
		t.Errorf("gc with an unreadable keep file changed the store: %v", got)
	}
}

package cli_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// compareLine is an arm or the comparison line of case compare.
type compareLine struct {
	Type       string  `json:"type"`
	Arm        int     `json:"arm"`
	Model      *string `json:"model"`
	PromptFile *string `json:"prompt_file"`
	Outcome    struct {
		Status       string          `json:"status"`
		Code         string          `json:"code"`
		LiveCalls    int             `json:"live_calls"`
		ChangedCalls []string        `json:"changed_calls"`
		CostUSD      json.RawMessage `json:"cost_usd"`
		Result       json.RawMessage `json:"result"`
		FixtureHash  string          `json:"fixture_hash"`
	} `json:"outcome"`

	SameStatus bool `json:"same_status"`
	SameResult bool `json:"same_result"`
	SameCalls  bool `json:"same_calls"`
	Arms       []struct {
		Arm         int             `json:"arm"`
		Model       *string         `json:"model"`
		Status      string          `json:"status"`
		Code        *string         `json:"code"`
		LiveCalls   int             `json:"live_calls"`
		CostUSD     json.RawMessage `json:"cost_usd"`
		VsFirst     *armDiffOut     `json:"vs_first"`
		VsRecording armDiffOut      `json:"vs_recording"`
		Assertions  []struct {
			Assertion string `json:"assertion"`
			Holds     bool   `json:"holds"`
			Found     string `json:"found"`
		} `json:"assertions"`
	} `json:"arms"`
}

type armDiffOut struct {
	SameResult *bool          `json:"same_result"`
	Result     *fieldDiffOut  `json:"result"`
	Calls      map[string]int `json:"calls"`
	Changes    []diffLine     `json:"changes"`
}

// compareOf splits case compare's output into its arm lines and the
// comparison.
func compareOf(t *testing.T, r result) ([]compareLine, compareLine) {
	t.Helper()
	lines := decodeLines[compareLine](t, r)
	if len(lines) < 3 || lines[len(lines)-1].Type != "comparison" {
		t.Fatalf("want arm lines and a comparison line\n%s", r)
	}
	for i, l := range lines[:len(lines)-1] {
		if l.Type != "arm" || l.Arm != i+1 {
			t.Fatalf("want arm lines 1… first\n%s", r)
		}
	}
	return lines[:len(lines)-1], lines[len(lines)-1]
}

// armServer is a local OpenAI-compatible server on which two models
// answer support_agent differently: "gpt-helpful" looks the order up and
// then answers; "gpt-terse" answers at once, without a tool. It keeps the
// model and system prompt of each request.
type armServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []string // "<model>|<system prompt>"
}

func newArmServer(t *testing.T) *armServer {
	t.Helper()
	s := &armServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		if r.URL.Path != "/v1/chat/completions" || json.NewDecoder(r.Body).Decode(&req) != nil || len(req.Messages) == 0 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		var system string
		if req.Messages[0].Role == "system" {
			_ = json.Unmarshal(req.Messages[0].Content, &system)
		}
		s.mu.Lock()
		s.requests = append(s.requests, req.Model+"|"+system)
		s.mu.Unlock()
		message, finish := `{"role":"assistant","content":"Your order ord_7Q2K is delivered; a refund is on its way."}`, "stop"
		switch last := req.Messages[len(req.Messages)-1].Role; {
		case req.Model == "gpt-terse":
			message = `{"role":"assistant","content":"Please contact the shop."}`
		case last != "tool":
			message = `{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup_order","arguments":"{\"order_id\":\"ord_7Q2K\"}"}}]}`
			finish = "tool_calls"
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":%s,"finish_reason":%q}],"usage":{"prompt_tokens":1000,"completion_tokens":50,"total_tokens":1050}}`,
			req.Model, message, finish)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *armServer) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

// TestCaseCompareArmsDiffer: two models on a local OpenAI-compatible
// server answer a recorded support_agent case differently; case compare
// runs one arm each from the same fork, reports each arm's outcome, and
// the comparison says how the results and the calls differ, between the
// arms and against the recording. The live budget applies to each arm.
func TestCaseCompareArmsDiffer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rec := dir + "/support_agent.case"
	if r, _, out := dev(t, dir, "support_agent", "--dir", dir); out.Status != "complete" {
		t.Fatalf("record\n%s", r)
	}
	srv := newArmServer(t)
	env := []string{"OPENAI_BASE_URL=" + srv.URL + "/v1"}
	prices := writeFile(t, "prices.json", []byte(`{"gpt-helpful":{"input_per_mtok":1,"output_per_mtok":2},"gpt-terse":{"input_per_mtok":1,"output_per_mtok":2}}`))
	args := []string{"case", "compare", rec, "--llm-ref", "openai", "--model", "gpt-helpful", "--model", "gpt-terse",
		"--prices", prices, "--max-cost-usd", "0.5", "--allow-write", "tool:refund"}

	r := run(t, invocation{args: args, env: env})
	wantOK(t, r)
	arms, cmp := compareOf(t, r)
	if len(arms) != 2 || str(arms[0].Model) != "gpt-helpful" || str(arms[1].Model) != "gpt-terse" || arms[0].PromptFile != nil {
		t.Fatalf("arms\n%s", r)
	}
	// helpful: two model calls and a lookup, live; terse: one model call.
	if a := arms[0].Outcome; a.Status != "complete" || a.LiveCalls != 3 || string(a.CostUSD) != "0.0022" || a.Result != nil {
		t.Errorf("arm 1 outcome %+v", a)
	}
	if b := arms[1].Outcome; b.Status != "complete" || b.LiveCalls != 1 || string(b.CostUSD) != "0.0011" || b.FixtureHash != arms[0].Outcome.FixtureHash {
		t.Errorf("arm 2 outcome %+v", b)
	}
	if got := srv.seen(); len(got) != 3 {
		t.Errorf("the server saw %v, want three requests", got)
	}
	if !cmp.SameStatus || cmp.SameResult || cmp.SameCalls || len(cmp.Arms) != 2 || cmp.Arms[0].VsFirst != nil {
		t.Fatalf("comparison\n%s", r)
	}
	vs := cmp.Arms[1].VsFirst
	if vs == nil || vs.SameResult == nil || *vs.SameResult || fmt.Sprint(vs.Result.Changed) != "[$.reply $.turns]" || vs.Result.Values != nil {
		t.Errorf("arm 2 against arm 1: result %+v", vs)
	}
	changes := map[string]string{}
	for _, c := range vs.Changes {
		changes[c.Call] = c.Change + fmt.Sprint(c.Fields)
	}
	// Both arms' first model call differs (another model); only the
	// helpful arm went on to a tool and a second model call.
	if changes["model:0"] != "changed[fingerprint input result]" || changes["model:1"] != "removed[]" || changes["tool:call_1"] != "removed[]" {
		t.Errorf("arm 2 against arm 1: calls %v\n%s", changes, r)
	}
	// Against the recording (four model calls, three tools): the terse
	// arm made only model:0, and differently.
	rv := cmp.Arms[1].VsRecording
	if rv.Calls["changed"] != 1 || rv.Calls["removed"] != 6 || rv.Calls["added"] != 0 || rv.Calls["same"] != 0 {
		t.Errorf("arm 2 against the recording: %v", rv.Calls)
	}
	if cmp.Arms[0].LiveCalls != 3 || str(cmp.Arms[1].Code) != "<null>" || string(cmp.Arms[1].CostUSD) != "0.0011" {
		t.Errorf("comparison arms %+v", cmp.Arms)
	}
	if strings.Contains(r.stdout, "refund is on its way") {
		t.Errorf("values without --values\n%s", r)
	}

	// --values: results and the values that differ, with the warning.
	r = run(t, invocation{args: append(args, "--values"), env: env})
	if r.code != 0 || !strings.Contains(r.stderr, "unredacted") {
		t.Fatalf("--values\n%s", r)
	}
	arms, cmp = compareOf(t, r)
	if !strings.Contains(string(arms[0].Outcome.Result), "refund is on its way") ||
		!strings.Contains(string(cmp.Arms[1].VsFirst.Result.Values["$.reply"]["b"]), "Please contact the shop") {
		t.Errorf("--values\n%s", r)
	}

	// The same budget for each arm: one live call is enough for the terse
	// arm, not for the helpful one.
	r = run(t, invocation{args: append(args, "--live-budget", "1"), env: env})
	arms, cmp = compareOf(t, r)
	if r.code != 3 || arms[0].Outcome.Code != "live_budget_exceeded" || arms[1].Outcome.Status != "complete" || cmp.SameStatus {
		t.Errorf("--live-budget 1: want arm 1 stopped, arm 2 complete, exit 3\n%s", r)
	}

	// Arms may vary the prompt: one model, two prompt files.
	p1, p2 := writeFile(t, "p1.txt", []byte("Be kind.")), writeFile(t, "p2.txt", []byte("Be brief."))
	before := len(srv.seen())
	r = run(t, invocation{args: []string{"case", "compare", rec, "--llm-ref", "openai", "--model", "gpt-terse", "--prompt-file", p1, "--prompt-file", p2}, env: env})
	wantOK(t, r)
	arms, cmp = compareOf(t, r)
	if str(arms[0].PromptFile) != p1 || str(arms[1].PromptFile) != p2 || str(arms[1].Model) != "gpt-terse" || !cmp.SameResult {
		t.Errorf("prompt arms\n%s", r)
	}
	seen := strings.Join(srv.seen()[before:], ",")
	if !strings.Contains(seen, "gpt-terse|Be kind.") || !strings.Contains(seen, "gpt-terse|Be brief.") {
		t.Errorf("the server saw %s", seen)
	}
	if c := cmp.Arms[1].VsFirst.Changes; len(c) != 1 || c[0].Call != "model:0" || fmt.Sprint(c[0].Input.Changed) != "[$.system]" {
		t.Errorf("prompt arms differ in model:0's system only, got %+v", c)
	}
}

// TestCaseCompareScripted: with no --llm-ref the agent's own scripted
// model answers every arm (with a warning); arms are checked before
// anything runs.
func TestCaseCompareScripted(t *testing.T) {
	t.Parallel()
	rec := sampleCase("support-agent-recorded.json")
	r := run(t, invocation{args: []string{"case", "compare", rec, "--model", "local-support-1", "--model", "local-support-2", "--allow-write", "tool:refund"}})
	if r.code != 0 || !strings.HasPrefix(r.stderr, "warning: ") || !strings.Contains(r.stderr, "own model client") {
		t.Fatalf("want exit 0 and a warning\n%s", r)
	}
	arms, cmp := compareOf(t, r)
	if len(arms) != 2 || arms[0].Outcome.Status != "complete" || arms[1].Outcome.Status != "complete" || !cmp.SameStatus || !cmp.SameResult {
		t.Fatalf("scripted arms\n%s", r)
	}
	// The prefix (model:0, tool:toolu_01) is answered by the recording;
	// the later model calls of the second arm ran on local-support-2.
	// Against the recording every model call differs in its input's
	// model (the prefix's too: made on another model, answered from the
	// recording); the tools are the same calls.
	if fmt.Sprint(arms[1].Outcome.ChangedCalls) != "[model:1 model:2 model:3]" {
		t.Errorf("arm 2 changed %v", arms[1].Outcome.ChangedCalls)
	}
	vr := cmp.Arms[1].VsRecording
	if vr.Calls["changed"] != 4 || vr.Calls["same"] != 3 || vr.Changes[0].Call != "model:0" ||
		fmt.Sprint(vr.Changes[0].Fields) != "[fingerprint input]" || fmt.Sprint(vr.Changes[0].Input.Changed) != "[$.model]" {
		t.Errorf("arm 2 against the recording %+v", vr)
	}
	if v := cmp.Arms[0].VsRecording.Calls; v["same"] != 7 {
		t.Errorf("arm 1 (the recorded model) against the recording %v", v)
	}

	wantError(t, run(t, invocation{args: []string{"case", "compare", rec, "--model", "m"}}), "give two arms or more")
	wantError(t, run(t, invocation{args: []string{"case", "compare", rec, "--model", "a", "--model", "b", "--prompt-file", "x", "--prompt-file", "y", "--prompt-file", "z"}}),
		"2 --model and 3 --prompt-file")
	wantError(t, run(t, invocation{args: []string{"case", "compare", sampleCase("checkout-recorded.json"), "--model", "a", "--model", "b"}}),
		"checkout is a workflow")
	wantError(t, run(t, invocation{args: []string{"case", "compare", rec, "--model", "a", "--model", "b", "--allow-write", "tool:refnd"}}),
		"--allow-write tool:refnd names no tool or step of support_agent")
	wantError(t, run(t, invocation{args: []string{"case", "compare", rec, "--model", "a", "--model", "b", "--llm-ref", "nope"}}), `names no model client`)
}

// TestCaseCompareAssert: --assert checks every arm's answer and spend; an
// assertion that does not hold exits 3 and says what was found; a file of
// assertions that cannot be checked is refused.
func TestCaseCompareAssert(t *testing.T) {
	t.Parallel()
	rec := sampleCase("support-agent-recorded.json")
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	args := []string{"case", "compare", rec, "--model", "local-support-1", "--model", "local-support-2", "--allow-write", "tool:refund"}
	held := file("held.json", `[{"max_live_calls": 100}, {"path": "$.turns", "matches": "x"}]`)
	r := run(t, invocation{args: append(slices.Clone(args), "--assert", held)})
	if r.code != 3 {
		t.Fatalf("want exit 3: $.turns is a number, not a string\n%s", r)
	}
	_, cmp := compareOf(t, r)
	for _, arm := range cmp.Arms {
		if len(arm.Assertions) != 2 || !arm.Assertions[0].Holds || arm.Assertions[0].Assertion != "live_calls ≤ 100" ||
			arm.Assertions[1].Holds || !strings.Contains(arm.Assertions[1].Found, "not a string") {
			t.Fatalf("arm %d assertions %+v\n%s", arm.Arm, arm.Assertions, r)
		}
	}
	ok := file("ok.json", `{"max_cost_usd": 10}`)
	if r := run(t, invocation{args: append(slices.Clone(args), "--assert", ok, "--format", "table")}); r.code != 0 || !strings.Contains(r.stdout, "arm 2: all 1 assertion hold") {
		t.Fatalf("want exit 0 and every assertion holding\n%s", r)
	}
	wantError(t, run(t, invocation{args: append(slices.Clone(args), "--assert", file("bad.json", `[{"equals": 1, "matches": "x"}]`))}),
		"assertion 0 must have exactly one of")
	wantError(t, run(t, invocation{args: append(slices.Clone(args), "--assert", filepath.Join(dir, "missing.json"))}), "--assert")
}

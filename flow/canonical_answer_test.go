package flow_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/messages"
)

// countingLog counts Appends.
type countingLog struct {
	*host.MemLog
	appends int
}

func (l *countingLog) Append(ctx context.Context, runID string, b host.Batch) (int64, error) {
	l.appends++
	return l.MemLog.Append(ctx, runID, b)
}

// TestCanonicalAnswers: an answer the resolver vouches is canonical is
// journaled as it is and decoded; one that is not is canonicalised; an
// answer that does not decode is missing_context either way. An answered
// call is one Append (call:start, call:done and the result), a live call
// two.
func TestCanonicalAnswers(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		answer    string
		canonical bool
		want      string // the journaled result; empty for missing_context
	}{
		{"vouched", `{"a":[1,2],"b":"x"}`, true, `{"a":[1,2],"b":"x"}`},
		{"not vouched", `{"b": "x", "a": [1, 2]}`, false, `{"a":[1,2],"b":"x"}`},
		{"vouched, wrong type", `"text"`, true, ""},
		{"not vouched, wrong type", `"text"`, false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			log := &countingLog{MemLog: host.NewMemLog()}
			reg := flow.NewRegistry()
			type out struct {
				A []int  `json:"a"`
				B string `json:"b"`
			}
			mustRegister(t, flow.RegisterWorkflow(reg, flow.Workflow[none, out]{
				CodeVersion: "test/v1",
				Name:        "w", Steps: []flow.Decl{flow.DeclareStep("get", flow.Read), flow.DeclareStep("live", flow.Read)},
				Run: func(ctx context.Context, _ none) (out, error) {
					got, err := flow.Step(ctx, "get", 1, func(context.Context, int) (out, error) { return out{}, nil })
					if err != nil {
						return got, err
					}
					_, err = flow.Step(ctx, "live", 2, func(context.Context, int) (int, error) { return 2, nil })
					return got, err
				},
			}))
			rt, err := host.NewRuntime(host.Config{Registry: reg, Log: log})
			if err != nil {
				t.Fatal(err)
			}
			answer := host.Answer(json.RawMessage(tt.answer), "reused")
			answer.Canonical = tt.canonical
			res := host.ResolverFunc(func(_ context.Context, c host.Call) (host.Resolution, error) {
				if c.Key == "get:0" {
					return answer, nil
				}
				return host.Live(), nil
			})
			o, err := rt.Run(context.Background(), host.RunParams{RunID: "r", Target: "w", Resolver: res})
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == "" {
				if o.Status != host.StatusError || o.Code != messages.MissingContext || o.StopKey != "step:get:0" {
					t.Fatalf("outcome %+v", o)
				}
				return
			}
			if o.Status != host.StatusComplete || string(o.Result) != tt.want {
				t.Fatalf("outcome %+v (result %s)", o, o.Result)
			}
			results := log.Results("r")
			if len(results) != 2 || string(results[0].Result) != tt.want {
				t.Fatalf("results %+v", results)
			}
			var kinds []string
			for _, ev := range log.Events("r") {
				kinds = append(kinds, string(ev.Kind))
			}
			if want := []string{"run:start", "call:start", "call:done", "call:start", "call:done", "run:complete"}; !slices.Equal(kinds, want) {
				t.Fatalf("events %v", kinds)
			}
			// run:start, the answered call, and the live call's start and done.
			if log.appends != 4 {
				t.Fatalf("%d appends, want 4", log.appends)
			}
		})
	}
}

package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/flow/journallog"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
	"github.com/pyrula/caseworker/suite"
	"github.com/pyrula/caseworker/worker"
	"github.com/valkey-io/valkey-go"
)

// routerPaths is how many code paths the router target has.
const routerPaths = 20

// registerRouter registers the router workflow in its version v1 or v2: it
// looks up a key that depends on its path, then finishes. v2 changes the
// key it looks up on paths 3 and 7 (a code change that alters one step's
// argument on 2 paths of 20).
func registerRouter(version string) func(*flow.Registry) error {
	type in struct {
		Path int `json:"path"`
	}
	type lookupIn struct {
		Path int    `json:"path"`
		Key  string `json:"key"`
	}
	lookup := flow.DefineStep("lookup", flow.Read, func(_ context.Context, l lookupIn) (string, error) { return "v:" + l.Key, nil })
	finish := flow.DefineStep("finish", flow.Read, func(_ context.Context, p int) (int, error) { return p * 2, nil })
	return func(reg *flow.Registry) error {
		return flow.RegisterWorkflow(reg, flow.Workflow[in, int]{
			Name: "router", CodeVersion: version, Defaults: in{}, Steps: []flow.Decl{lookup, finish},
			Run: func(ctx context.Context, i in) (int, error) {
				key := fmt.Sprintf("k%d", i.Path%routerPaths)
				if version == "v2" && (i.Path%routerPaths == 3 || i.Path%routerPaths == 7) {
					key = strings.ToUpper(key)
				}
				if _, err := lookup.Call(ctx, lookupIn{Path: i.Path % routerPaths, Key: key}); err != nil {
					return 0, err
				}
				return finish.Call(ctx, i.Path)
			},
		})
	}
}

// TestShadowSuiteFromJournal is a shadow replay of the live corpus: 1,000
// completed runs of the router over its 20 code paths, recorded by v1,
// replayed only (no live rung) by three workers running v2 as one suite
// selected from the journal. The suite reports exactly the runs of the two
// changed paths, in one group that names the call and the field, with no
// live call; a second suite of a seeded sample of 100 draws the same runs
// again. The same with 300 runs on the Valkey Cluster.
func TestShadowSuiteFromJournal(t *testing.T) {
	t.Parallel()
	t.Run("single", func(t *testing.T) {
		t.Parallel()
		shadowSuite(t, testenv.ValkeyClient(t), 1000)
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		shadowSuite(t, testenv.ValkeyClusterClient(t), 300)
	})
}

func shadowSuite(t *testing.T, c valkey.Client, runs int) {
	e := setupOn(t, c, nil, func(c *worker.Config) { c.RunConcurrency = 8 }, registerRouter("v2"))
	for _, name := range []string{"c2", "c3"} {
		w := *e
		w.cfg.ConsumerName = name
		w.start(nil)
	}
	// Record with v1, as the production workers did.
	v1 := flow.NewRegistry()
	if err := registerRouter("v1")(v1); err != nil {
		t.Fatal(err)
	}
	j, err := valkeyjournal.New(e.client, valkeyjournal.Options{Namespace: e.cfg.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	log, err := journallog.New(j, journallog.Options{Owner: "production"})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := host.NewRuntime(host.Config{Registry: v1, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	changed := map[string]bool{}
	for i := range runs {
		id := fmt.Sprintf("run-%04d", i)
		out, err := rt.Run(t.Context(), host.RunParams{RunID: id, Target: "router", Inputs: map[string]json.RawMessage{"path": json.RawMessage(fmt.Sprint(i))}})
		if err != nil || out.Status != host.StatusComplete {
			t.Fatalf("record %s: %v %+v", id, err, out)
		}
		if p := i % routerPaths; p == 3 || p == 7 {
			changed[id] = true
		}
	}
	start := time.Now()
	e.send("shadow", "run_suite", map[string]any{"target_name": "router", "min_cases": runs,
		"cases": map[string]any{"journal": map[string]any{}},
		"arms":  []map[string]any{{"name": "v2", "options": map[string]any{"replay_only": true}}}})
	res := suiteResult(t, e.waitReplies(1)[0])
	events := e.waitRun(res.SuiteID, 120*time.Second)
	t.Logf("a shadow suite of %d runs on 3 workers took %v", runs, time.Since(start))
	if len(changed) != runs/10 {
		t.Fatalf("%d runs on the changed paths, want %d", len(changed), runs/10)
	}
	o := suiteOutcome(t, events)
	if o.Cases != runs || o.ByStatus[suite.Pass] != runs-len(changed) || o.ByStatus[suite.Fail] != len(changed) || o.LiveCalls != 0 {
		t.Fatalf("outcome: %d cases, %v, %d live calls; want %d, %d fail, none live", o.Cases, o.ByStatus, o.LiveCalls, runs, len(changed))
	}
	if len(o.Groups) != 1 {
		t.Fatalf("%d groups, want 1: %+v", len(o.Groups), o.Groups)
	}
	g := o.Groups[0]
	if g.Count != len(changed) || g.Code != string(messages.ReplayDiverged) || g.Call != "step:lookup:0" || !slices.Equal(g.Changed, []string{"$.key"}) {
		t.Fatalf("group %+v, want %d × replay_diverged at step:lookup:0 changing $.key", g, len(changed))
	}
	for _, ex := range g.Examples {
		if !changed[ex.Case] {
			t.Fatalf("example %+v is not a run of a changed path", ex)
		}
	}
	if p := o.Arms[0].Provenance; p["live"] != 0 || p["reused"] == 0 {
		t.Fatalf("provenance %v: want calls reused, none live", p)
	}
	// A seeded sample draws the same runs every time.
	sample := func(id string) []string {
		e.send(id, "run_suite", map[string]any{"target_name": "router",
			"cases": map[string]any{"journal": map[string]any{"sample": 100, "seed": 42}},
			"arms":  []map[string]any{{"options": map[string]any{"replay_only": true}}}})
		var r messages.Reply
		testwait.Eventually(t, 20*time.Second, "the reply to "+id, func() bool {
			for _, got := range e.replies() {
				if got.MessageID == id {
					r = got
					return true
				}
			}
			return false
		})
		for _, ev := range e.waitRun(suiteResult(t, r).SuiteID, 60*time.Second) {
			if ev.Kind == runevent.SuitePlan {
				p, err := suite.PlanOf(ev)
				if err != nil {
					t.Fatal(err)
				}
				return p.Cases
			}
		}
		t.Fatal("no plan")
		return nil
	}
	first, second := sample("sample-1"), sample("sample-2")
	if len(first) != 100 || !slices.Equal(first, second) || !slices.IsSorted(first) {
		t.Fatalf("samples of %d and %d runs differ or are not in run id order", len(first), len(second))
	}
	// The journal now holds the case runs of the suites before (runs of the
	// same target): none is drawn.
	for _, id := range first {
		if !strings.HasPrefix(id, "run-") {
			t.Fatalf("the sample drew %s, not a recording", id)
		}
	}
}

package bench_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	sdkpb "go.temporal.io/api/sdk/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/converter"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/replay/replaytest"
)

var flagCaseCalls = flag.String("case-calls", "1000,10000", "comma-separated numbers of calls of the recorded workflow that BenchmarkCaseRunVsTemporal replays")

// caseTarget is a workflow of N read calls, fetch:0 … fetch:N-1, on both
// sides: replaytest's caseworker workflow of flow.Step calls (the one the
// replay package's benchmarks replay) and a Temporal workflow of
// activities, both registered under this name, with the same inputs and
// results.
const caseTarget = replaytest.Target

type (
	fetchIn  = replaytest.FetchIn
	fetchOut = replaytest.FetchOut
)

// caseRegistry, caseBundleFile and replayCase are replaytest's: the
// registry of caseTarget, a recorded run captured into a bundle file, and
// one `pyrula case run FILE --replay-only` of it.
func caseRegistry(tb testing.TB) *flow.Registry {
	tb.Helper()
	reg, err := replaytest.Registry()
	if err != nil {
		tb.Fatal(err)
	}
	return reg
}

func caseBundleFile(tb testing.TB, reg *flow.Registry, dir string, n int) string {
	tb.Helper()
	path, err := replaytest.WriteBundle(context.Background(), reg, dir, n)
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

func replayCase(tb testing.TB, reg *flow.Registry, path string, n int) {
	if err := replaytest.ReplayFile(context.Background(), reg, path, n); err != nil {
		tb.Fatal(err)
	}
}

// temporalFetchLoop is caseTarget as a Temporal workflow: n activities
// "fetch" in sequence, each awaited, the sum of the ids as the result.
func temporalFetchLoop(ctx workflow.Context, n int) (int, error) {
	return temporalLoop(ctx, n, "fetch")
}

// temporalLoop schedules n activities of type activity one after the other.
func temporalLoop(ctx workflow.Context, n int, activity string) (int, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	sum := 0
	for i := range n {
		var out fetchOut
		if err := workflow.ExecuteActivity(ctx, activity, fetchIn{ID: i, Query: replaytest.Query}).Get(ctx, &out); err != nil {
			return 0, err
		}
		sum += out.ID
	}
	return sum, nil
}

// Constants of the generated Temporal history: what a server and a Go SDK
// worker would have written.
const (
	temporalTaskQueue = "bench"
	temporalIdentity  = "4242@bench-host@"
	temporalRunID     = "0199f4c2-7d1e-7a6b-9c3d-5e8f10a2b4c6"
)

// temporalEvents builds a Temporal history event by event with the ids,
// times and task ids a server assigns: consecutive from 1.
type temporalEvents struct {
	events []*historypb.HistoryEvent
	start  time.Time
}

// add appends an event of type typ and returns its event id.
func (h *temporalEvents) add(typ enumspb.EventType, attrs func(e *historypb.HistoryEvent)) int64 {
	id := int64(len(h.events) + 1)
	e := &historypb.HistoryEvent{
		EventId:   id,
		EventTime: timestamppb.New(h.start.Add(time.Duration(id) * time.Millisecond)),
		EventType: typ,
		TaskId:    1048576 + id,
	}
	attrs(e)
	h.events = append(h.events, e)
	return id
}

// workflowTask appends a workflow task (scheduled, started, completed) and
// returns the completed event's id.
func (h *temporalEvents) workflowTask(meta *sdkpb.WorkflowTaskCompletedMetadata) int64 {
	tq := &taskqueuepb.TaskQueue{Name: temporalTaskQueue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL}
	scheduled := h.add(enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, func(e *historypb.HistoryEvent) {
		e.Attributes = &historypb.HistoryEvent_WorkflowTaskScheduledEventAttributes{WorkflowTaskScheduledEventAttributes: &historypb.WorkflowTaskScheduledEventAttributes{
			TaskQueue: tq, StartToCloseTimeout: durationpb.New(10 * time.Second), Attempt: 1}}
	})
	started := h.add(enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED, func(e *historypb.HistoryEvent) {
		e.Attributes = &historypb.HistoryEvent_WorkflowTaskStartedEventAttributes{WorkflowTaskStartedEventAttributes: &historypb.WorkflowTaskStartedEventAttributes{
			ScheduledEventId: scheduled, Identity: temporalIdentity, RequestId: requestID(scheduled), HistorySizeBytes: 512 * scheduled}}
	})
	return h.add(enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, func(e *historypb.HistoryEvent) {
		e.Attributes = &historypb.HistoryEvent_WorkflowTaskCompletedEventAttributes{WorkflowTaskCompletedEventAttributes: &historypb.WorkflowTaskCompletedEventAttributes{
			ScheduledEventId: scheduled, StartedEventId: started, Identity: temporalIdentity, SdkMetadata: meta,
			MeteringMetadata: &commonpb.MeteringMetadata{}}}
	})
}

// requestID is a request id in the form a server writes, unique per event.
func requestID(eventID int64) string {
	return fmt.Sprintf("5f0c8a1e-3b2d-4c6e-9a7f-%012x", eventID)
}

// temporalHistory is the history of one completed run of temporalFetchLoop
// with n activities, as a Temporal server records it: the start, then per
// activity a workflow task that schedules it and the activity's scheduled,
// started and completed events (its result encoded by the SDK's default
// data converter), then the last workflow task and the completion with the
// workflow's result. The activity id is the scheduled event's id, as the
// Go SDK assigns it.
func temporalHistory(tb testing.TB, n int) *historypb.History {
	tb.Helper()
	dc := converter.GetDefaultDataConverter()
	payloads := func(v any) *commonpb.Payloads {
		p, err := dc.ToPayloads(v)
		if err != nil {
			tb.Fatal(err)
		}
		return p
	}
	tq := &taskqueuepb.TaskQueue{Name: temporalTaskQueue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL}
	h := &temporalEvents{start: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), events: make([]*historypb.HistoryEvent, 0, 6*n+5)}
	h.add(enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, func(e *historypb.HistoryEvent) {
		e.Attributes = &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{
			WorkflowType: &commonpb.WorkflowType{Name: caseTarget}, TaskQueue: tq, Input: payloads(n),
			WorkflowExecutionTimeout: durationpb.New(0), WorkflowRunTimeout: durationpb.New(0), WorkflowTaskTimeout: durationpb.New(10 * time.Second),
			OriginalExecutionRunId: temporalRunID, FirstExecutionRunId: temporalRunID, Identity: temporalIdentity, Attempt: 1,
			FirstWorkflowTaskBackoff: durationpb.New(0), Header: &commonpb.Header{}, WorkflowId: "bench-fetch-loop"}}
	})
	// The first workflow task records the SDK flag a fresh run of the Go SDK
	// sets (the protocol message command) and the SDK's name and version.
	meta := &sdkpb.WorkflowTaskCompletedMetadata{LangUsedFlags: []uint32{3}, SdkName: "temporal-go", SdkVersion: temporal.SDKVersion}
	sum := 0
	for i := range n {
		completed := h.workflowTask(meta)
		meta = nil
		activityID := strconv.FormatInt(completed+1, 10)
		scheduled := h.add(enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, func(e *historypb.HistoryEvent) {
			e.Attributes = &historypb.HistoryEvent_ActivityTaskScheduledEventAttributes{ActivityTaskScheduledEventAttributes: &historypb.ActivityTaskScheduledEventAttributes{
				ActivityId: activityID, ActivityType: &commonpb.ActivityType{Name: "fetch"}, TaskQueue: tq, Header: &commonpb.Header{},
				Input:                  payloads(fetchIn{ID: i, Query: replaytest.Query}),
				ScheduleToCloseTimeout: durationpb.New(0), ScheduleToStartTimeout: durationpb.New(0),
				StartToCloseTimeout: durationpb.New(time.Minute), HeartbeatTimeout: durationpb.New(0),
				WorkflowTaskCompletedEventId: completed,
				RetryPolicy: &commonpb.RetryPolicy{InitialInterval: durationpb.New(time.Second), BackoffCoefficient: 2,
					MaximumInterval: durationpb.New(100 * time.Second)}}}
		})
		started := h.add(enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED, func(e *historypb.HistoryEvent) {
			e.Attributes = &historypb.HistoryEvent_ActivityTaskStartedEventAttributes{ActivityTaskStartedEventAttributes: &historypb.ActivityTaskStartedEventAttributes{
				ScheduledEventId: scheduled, Identity: temporalIdentity, RequestId: requestID(scheduled), Attempt: 1}}
		})
		out, _ := replaytest.Fetch(context.Background(), fetchIn{ID: i, Query: replaytest.Query})
		sum += out.ID
		h.add(enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, func(e *historypb.HistoryEvent) {
			e.Attributes = &historypb.HistoryEvent_ActivityTaskCompletedEventAttributes{ActivityTaskCompletedEventAttributes: &historypb.ActivityTaskCompletedEventAttributes{
				Result: payloads(out), ScheduledEventId: scheduled, StartedEventId: started, Identity: temporalIdentity}}
		})
	}
	completed := h.workflowTask(meta)
	h.add(enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, func(e *historypb.HistoryEvent) {
		e.Attributes = &historypb.HistoryEvent_WorkflowExecutionCompletedEventAttributes{WorkflowExecutionCompletedEventAttributes: &historypb.WorkflowExecutionCompletedEventAttributes{
			Result: payloads(sum), WorkflowTaskCompletedEventId: completed}}
	})
	return &historypb.History{Events: h.events}
}

// temporalHistoryFile writes temporalHistory(n) to a JSON file in dir the
// way `temporal workflow show --output json` writes a history (Temporal's
// proto JSON, two-space indent, payloads not in shorthand: the form its
// replayers read).
func temporalHistoryFile(tb testing.TB, dir string, n int) string {
	tb.Helper()
	raw, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(temporalHistory(tb, n))
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(dir, fmt.Sprintf("fetch-%d.history.json", n))
	if err := os.WriteFile(path, append(raw, '\n'), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// quietTemporal is a Temporal logger that drops everything, so that
// logging costs the replayer nothing.
var quietTemporal = tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))

// replayTemporal is one replay with Temporal's WorkflowReplayer of the
// history file at path against the workflow function wf registered as
// caseTarget. It returns the replayer, whose concrete type also holds the
// workflow's result. The replayer's deadlock detector is off: it aborts a
// replay when the workflow goroutine runs for over a second between two
// yields, which the replay of 30,000 activities did on a loaded 2-core
// machine; otherwise it costs a timer each time the goroutine resumes.
func replayTemporal(wf any, path string) (worker.WorkflowReplayer, error) {
	r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{DisableDeadlockDetection: true})
	if err != nil {
		return nil, fmt.Errorf("new replayer: %w", err)
	}
	r.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: caseTarget})
	return r, r.ReplayWorkflowHistoryFromJSONFile(quietTemporal, path)
}

// loadAverage is the one-minute load average of the machine (0 when it
// cannot be read).
func loadAverage() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(raw))[0], 64)
	return f
}

// caseCalls parses -case-calls.
func caseCalls(tb testing.TB) []int {
	tb.Helper()
	var sizes []int
	for field := range strings.SplitSeq(*flagCaseCalls, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || n < 1 {
			tb.Fatalf("-case-calls %q: %q is not a positive number", *flagCaseCalls, field)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

// BenchmarkCaseRunVsTemporal: `pyrula case run FILE --replay-only` of a
// recorded workflow of N read calls (BenchmarkReplayOnly's in replay/:
// load, verify, decode and run, every call reused) against Temporal's
// anchor, its Go SDK's WorkflowReplayer replaying the JSON history file of
// a completed run of the same workflow as N activities with the same
// inputs and results (a new replayer, the workflow registered, the file
// read, parsed and replayed, with a logger that drops everything). The two
// alternate within each iteration, each after a garbage collection outside
// the timing, so that both see the same machine load and each pays for its
// own garbage. Per size (-case-calls) it reports wall µs per call of each
// (us/call-pyrula, us/call-temporal), their ratio (x-temporal: Temporal's
// over ours), CPU µs per call of the process (cpu-us/call-*, the garbage
// collector's included), the sizes of the two files and the load average.
// Temporal's replayer copies the events it has not replayed yet at every
// workflow task (one per activity here), so its time per call grows with
// the length of the history.
//
//	go test -run '^$' -bench CaseRunVsTemporal -benchtime 3x .
//	go test -run '^$' -bench CaseRunVsTemporal -benchtime 1x -case-calls 1000,10000,100000 -timeout 60m .
func BenchmarkCaseRunVsTemporal(b *testing.B) {
	reg := caseRegistry(b)
	dir := b.TempDir()
	for i, n := range caseCalls(b) {
		casePath := caseBundleFile(b, reg, dir, n)
		historyPath := temporalHistoryFile(b, dir, n)
		if i == 0 { // warm up both sides once
			replayCase(b, reg, casePath, n)
			if _, err := replayTemporal(temporalFetchLoop, historyPath); err != nil {
				b.Fatalf("temporal n=%d: %v", n, err)
			}
		}
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			var wall, cpu [2]time.Duration
			var load float64
			timed := func(side int, run func()) {
				b.StopTimer()
				runtime.GC()
				b.StartTimer()
				t0, c0 := time.Now(), processCPU()
				run()
				wall[side] += time.Since(t0)
				cpu[side] += processCPU() - c0
			}
			for range b.N {
				load += loadAverage()
				timed(0, func() { replayCase(b, reg, casePath, n) })
				timed(1, func() {
					if _, err := replayTemporal(temporalFetchLoop, historyPath); err != nil {
						b.Fatalf("temporal n=%d: %v", n, err)
					}
				})
			}
			b.StopTimer()
			perCall := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(b.N) / float64(n) }
			b.ReportMetric(perCall(wall[0]), "us/call-pyrula")
			b.ReportMetric(perCall(wall[1]), "us/call-temporal")
			b.ReportMetric(float64(wall[1])/float64(wall[0]), "x-temporal")
			if cpu[0] > 0 {
				b.ReportMetric(perCall(cpu[0]), "cpu-us/call-pyrula")
				b.ReportMetric(perCall(cpu[1]), "cpu-us/call-temporal")
			}
			b.ReportMetric(fileMB(b, casePath), "case-MB")
			b.ReportMetric(fileMB(b, historyPath), "history-MB")
			b.ReportMetric(load/float64(b.N), "load1")
		})
		os.Remove(casePath)
		os.Remove(historyPath)
	}
}

// fileMB is the size of the file at path in MB.
func fileMB(tb testing.TB, path string) float64 {
	st, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	return float64(st.Size()) / 1e6
}

// anchorCalls is the size of the runs the tests replay.
const anchorCalls = 50

// TestCaseRunVsTemporalCaseReusesEveryCall: our side of the benchmark
// replays the recorded run with every call reused.
func TestCaseRunVsTemporalCaseReusesEveryCall(t *testing.T) {
	reg := caseRegistry(t)
	replayCase(t, reg, caseBundleFile(t, reg, t.TempDir(), anchorCalls), anchorCalls)
}

// TestCaseRunVsTemporalHistoryReplays: the generated history is one that
// Temporal's replayer accepts for the workflow, down to its result (the
// sum of the ids of every activity's decoded result).
func TestCaseRunVsTemporalHistoryReplays(t *testing.T) {
	path := temporalHistoryFile(t, t.TempDir(), anchorCalls)
	r, err := replayTemporal(temporalFetchLoop, path)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	results, ok := r.(interface {
		GetWorkflowResult(workflowID string, valuePtr any) error
	})
	if !ok {
		t.Fatalf("the replayer (%T) does not give the workflow's result", r)
	}
	var sum int
	if err := results.GetWorkflowResult("", &sum); err != nil {
		t.Fatal(err)
	}
	if want := anchorCalls * (anchorCalls - 1) / 2; sum != want {
		t.Fatalf("result %d, want %d", sum, want)
	}
}

// TestCaseRunVsTemporalNondeterminism: the replayer really compares the
// workflow with the history: a workflow that schedules another activity,
// or one activity fewer, fails with a nondeterminism error (the Go SDK's
// code for them is TMPRL1100).
func TestCaseRunVsTemporalNondeterminism(t *testing.T) {
	path := temporalHistoryFile(t, t.TempDir(), anchorCalls)
	for name, wf := range map[string]func(workflow.Context, int) (int, error){
		"other activity": func(ctx workflow.Context, n int) (int, error) { return temporalLoop(ctx, n, "fetch_v2") },
		"one fewer":      func(ctx workflow.Context, n int) (int, error) { return temporalLoop(ctx, n-1, "fetch") },
	} {
		_, err := replayTemporal(wf, path)
		if err == nil || !strings.Contains(err.Error(), "TMPRL1100") {
			t.Errorf("%s: replay error %v, want a nondeterminism error", name, err)
		}
	}
}

package journaltest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/runevent"
)

// waitLimit bounds every wait of the suite; reaching it is a failure.
const waitLimit = 30 * time.Second

// shortLease is the lease TTL of tests that wait for a lease to expire in
// real time.
const shortLease = 150 * time.Millisecond

// fixture is one subtest's journal and context.
type fixture struct {
	h   *Harness
	j   journal.Journal
	ctx context.Context
}

func setup(t *testing.T, h *Harness) fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitLimit)
	t.Cleanup(cancel)
	return fixture{h: h, j: h.Journal, ctx: ctx}
}

// newID returns a fresh run id.
func newID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// leaseTTL is the lease TTL for tests that let leases expire.
func (f fixture) leaseTTL() time.Duration {
	if f.h.Advance != nil {
		return 10 * time.Second
	}
	return shortLease
}

// create creates a run leased to owner and returns its id and lease.
func (f fixture) create(t *testing.T, owner string, ttl time.Duration) (string, journal.Lease) {
	t.Helper()
	id := newID("run")
	lease, err := f.j.Create(f.ctx, journal.CreateParams{
		RunID: id, TargetName: "checkout", CodeVersion: "v1",
		Inputs: json.RawMessage(`{"sku":"SKU-42","qty":2}`), Owner: owner, LeaseTTL: ttl,
	})
	if err != nil {
		t.Fatalf("Create %s: %v", id, err)
	}
	return id, lease
}

// call is the call object of the n-th test call.
func call(n int) journal.Call {
	return journal.Call{Kind: "step", Key: fmt.Sprintf("quote:%d", n), Fingerprint: fmt.Sprintf("%064x", n), Effect: "read"}
}

// mkEvent builds an event of kind with fields; it panics on error (the
// suite's own fields are always valid).
func mkEvent(kind journal.Kind, fields any) journal.Event {
	e, err := journal.NewEvent(kind, fields)
	if err != nil {
		panic(err)
	}
	return e
}

// callStart is a call:start event of the n-th test call.
func callStart(n int) journal.Event {
	return mkEvent(runevent.CallStart, map[string]any{"call": call(n), "input": map[string]any{"n": n, "sku": "SKU-42"}})
}

// callDone is a call:done event of the n-th test call.
func callDone(n int) journal.Event {
	return mkEvent(runevent.CallDone, map[string]any{"call": call(n)})
}

// result is the result record of the n-th test call.
func result(n int) bundle.Result {
	c := call(n)
	return bundle.Result{Kind: string(c.Kind), Key: c.Key, Fingerprint: c.Fingerprint, Result: json.RawMessage(fmt.Sprintf(`{"price":%d.5,"n":%d}`, n, n))}
}

// canonResult is result(n) as the journal stores and returns it.
func canonResult(n int) bundle.Result {
	r := result(n)
	r.Result = json.RawMessage(fmt.Sprintf(`{"n":%d,"price":%d.5}`, n, n))
	return r
}

// appendOK appends b and returns the new last_seq.
func (f fixture) appendOK(t *testing.T, l journal.Lease, b journal.Batch) int64 {
	t.Helper()
	last, err := f.j.Append(f.ctx, l, b)
	if err != nil {
		t.Fatalf("Append to %s: %v", l.RunID, err)
	}
	return last
}

// events reads the run's events and checks that run_seq is 1…n in order.
func (f fixture) events(t *testing.T, id string) ([]journal.Event, journal.Origin) {
	t.Helper()
	evs, origin, err := f.j.Events(f.ctx, id)
	if err != nil {
		t.Fatalf("Events %s: %v", id, err)
	}
	for i, e := range evs {
		if e.RunSeq != int64(i+1) {
			t.Fatalf("Events %s: event %d has run_seq %d", id, i, e.RunSeq)
		}
	}
	return evs, origin
}

// meta reads the run's meta.
func (f fixture) meta(t *testing.T, id string) journal.Meta {
	t.Helper()
	m, err := f.j.Meta(f.ctx, id)
	if err != nil {
		t.Fatalf("Meta %s: %v", id, err)
	}
	return m
}

// kinds lists the events' kinds.
func kinds(evs []journal.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = string(e.Kind)
	}
	return out
}

// wantErr fails unless err wraps want.
func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

// eventJSON is the event's JSON, failing the test on error.
func eventJSON(t *testing.T, e journal.Event) string {
	t.Helper()
	b, err := e.JSON()
	if err != nil {
		t.Fatalf("JSON of event %d: %v", e.RunSeq, err)
	}
	return string(b)
}

// waitLease waits until a lease of ttl handed out before the call has
// expired: by the injected clock, or in real time.
func (f fixture) waitLease(ttl time.Duration) {
	if f.h.Advance != nil {
		f.h.Advance(ttl + time.Millisecond)
		return
	}
	time.Sleep(ttl + 20*time.Millisecond) // the lease's own expiry is what is tested; acquireEventually bounds the rest
}

// acquireEventually acquires the run for owner once the current lease has
// expired, retrying while it is held (Valkey measures leases with its own
// clock).
func (f fixture) acquireEventually(t *testing.T, id, owner string, ttl time.Duration) journal.Lease {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		l, err := f.j.Acquire(f.ctx, journal.AcquireParams{RunID: id, Owner: owner, TTL: ttl})
		if err == nil {
			return l
		}
		if !errors.Is(err, journal.ErrLeaseHeld) || time.Now().After(deadline) {
			t.Fatalf("Acquire %s for %s: %v", id, owner, err)
		}
		if f.h.Advance != nil {
			f.h.Advance(time.Second)
		} else {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func testCreateAndRead(t *testing.T, h *Harness) {
	f := setup(t, h)
	id := newID("run")
	at := time.Date(2025, 1, 2, 3, 4, 5, 678901234, time.FixedZone("X", 3600))
	lease, err := f.j.Create(f.ctx, journal.CreateParams{
		RunID: id, TargetName: "checkout", CodeVersion: "v1.2",
		Inputs: json.RawMessage(`{ "qty": 2, "sku": "SKU-42", "price": 1e2 }`),
		Owner:  "worker-a", LeaseTTL: time.Minute,
		Fields: map[string]json.RawMessage{"message_id": json.RawMessage(`"m-1"`)},
		At:     at,
	})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if lease.RunID != id || lease.Owner != "worker-a" || lease.Epoch != 1 || lease.TTL != time.Minute || lease.Until.IsZero() {
		t.Errorf("Create returned lease %+v", lease)
	}
	m := f.meta(t, id)
	wantAt := time.Date(2025, 1, 2, 2, 4, 5, 678901000, time.UTC)
	if m.RunID != id || m.Namespace != f.j.Namespace() || m.TargetName != "checkout" || m.CodeVersion != "v1.2" ||
		m.Status != journal.StatusRunning || m.LastSeq != 1 || m.LeaseOwner != "worker-a" || m.LeaseEpoch != 1 ||
		!m.CreatedAt.Equal(wantAt) || !m.FinishedAt.IsZero() || m.Origin != journal.OriginValkey {
		t.Errorf("Meta = %+v", m)
	}
	if !m.LeaseUntil.Equal(lease.Until) {
		t.Errorf("Meta.LeaseUntil = %v, lease.Until = %v", m.LeaseUntil, lease.Until)
	}
	if got, want := string(m.Inputs), `{"price":100.0,"qty":2,"sku":"SKU-42"}`; got != want {
		t.Errorf("Meta.Inputs = %s, want the canonical %s", got, want)
	}
	evs, origin := f.events(t, id)
	if origin != journal.OriginValkey || len(evs) != 1 {
		t.Fatalf("Events = %d events from %q, want 1 from valkey", len(evs), origin)
	}
	want := `{"at":"2025-01-02T02:04:05.678901Z","kind":"run:submitted","message_id":"m-1","run_seq":1,"target_name":"checkout"}`
	if got := eventJSON(t, evs[0]); got != want {
		t.Errorf("run:submitted =\n%s\nwant\n%s", got, want)
	}
	if !evs[0].At.Equal(wantAt) || evs[0].At.Location() != time.UTC {
		t.Errorf("run:submitted At = %v", evs[0].At)
	}
	rs, origin, err := f.j.Results(f.ctx, id)
	if err != nil || len(rs) != 0 || origin != journal.OriginValkey {
		t.Errorf("Results of a new run = %v, %q, %v; want none from valkey", rs, origin, err)
	}
	run, err := f.j.Run(f.ctx, id)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !reflect.DeepEqual(run.Meta, m) || len(run.Events) != 1 || len(run.Results) != 0 {
		t.Errorf("Run = %+v, want meta %+v and the one event", run, m)
	}

	// Inputs default to the empty object.
	id2 := newID("run")
	if _, err := f.j.Create(f.ctx, journal.CreateParams{RunID: id2, TargetName: "t"}); err != nil {
		t.Fatal(err)
	}
	if m := f.meta(t, id2); string(m.Inputs) != "{}" {
		t.Errorf("Inputs without inputs = %s, want {}", m.Inputs)
	}
}

func testCreateUnowned(t *testing.T, h *Harness) {
	f := setup(t, h)
	id, lease := f.create(t, "", 0)
	if lease.Owner != "" || lease.Epoch != 0 {
		t.Fatalf("unowned Create returned lease %+v", lease)
	}
	if m := f.meta(t, id); m.LeaseOwner != "" || m.LeaseEpoch != 0 || !m.LeaseUntil.IsZero() {
		t.Errorf("unowned meta lease = %q %d %v", m.LeaseOwner, m.LeaseEpoch, m.LeaseUntil)
	}
	_, err := f.j.Append(f.ctx, lease, journal.Batch{Events: []journal.Event{callStart(0)}})
	wantErr(t, "Append with an unowned lease", err, journal.ErrLeaseLost)
	l, err := f.j.Acquire(f.ctx, journal.AcquireParams{RunID: id, Owner: "w"})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if l.Epoch != 1 || l.Owner != "w" {
		t.Errorf("first Acquire of an unowned run = %+v, want epoch 1", l)
	}
	if last := f.appendOK(t, l, journal.Batch{Events: []journal.Event{callStart(0)}}); last != 2 {
		t.Errorf("last_seq = %d, want 2", last)
	}
}

func testCreateExists(t *testing.T, h *Harness) {
	f := setup(t, h)
	id, _ := f.create(t, "a", 0)
	_, err := f.j.Create(f.ctx, journal.CreateParams{RunID: id, TargetName: "other", Owner: "b"})
	wantErr(t, "second Create", err, journal.ErrRunExists)
	if m := f.meta(t, id); m.TargetName != "checkout" || m.LeaseOwner != "a" {
		t.Errorf("a refused Create changed the run: %+v", m)
	}
}

func testAppendAssignsSeq(t *testing.T, h *Harness) {
	f := setup(t, h)
	id, l := f.create(t, "w", 0)
	last := f.appendOK(t, l, journal.Batch{Events: []journal.Event{callStart(0)}})
	if last != 2 {
		t.Fatalf("first Append: last_seq %d, want 2", last)
	}
	last = f.appendOK(t, l, journal.Batch{Events: []journal.Event{callDone(0), callStart(1), callDone(1)}, Results: []bundle.Result{result(0), result(1)}})
	if last != 5 {
		t.Fatalf("second Append: last_seq %d, want 5", last)
	}
	if last = f.appendOK(t, l, journal.Batch{}); last != 5 {
		t.Fatalf("empty Append: last_seq %d, want 5", last)
	}
	if last = f.appendOK(t, l, journal.Batch{Results: []bundle.Result{result(7)}}); last != 5 {
		t.Fatalf("results-only Append: last_seq %d, want 5", last)
	}
	evs, _ := f.events(t, id)
	want := []string{"run:submitted", "call:start", "call:done", "call:start", "call:done"}
	if got := kinds(evs); !reflect.DeepEqual(got, want) {
		t.Fatalf("kinds = %v, want %v", got, want)
	}
	for i, n := range []int{-1, 0, 0, 1, 1} {
		if n < 0 {
			continue
		}
		c, ok := journal.CallOf(evs[i])
		if !ok || c != call(n) {
			t.Errorf("event %d call = %+v, %v; want %+v", i+1, c, ok, call(n))
		}
	}
	if m := f.meta(t, id); m.LastSeq != 5 {
		t.Errorf("Meta.LastSeq = %d, want 5", m.LastSeq)
	}
	// Events stamped by the journal carry its clock's time.
	for _, e := range evs {
		if e.At.IsZero() || e.At.Location() != time.UTC || !e.At.Equal(e.At.Truncate(time.Microsecond)) {
			t.Errorf("event %d At = %v, want a UTC time in microseconds", e.RunSeq, e.At)
		}
	}
}

// testTail: a journal that reads a run's last events (journal.TailReader)
// gives the same events as the end of Events, for n under, at and over the
// run's length; an unknown run is ErrRunNotFound.
func testTail(t *testing.T, h *Harness) {
	f := setup(t, h)
	tr, ok := f.j.(journal.TailReader)
	if !ok {
		t.Skip("this journal does not read tails")
	}
	id, all := f.twoCalls(t)
	for _, n := range []int{0, 1, 2, len(all), len(all) + 3} {
		got, err := tr.Tail(f.ctx, id, n)
		if err != nil {
			t.Fatalf("Tail(%d): %v", n, err)
		}
		sameEvents(t, fmt.Sprintf("Tail(%d)", n), got, all[max(len(all)-n, 0):])
	}
	_, err := tr.Tail(f.ctx, newID("missing"), 2)
	wantErr(t, "Tail of an unknown run", err, journal.ErrRunNotFound)
}

// twoCalls creates a run leased by "w" with two answered calls and returns
// its id and events: the run the Tail and Head cases read.
func (f *fixture) twoCalls(t *testing.T) (string, []journal.Event) {
	t.Helper()
	id, l := f.create(t, "w", 0)
	f.appendOK(t, l, journal.Batch{Events: []journal.Event{callStart(0), callDone(0), callStart(1), callDone(1)}, Results: []bundle.Result{result(0), result(1)}})
	all, _ := f.events(t, id)
	return id, all
}

// testHead: a journal that reads a run's first events (journal.HeadReader)
// gives its meta and the start of Events, for n under, at and over the
// run's length; an unknown run is ErrRunNotFound.
func testHead(t *testing.T, h *Harness) {
	f := setup(t, h)
	hr, ok := f.j.(journal.HeadReader)
	if !ok {
		t.Skip("this journal does not read heads")
	}
	id, all := f.twoCalls(t)
	for _, n := range []int{0, 1, 2, len(all), len(all) + 3} {
		meta, got, err := hr.Head(f.ctx, id, n)
		if err != nil {
			t.Fatalf("Head(%d): %v", n, err)
		}
		if meta.RunID != id || meta.LastSeq != int64(len(all)) || meta.LeaseOwner != "w" {
			t.Errorf("Head(%d) meta = %+v, want run %s, last_seq %d, owner w", n, meta, id, len(all))
		}
		sameEvents(t, fmt.Sprintf("Head(%d)", n), got, all[:min(n, len(all))])
	}
	_, _, err := hr.Head(f.ctx, newID("missing"), 1)
	wantErr(t, "Head of an unknown run", err, journal.ErrRunNotFound)
}

func testExactBytes(t *testing.T, h *Harness) {
	f := setup(t, h)
	id, l := f.create(t, "w", 0)
	// Field values are canonicalised on append: names sorted, no
	// whitespace, floats as Python writes them, raw UTF-8 (no HTML or
	// U+2028 escapes), integers keep every digit.
	e := journal.Event{
		Kind: runevent.CallStart,
		At:   time.Date(2025, 6, 7, 8, 9, 10, 11000, time.UTC),
		Extra: map[string]json.RawMessage{
			"call":  json.RawMessage(`{"kind":"step","key":"quote:0","fingerprint":"ab","effect":"read"}`),
			"input": json.RawMessage("{\"z\": 1e-5, \"a\": \"<&>\\u2028é\", \"big\": 123456789012345678901234567890, \"f\": 100.0}"),
			"émoji": json.RawMessage(`"✓"`),
		},
	}
	f.appendOK(t, l, journal.Batch{Events: []journal.Event{e}, Results: []bundle.Result{{
		Kind: "model", Key: "0", Fingerprint: "cd", Result: json.RawMessage(`{"role":"assistant","content":[{"type":"text","text":"<hi>"}]}`),
	}, {
		Kind: "tool", Key: "toolu_01", Fingerprint: "ef", Error: json.RawMessage(`{"message": "boom", "code": 7}`),
	}}})
	evs, _ := f.events(t, id)
	want := "{\"at\":\"2025-06-07T08:09:10.000011Z\",\"call\":{\"effect\":\"read\",\"fingerprint\":\"ab\",\"key\":\"quote:0\",\"kind\":\"step\"},\"input\":{\"a\":\"<&>\u2028é\",\"big\":123456789012345678901234567890,\"f\":100.0,\"z\":1e-05},\"kind\":\"call:start\",\"run_seq\":2,\"émoji\":\"✓\"}"
	if got := eventJSON(t, evs[1]); got != want {
		t.Errorf("stored event =\n%s\nwant\n%s", got, want)
	}
	if in := evs[1].Input; !bytes.Contains([]byte(want), in) {
		t.Errorf("Input = %s, not the canonical bytes", in)
	}
	rs, _, err := f.j.Results(f.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	wantRs := []bundle.Result{
		{Kind: "model", Key: "0", Fingerprint: "cd", Result: json.RawMessage(`{"content":[{"text":"<hi>","type":"text"}],"role":"assistant"}`)},
		{Kind: "tool", Key: "toolu_01", Fingerprint: "ef", Error: json.RawMessage(`{"code":7,"message":"boom"}`)},
	}
	if !reflect.DeepEqual(rs, wantRs) {
		t.Errorf("Results =\n%s\nwant\n%s", dumpResults(rs), dumpResults(wantRs))
	}
	// A JSON null result is a result.
	f.appendOK(t, l, journal.Batch{Results: []bundle.Result{{Kind: "now", Key: "0", Fingerprint: "00", Result: json.RawMessage(`null`)}}})
	rs, _, _ = f.j.Results(f.ctx, id)
	if len(rs) != 3 || rs[1].Kind != "now" || string(rs[1].Result) != "null" || rs[1].Error != nil {
		t.Errorf("null result read back as %s", dumpResults(rs))
	}
}

func dumpResults(rs []bundle.Result) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "  %s:%s fp=%s result=%s error=%s\n", r.Kind, r.Key, r.Fingerprint, r.Result, r.Error)
	}
	return b.String()
}

func testExpectedSeq(t *testing.T, h *Harness) {
	f := setup(t, h)
	id, l := f.create(t, "w", 0)
	a, b := callStart(0), callDone(0)
	a.RunSeq, b.RunSeq = 2, 3
	if last := f.appendOK(t, l, journal.Batch{Events: []journal.Event{a, b}}); last != 3 {
		t.Fatalf("last_seq %d, want 3", last)
	}
	c, d := callStart(1), callDone(1)
	d.RunSeq = 4 // would get 5
	_, err := f.j.Append(f.ctx, l, journal.Batch{Events: []journal.Event{c, d}, Results: []bundle.Result{result(1)}})
	wantErr(t, "Append at a taken run_seq", err, journal.ErrSeqConflict)
	if m := f.meta(t, id); m.LastSeq != 3 {
		t.Errorf("a refused Append moved last_seq to %d", m.LastSeq)
	}
	if rs, _, _ := f.j.Results(f.ctx, id); len(rs) != 0 {
		t.Errorf("a refused Append recorded %d results", len(rs))
	}
	if evs, _ := f.events(t, id); len(evs) != 3 {
		t.Errorf("a refused Append left %d events, want 3", len(evs))
	}
}

func testResults(t *testing.T, h *Harness) {
	f := setup(t, h)
	id, l := f.create(t, "w", 0)
	f.appendOK(t, l, journal.Batch{Results: []bundle.Result{result(3), result(1)}})
	f.appendOK(t, l, journal.Batch{Results: []bundle.Result{
		{Kind: "model", Key: "1", Fingerprint: "x", Result: json.RawMessage(`"hi"`)},
		{Kind: "model", Key: "10", Fingerprint: "x", Result: json.RawMessage(`"hi"`)},
		{Kind: "model", Key: "2", Fingerprint: "x", Result: json.RawMessage(`"hi"`)},
		result(2),
	}})
	rs, origin, err := f.j.Results(f.ctx, id)
	if err != nil || origin != journal.OriginValkey {
		t.Fatalf("Results: %v, %q", err, origin)
	}
	var got []string
	for _, r := range rs {
		got = append(got, journal.ResultID(r.Kind, r.Key))
	}
	want := []string{"model:1", "model:10", "model:2", "step:quote:1", "step:quote:2", "step:quote:3"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("result order = %v, want %v (by kind, then key, in code-point order)", got, want)
	}
	if !reflect.DeepEqual(rs[3], canonResult(1)) {
		t.Errorf("step:quote:1 = %s, want %s", dumpResults(rs[3:4]), dumpResults([]bundle.Result{canonResult(1)}))
	}
}

func testResultConflict(t *testing.T, h *Harness) {
	f := setup(t, h)
	id, l := f.create(t, "w", 0)
	f.appendOK(t, l, journal.Batch{Events: []journal.Event{callStart(0), callDone(0)}, Results: []bundle.Result{result(0)}})
	// The same bytes again are accepted (even spelled differently: the
	// canonical forms are equal).
	same := result(0)
	same.Result = json.RawMessage(`{ "n": 0, "price": 0.50 }`)
	if last := f.appendOK(t, l, journal.Batch{Results: []bundle.Result{same}}); last != 3 {
		t.Errorf("last_seq %d, want 3", last)
	}
	other := result(0)
	other.Result = json.RawMessage(`{"n":0,"price":99}`)
	_, err := f.j.Append(f.ctx, l, journal.Batch{Events: []journal.Event{callStart(1)}, Results: []bundle.Result{result(1), other}})
	wantErr(t, "Append of a different result under a recorded kind:key", err, journal.ErrResultConflict)
	_, err = f.j.Append(f.ctx, l, journal.Batch{Results: []bundle.Result{result(5), result(5)}})
	wantErr(t, "Append of one kind:key twice", err, journal.ErrInvalid)
	rs, _, _ := f.j.Results(f.ctx, id)
	if len(rs) != 1 || !reflect.DeepEqual(rs[0], canonResult(0)) {
		t.Errorf("after refused appends, results =\n%s", dumpResults(rs))
	}
	if m := f.meta(t, id); m.LastSeq != 3 {
		t.Errorf("a refused Append moved last_seq to %d", m.LastSeq)
	}
}

// testManyResults appends more results in one batch than a backend may
// check or write in one command: every one is kept, a conflict in the last
// is found, and an Append giving them all again is accepted.
func testManyResults(t *testing.T, h *Harness) {
	f := setup(t, h)
	id, l := f.create(t, "w", 0)
	const n = 700
	rs := make([]bundle.Result, n)
	for i := range rs {
		rs[i] = result(i)
	}
	f.appendOK(t, l, journal.Batch{Events: []journal.Event{callStart(0)}, Results: rs})
	conflict := slices.Clone(rs)
	conflict[n-1].Result = json.RawMessage(`{"n":0,"price":99}`)
	_, err := f.j.Append(f.ctx, l, journal.Batch{Events: []journal.Event{callDone(0)}, Results: conflict})
	wantErr(t, fmt.Sprintf("Append of %d results, the last different from its record", n), err, journal.ErrResultConflict)
	if last := f.appendOK(t, l, journal.Batch{Events: []journal.Event{callDone(0)}, Results: rs}); last != 3 {
		t.Errorf("last_seq %d after the same results again, want 3", last)
	}
	got, _, err := f.j.Results(f.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d results kept, want %d", len(got), n)
	}
	for _, r := range got {
		var v struct{ N int }
		if err := json.Unmarshal(r.Result, &v); err != nil || !reflect.DeepEqual(r, canonResult(v.N)) {
			t.Fatalf("result %s:%s = %s, want %s", r.Kind, r.Key, r.Result, canonResult(v.N).Result)
		}
	}
}

func testInvalid(t *testing.T, h *Harness) {
	f := setup(t, h)
	for _, id := range []string{"", "has space", "{tag}", "-lead", strings.Repeat("x", 201), "é"} {
		_, err := f.j.Create(f.ctx, journal.CreateParams{RunID: id, TargetName: "t"})
		wantErr(t, fmt.Sprintf("Create %q", id), err, journal.ErrInvalid)
	}
	for _, in := range []string{`[1]`, `"x"`, `{"a":1,"a":2}`, `{"a":NaN}`, `{`} {
		_, err := f.j.Create(f.ctx, journal.CreateParams{RunID: newID("run"), TargetName: "t", Inputs: json.RawMessage(in)})
		wantErr(t, fmt.Sprintf("Create with inputs %s", in), err, journal.ErrInvalid)
	}
	_, err := f.j.Create(f.ctx, journal.CreateParams{RunID: newID("run")})
	wantErr(t, "Create without a target", err, journal.ErrInvalid)
	_, err = f.j.Create(f.ctx, journal.CreateParams{RunID: newID("run"), TargetName: "t", Fields: map[string]json.RawMessage{"kind": json.RawMessage(`"x"`)}})
	wantErr(t, "Create with a reserved field", err, journal.ErrInvalid)

	id, l := f.create(t, "w", 0)
	bad := map[string]journal.Batch{
		"terminal event":      {Events: []journal.Event{{Kind: runevent.RunComplete}}},
		"run:submitted":       {Events: []journal.Event{{Kind: runevent.RunSubmitted}}},
		"no kind":             {Events: []journal.Event{{}}},
		"reserved field":      {Events: []journal.Event{{Kind: "x:y", Extra: map[string]json.RawMessage{"run_seq": json.RawMessage(`9`)}}}},
		"invalid field JSON":  {Events: []journal.Event{{Kind: "x:y", Extra: map[string]json.RawMessage{"a": json.RawMessage(`{"a":`)}}}},
		"duplicate JSON keys": {Events: []journal.Event{{Kind: "x:y", Extra: map[string]json.RawMessage{"a": json.RawMessage(`{"a":1,"a":1}`)}}}},
		"result with both":    {Results: []bundle.Result{{Kind: "step", Key: "a:0", Result: json.RawMessage(`1`), Error: json.RawMessage(`2`)}}},
		"result with neither": {Results: []bundle.Result{{Kind: "step", Key: "a:0"}}},
		"result without key":  {Results: []bundle.Result{{Kind: "step", Result: json.RawMessage(`1`)}}},
		"negative run_seq":    {Events: []journal.Event{{Kind: "x:y", RunSeq: -1}}},
	}
	for name, b := range bad {
		b.Events = append([]journal.Event{callStart(9)}, b.Events...)
		_, err := f.j.Append(f.ctx, l, b)
		wantErr(t, "Append with "+name, err, journal.ErrInvalid)
	}
	finishBad := map[string]journal.Batch{
		"no events":         {},
		"no terminal event": {Events: []journal.Event{callStart(0)}},
		"terminal not last": {Events: []journal.Event{{Kind: runevent.RunComplete}, callStart(0)}},
		"two terminals":     {Events: []journal.Event{{Kind: runevent.RunError}, {Kind: runevent.RunComplete}}},
	}
	for name, b := range finishBad {
		_, err := f.j.Finish(f.ctx, l, b)
		wantErr(t, "Finish with "+name, err, journal.ErrInvalid)
	}
	err = f.j.Release(f.ctx, l, journal.StatusComplete)
	wantErr(t, "Release to complete", err, journal.ErrInvalid)
	m := f.meta(t, id)
	if m.LastSeq != 1 || m.Status != journal.StatusRunning || m.LeaseOwner != "w" {
		t.Errorf("refused writes changed the run: %+v", m)
	}
	if rs, _, _ := f.j.Results(f.ctx, id); len(rs) != 0 {
		t.Errorf("refused writes recorded %d results", len(rs))
	}
	_, err = journal.NewEvent("x:y", map[string]int{"at": 1})
	wantErr(t, "NewEvent with a reserved field", err, journal.ErrInvalid)
}

func testNotFound(t *testing.T, h *Harness) {
	f := setup(t, h)
	id := newID("missing")
	_, err := f.j.Meta(f.ctx, id)
	wantErr(t, "Meta", err, journal.ErrRunNotFound)
	_, _, err = f.j.Events(f.ctx, id)
	wantErr(t, "Events", err, journal.ErrRunNotFound)
	_, _, err = f.j.Results(f.ctx, id)
	wantErr(t, "Results", err, journal.ErrRunNotFound)
	_, err = f.j.Run(f.ctx, id)
	wantErr(t, "Run", err, journal.ErrRunNotFound)
	_, err = journal.ReadPages(f.ctx, f.j, id)
	wantErr(t, "ReadPages", err, journal.ErrRunNotFound)
	_, err = f.j.Acquire(f.ctx, journal.AcquireParams{RunID: id, Owner: "w"})
	wantErr(t, "Acquire", err, journal.ErrRunNotFound)
	l := journal.Lease{RunID: id, Owner: "w", Epoch: 1, TTL: time.Second}
	_, err = f.j.Append(f.ctx, l, journal.Batch{Events: []journal.Event{callStart(0)}})
	wantErr(t, "Append", err, journal.ErrRunNotFound)
	_, err = f.j.Finish(f.ctx, l, journal.Batch{Events: []journal.Event{{Kind: runevent.RunComplete}}})
	wantErr(t, "Finish", err, journal.ErrRunNotFound)
	_, err = f.j.Renew(f.ctx, l)
	wantErr(t, "Renew", err, journal.ErrRunNotFound)
	err = f.j.Release(f.ctx, l, journal.StatusRunning)
	wantErr(t, "Release", err, journal.ErrRunNotFound)
	err = f.j.Seal(f.ctx, id)
	wantErr(t, "Seal", err, journal.ErrRunNotFound)
	if _, err := f.j.Meta(f.ctx, id); !errors.Is(err, journal.ErrRunNotFound) {
		t.Errorf("writes to a missing run created it: %v", err)
	}
}

func testFencing(t *testing.T, h *Harness) {
	f := setup(t, h)
	ttl := f.leaseTTL()
	id, a := f.create(t, "worker-a", ttl)
	f.appendOK(t, a, journal.Batch{Events: []journal.Event{callStart(0)}})
	f.waitLease(ttl) // worker-a died and stopped renewing
	b := f.acquireEventually(t, id, "worker-b", time.Minute)
	if b.Epoch != 2 || b.Owner != "worker-b" {
		t.Fatalf("takeover lease = %+v, want worker-b epoch 2", b)
	}
	// worker-a comes back: every write under its lease is refused.
	_, err := f.j.Append(f.ctx, a, journal.Batch{Events: []journal.Event{callDone(0)}, Results: []bundle.Result{result(0)}})
	wantErr(t, "Append under the old lease", err, journal.ErrLeaseLost)
	_, err = f.j.Finish(f.ctx, a, journal.Batch{Events: []journal.Event{{Kind: runevent.RunComplete}}})
	wantErr(t, "Finish under the old lease", err, journal.ErrLeaseLost)
	_, err = f.j.Renew(f.ctx, a)
	wantErr(t, "Renew of the old lease", err, journal.ErrLeaseLost)
	err = f.j.Release(f.ctx, a, journal.StatusRunning)
	wantErr(t, "Release of the old lease", err, journal.ErrLeaseLost)
	// A forged lease with the right owner but an old epoch is refused too.
	_, err = f.j.Append(f.ctx, journal.Lease{RunID: id, Owner: "worker-b", Epoch: 1}, journal.Batch{})
	wantErr(t, "Append under the new owner with an old epoch", err, journal.ErrLeaseLost)

	if last := f.appendOK(t, b, journal.Batch{Events: []journal.Event{callDone(0)}, Results: []bundle.Result{result(0)}}); last != 3 {
		t.Errorf("last_seq after takeover = %d, want 3", last)
	}
	m := f.meta(t, id)
	if m.LeaseOwner != "worker-b" || m.LeaseEpoch != 2 || m.LastSeq != 3 {
		t.Errorf("meta after takeover = %+v", m)
	}
	evs, _ := f.events(t, id)
	if got := kinds(evs); !reflect.DeepEqual(got, []string{"run:submitted", "call:start", "call:done"}) {
		t.Errorf("kinds = %v", got)
	}
}

func testAcquireHeld(t *testing.T, h *Harness) {
	f := setup(t, h)
	id, a := f.create(t, "worker-a", time.Minute)
	_, err := f.j.Acquire(f.ctx, journal.AcquireParams{RunID: id, Owner: "worker-b"})
	wantErr(t, "Acquire of a held lease", err, journal.ErrLeaseHeld)
	// The holder may take a fresh epoch of its own lease.
	a2, err := f.j.Acquire(f.ctx, journal.AcquireParams{RunID: id, Owner: "worker-a", TTL: time.Minute})
	if err != nil {
		t.Fatalf("re-Acquire by the holder: %v", err)
	}
	if a2.Epoch != 2 {
		t.Errorf("re-Acquire epoch = %d, want 2", a2.Epoch)
	}
	_, err = f.j.Append(f.ctx, a, journal.Batch{})
	wantErr(t, "Append under the superseded epoch", err, journal.ErrLeaseLost)
	f.appendOK(t, a2, journal.Batch{})
	_, err = f.j.Acquire(f.ctx, journal.AcquireParams{RunID: id})
	wantErr(t, "Acquire without an owner", err, journal.ErrInvalid)
}

func testRenew(t *testing.T, h *Harness) {
	f := setup(t, h)
	ttl := f.leaseTTL()
	if f.h.Advance == nil {
		ttl = 2 * time.Second
	}
	id, l := f.create(t, "w", ttl)
	deadline := time.Now().Add(waitLimit)
	for {
		if f.h.Advance != nil {
			f.h.Advance(ttl / 2)
		} else {
			time.Sleep(5 * time.Millisecond)
		}
		r, err := f.j.Renew(f.ctx, l)
		if err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if r.Epoch != l.Epoch || r.Owner != l.Owner || r.TTL != ttl {
			t.Fatalf("Renew changed the lease: %+v → %+v", l, r)
		}
		if r.Until.After(l.Until) {
			l = r
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Renew never moved Until past %v", l.Until)
		}
	}
	if m := f.meta(t, id); !m.LeaseUntil.Equal(l.Until) {
		t.Errorf("Meta.LeaseUntil = %v, renewed lease until %v", m.LeaseUntil, l.Until)
	}
	if f.h.Advance != nil {
		// Renewed: still held after the original TTL has passed.
		f.h.Advance(ttl * 3 / 4)
		_, err := f.j.Acquire(f.ctx, journal.AcquireParams{RunID: id, Owner: "other"})
		wantErr(t, "Acquire of a renewed lease", err, journal.ErrLeaseHeld)
		// An expired lease nobody took is renewed and keeps writing.
		f.h.Advance(ttl)
		if _, err := f.j.Renew(f.ctx, l); err != nil {
			t.Errorf("Renew of an expired, untaken lease: %v", err)
		}
		f.appendOK(t, l, journal.Batch{Events: []journal.Event{callStart(0)}})
	}
}

func testRelease(t *testing.T, h *Harness) {
	f := setup(t, h)
	id, a := f.create(t, "worker-a", time.Minute)
	if err := f.j.Release(f.ctx, a, journal.StatusSuspended); err != nil {
		t.Fatalf("Release: %v", err)
	}
	m := f.meta(t, id)
	if m.Status != journal.StatusSuspended || m.LeaseOwner != "" || m.LeaseEpoch != 1 || !m.LeaseUntil.IsZero() {
		t.Errorf("meta after Release(suspended) = %+v", m)
	}
	_, err := f.j.Append(f.ctx, a, journal.Batch{})
	wantErr(t, "Append after Release", err, journal.ErrLeaseLost)
	// Released: another owner takes it at once, without waiting.
	b, err := f.j.Acquire(f.ctx, journal.AcquireParams{RunID: id, Owner: "worker-b"})
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	if b.Epoch != 2 {
		t.Errorf("epoch after Release and Acquire = %d, want 2", b.Epoch)
	}
	if m := f.meta(t, id); m.Status != journal.StatusRunning || m.LeaseOwner != "worker-b" {
		t.Errorf("meta after Acquire of a suspended run = %+v, want running, worker-b", m)
	}
	if err := f.j.Release(f.ctx, b, journal.StatusRunning); err != nil {
		t.Fatalf("Release(running): %v", err)
	}
	if m := f.meta(t, id); m.Status != journal.StatusRunning || m.LeaseOwner != "" {
		t.Errorf("meta after Release(running) = %+v", m)
	}
}

func testConcurrentAppend(t *testing.T, h *Harness) {
	f := setup(t, h)
	id, l := f.create(t, "w", time.Minute)
	const writers, appends = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*appends)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range appends {
				n := w*appends + i
				start, done := callStart(n), callDone(n)
				start.Extra = map[string]json.RawMessage{"writer": json.RawMessage(fmt.Sprint(w))}
				if _, err := f.j.Append(f.ctx, l, journal.Batch{Events: []journal.Event{start, done}, Results: []bundle.Result{result(n)}}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Append: %v", err)
	}
	evs, _ := f.events(t, id)
	if len(evs) != 1+2*writers*appends {
		t.Fatalf("%d events, want %d", len(evs), 1+2*writers*appends)
	}
	next := make([]int, writers) // each writer's next call, in its own order
	for i := 1; i < len(evs); i += 2 {
		start, done := evs[i], evs[i+1]
		cs, ok1 := journal.CallOf(start)
		cd, ok2 := journal.CallOf(done)
		var w int
		if _, err := start.Field("writer", &w); err != nil || !ok1 || !ok2 || start.Kind != runevent.CallStart || done.Kind != runevent.CallDone || cs != cd {
			t.Fatalf("events %d and %d are not one batch: %s / %s", i+1, i+2, eventJSON(t, start), eventJSON(t, done))
		}
		if want := call(w*appends + next[w]); cs != want {
			t.Fatalf("event %d: writer %d's call %s, want %s (its appends out of order)", i+1, w, cs.Key, want.Key)
		}
		next[w]++
	}
	rs, _, _ := f.j.Results(f.ctx, id)
	if len(rs) != writers*appends {
		t.Errorf("%d results, want %d", len(rs), writers*appends)
	}
	if m := f.meta(t, id); m.LastSeq != int64(len(evs)) {
		t.Errorf("last_seq %d, want %d", m.LastSeq, len(evs))
	}
}

func testTakeoverDuringAppends(t *testing.T, h *Harness) {
	f := setup(t, h)
	id, a := f.create(t, "worker-a", time.Minute)
	started := make(chan struct{})
	var okSeqs []int64
	done := make(chan error, 1)
	go func() {
		for n := 0; ; n++ {
			e := callStart(n)
			e.Extra = map[string]json.RawMessage{"owner": json.RawMessage(`"a"`)}
			last, err := f.j.Append(f.ctx, a, journal.Batch{Events: []journal.Event{e}})
			if err != nil {
				done <- err
				return
			}
			okSeqs = append(okSeqs, last)
			if n == 5 {
				close(started)
			}
		}
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("Append before the takeover: %v", err)
	}
	// worker-a's lease is taken away while it appends (as when it stalls
	// past its lease and worker-b acquires the run).
	if err := f.j.Release(f.ctx, a, journal.StatusRunning); err != nil {
		t.Fatalf("Release: %v", err)
	}
	b, err := f.j.Acquire(f.ctx, journal.AcquireParams{RunID: id, Owner: "worker-b", TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	e := callStart(1000)
	e.Extra = map[string]json.RawMessage{"owner": json.RawMessage(`"b"`)}
	bSeq := f.appendOK(t, b, journal.Batch{Events: []journal.Event{e}})
	select {
	case err := <-done:
		wantErr(t, "worker-a's Append after the takeover", err, journal.ErrLeaseLost)
	case <-time.After(waitLimit):
		t.Fatal("worker-a kept appending after the takeover")
	}
	evs, _ := f.events(t, id)
	for _, s := range okSeqs {
		if s >= bSeq {
			t.Errorf("an Append under the old lease succeeded at run_seq %d, after worker-b's %d", s, bSeq)
		}
		var owner string
		if _, err := evs[s-1].Field("owner", &owner); err != nil || owner != "a" {
			t.Errorf("run_seq %d, acknowledged to worker-a, holds %s", s, eventJSON(t, evs[s-1]))
		}
	}
	for _, e := range evs[bSeq-1:] {
		var owner string
		if _, _ = e.Field("owner", &owner); owner != "b" {
			t.Errorf("event %d after the takeover is not worker-b's: %s", e.RunSeq, eventJSON(t, e))
		}
	}
	if int64(len(evs)) != bSeq || int64(len(okSeqs))+2 != bSeq {
		t.Errorf("%d events, %d acknowledged to worker-a, worker-b's at %d", len(evs), len(okSeqs), bSeq)
	}
}

func testFinish(t *testing.T, h *Harness) {
	f := setup(t, h)
	id, l := f.create(t, "w", time.Minute)
	f.appendOK(t, l, journal.Batch{Events: []journal.Event{callStart(0)}})
	end := mkEvent(runevent.RunComplete, map[string]any{"output": map[string]any{"ok": true}})
	end.At = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	last, err := f.j.Finish(f.ctx, l, journal.Batch{Events: []journal.Event{callDone(0), end}, Results: []bundle.Result{result(0)}})
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if last != 4 {
		t.Errorf("Finish returned last_seq %d, want 4", last)
	}
	m := f.meta(t, id)
	if m.Status != journal.StatusComplete || m.LastSeq != 4 || !m.FinishedAt.Equal(end.At) || !m.LeaseUntil.IsZero() || m.LeaseOwner != "w" || m.LeaseEpoch != 1 {
		t.Errorf("meta after Finish = %+v", m)
	}
	evs, _ := f.events(t, id)
	if got := kinds(evs); !reflect.DeepEqual(got, []string{"run:submitted", "call:start", "call:done", "run:complete"}) {
		t.Errorf("kinds = %v", got)
	}
	if got, want := eventJSON(t, evs[3]), `{"at":"2030-01-01T00:00:00.000000Z","kind":"run:complete","output":{"ok":true},"run_seq":4}`; got != want {
		t.Errorf("terminal event = %s, want %s", got, want)
	}
	_, err = f.j.Append(f.ctx, l, journal.Batch{Events: []journal.Event{callStart(1)}})
	wantErr(t, "Append after Finish", err, journal.ErrRunFinished)
	_, err = f.j.Finish(f.ctx, l, journal.Batch{Events: []journal.Event{end}})
	wantErr(t, "Finish twice", err, journal.ErrRunFinished)
	_, err = f.j.Acquire(f.ctx, journal.AcquireParams{RunID: id, Owner: "other"})
	wantErr(t, "Acquire of a finished run", err, journal.ErrRunFinished)
	_, err = f.j.Renew(f.ctx, l)
	wantErr(t, "Renew after Finish", err, journal.ErrRunFinished)
	err = f.j.Release(f.ctx, l, journal.StatusRunning)
	wantErr(t, "Release after Finish", err, journal.ErrRunFinished)
	if err := f.j.Seal(f.ctx, id); err != nil {
		t.Errorf("Seal of a finished run (again): %v", err)
	}
	if m := f.meta(t, id); m.LastSeq != 4 || m.Status != journal.StatusComplete {
		t.Errorf("refused writes changed a finished run: %+v", m)
	}

	// Seal refuses a running run.
	id2, _ := f.create(t, "w", 0)
	wantErr(t, "Seal of a running run", f.j.Seal(f.ctx, id2), journal.ErrRunNotFinished)
}

func testFinishStatuses(t *testing.T, h *Harness) {
	f := setup(t, h)
	for kind, want := range map[journal.Kind]journal.Status{
		runevent.RunComplete:  journal.StatusComplete,
		runevent.RunError:     journal.StatusError,
		runevent.RunCancelled: journal.StatusCancelled,
	} {
		id, l := f.create(t, "w", 0)
		e := mkEvent(kind, map[string]any{"code": "write_not_allowed", "message": "m", "stop_key": "tool:toolu_01", "stop_token": nil})
		if _, err := f.j.Finish(f.ctx, l, journal.Batch{Events: []journal.Event{e}}); err != nil {
			t.Fatalf("Finish with %s: %v", kind, err)
		}
		if m := f.meta(t, id); m.Status != want || m.LastSeq != 2 {
			t.Errorf("after %s: status %q last_seq %d, want %q 2", kind, m.Status, m.LastSeq, want)
		}
		evs, _ := f.events(t, id)
		var token json.RawMessage
		if ok, _ := evs[1].Field("stop_token", &token); !ok || string(token) != "null" {
			t.Errorf("%s lost its null stop_token: %s", kind, eventJSON(t, evs[1]))
		}
	}
}

// testFinished lists the finished runs of a target (journal.Lister): the
// complete ones by default, another status when asked, bounded by when they
// finished; never a running run or another target's.
func testFinished(t *testing.T, h *Harness) {
	f := setup(t, h)
	l, ok := f.j.(journal.Lister)
	if !ok {
		t.Fatalf("%T does not list its finished runs", f.j)
	}
	target := newID("listed")
	start := func(target string) (string, journal.Lease) {
		id := newID("run")
		lease, err := f.j.Create(f.ctx, journal.CreateParams{RunID: id, TargetName: target, CodeVersion: "v1", Owner: "w"})
		if err != nil {
			t.Fatal(err)
		}
		return id, lease
	}
	finish := func(lease journal.Lease, kind journal.Kind) {
		if _, err := f.j.Finish(f.ctx, lease, journal.Batch{Events: []journal.Event{mkEvent(kind, map[string]any{"code": "runtime_error", "message": "m"})}}); err != nil {
			t.Fatal(err)
		}
	}
	var complete []string
	for range 3 {
		id, lease := start(target)
		finish(lease, runevent.RunComplete)
		complete = append(complete, id)
	}
	failed, lease := start(target)
	finish(lease, runevent.RunError)
	start(target) // running
	_, other := start(newID("other"))
	finish(other, runevent.RunComplete)
	slices.Sort(complete)
	ids := func(refs []journal.RunRef) []string {
		out := []string{}
		for _, r := range refs {
			out = append(out, r.RunID)
		}
		return out
	}
	got, err := l.Finished(f.ctx, journal.FinishedQuery{Target: target})
	if err != nil || !slices.Equal(ids(got), complete) {
		t.Fatalf("Finished(%s) = %v, %v; want the complete runs %v", target, ids(got), err, complete)
	}
	for i, r := range got {
		if m := f.meta(t, r.RunID); !r.FinishedAt.Equal(m.FinishedAt) {
			t.Errorf("run %d finished at %v, its meta says %v", i, r.FinishedAt, m.FinishedAt)
		}
	}
	if got, err := l.Finished(f.ctx, journal.FinishedQuery{Target: target, Status: journal.StatusError}); err != nil || !slices.Equal(ids(got), []string{failed}) {
		t.Fatalf("Finished(%s, error) = %v, %v; want [%s]", target, ids(got), err, failed)
	}
	bound := f.meta(t, complete[1]).FinishedAt
	var after, before []string
	for _, id := range complete {
		if f.meta(t, id).FinishedAt.Before(bound) {
			before = append(before, id)
		} else {
			after = append(after, id)
		}
	}
	if got, err := l.Finished(f.ctx, journal.FinishedQuery{Target: target, After: bound}); err != nil || !slices.Equal(ids(got), after) {
		t.Fatalf("Finished after %v = %v, %v; want %v", bound, ids(got), err, after)
	}
	if got, err := l.Finished(f.ctx, journal.FinishedQuery{Target: target, Before: bound}); err != nil || !slices.Equal(ids(got), append([]string{}, before...)) {
		t.Fatalf("Finished before %v = %v, %v; want %v", bound, ids(got), err, before)
	}
}

func testCompletedTTL(t *testing.T, h *Harness) {
	f := setup(t, h)
	ttl := f.h.CompletedTTL
	id, l := f.create(t, "w", time.Hour)
	f.appendOK(t, l, journal.Batch{Events: []journal.Event{callStart(0), callDone(0)}, Results: []bundle.Result{result(0)}})
	if f.h.KeyTTLs != nil {
		for i, d := range f.h.KeyTTLs(t, id) {
			if d >= 0 {
				t.Errorf("key %d of a running run expires in %v; a running run must not expire", i, d)
			}
		}
	}
	if f.h.Advance != nil {
		f.h.Advance(ttl + time.Hour)
		if m := f.meta(t, id); m.Origin != journal.OriginValkey {
			t.Fatalf("a running run left the live journal")
		}
	}
	if _, err := f.j.Finish(f.ctx, l, journal.Batch{Events: []journal.Event{{Kind: runevent.RunComplete}}}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if f.h.KeyTTLs != nil {
		ds := f.h.KeyTTLs(t, id)
		if len(ds) != 3 {
			t.Errorf("%d live keys, want 3 (meta, events, results)", len(ds))
		}
		for i, d := range ds {
			if d > ttl || d < ttl-waitLimit {
				t.Errorf("key %d of a finished run expires in %v, want the completed TTL %v", i, d, ttl)
			}
		}
	}
	if f.h.Advance != nil {
		f.h.Advance(ttl - time.Millisecond)
		if m := f.meta(t, id); m.Origin != journal.OriginValkey {
			t.Errorf("a finished run left the live journal before its TTL")
		}
		f.h.Advance(time.Millisecond)
		m, err := f.j.Meta(f.ctx, id)
		if f.h.Archived {
			if err != nil || m.Origin != journal.OriginArchive {
				t.Errorf("after its TTL: Meta = %+v, %v; want it from the archive", m, err)
			}
		} else {
			wantErr(t, "Meta after the TTL", err, journal.ErrRunNotFound)
		}
	}
}

func testExpired(t *testing.T, h *Harness) {
	f := setup(t, h)
	id, l := f.create(t, "w", time.Hour)
	for n := range 5 {
		e := callStart(n)
		e.Input = json.RawMessage(fmt.Sprintf(`{"text":"<é\u2028%d>","x":1.0e3}`, n))
		f.appendOK(t, l, journal.Batch{Events: []journal.Event{e, callDone(n)}, Results: []bundle.Result{result(n)}})
	}
	f.appendOK(t, l, journal.Batch{Results: []bundle.Result{{Kind: "tool", Key: "toolu_01", Fingerprint: "f", Error: json.RawMessage(`{"message":"no"}`)}}})
	end := mkEvent(runevent.RunError, map[string]any{"code": "runtime_error", "message": "boom", "stop_key": nil, "stop_token": nil})
	if _, err := f.j.Finish(f.ctx, l, journal.Batch{Events: []journal.Event{end}}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	before, err := f.j.Run(f.ctx, id)
	if err != nil {
		t.Fatalf("Run before expiry: %v", err)
	}
	if before.Meta.Origin != journal.OriginValkey {
		t.Errorf("Run before expiry from %q", before.Meta.Origin)
	}
	if f.h.Expire != nil {
		f.h.Expire(t, id)
	} else {
		f.h.Advance(f.h.CompletedTTL)
	}

	if !f.h.Archived {
		_, err := f.j.Run(f.ctx, id)
		wantErr(t, "Run of an expired run without an archive", err, journal.ErrRunNotFound)
		_, _, err = f.j.Events(f.ctx, id)
		wantErr(t, "Events of an expired run without an archive", err, journal.ErrRunNotFound)
		// Its id is free again.
		if _, err := f.j.Create(f.ctx, journal.CreateParams{RunID: id, TargetName: "t"}); err != nil {
			t.Errorf("Create with the id of an expired, unarchived run: %v", err)
		}
		return
	}

	after, err := f.j.Run(f.ctx, id)
	if err != nil {
		t.Fatalf("Run after expiry: %v", err)
	}
	if after.Meta.Origin != journal.OriginArchive {
		t.Errorf("Run after expiry from %q, want archive", after.Meta.Origin)
	}
	wantMeta := before.Meta
	wantMeta.Origin = journal.OriginArchive
	if !reflect.DeepEqual(after.Meta, wantMeta) {
		t.Errorf("archived meta =\n%+v\nwant\n%+v", after.Meta, wantMeta)
	}
	sameEvents(t, "Run", after.Events, before.Events)
	if !reflect.DeepEqual(after.Results, before.Results) {
		t.Errorf("archived results =\n%s\nwant\n%s", dumpResults(after.Results), dumpResults(before.Results))
	}
	evs, origin, err := f.j.Events(f.ctx, id)
	if err != nil || origin != journal.OriginArchive {
		t.Fatalf("Events after expiry: %v from %q", err, origin)
	}
	sameEvents(t, "Events", evs, before.Events)
	rs, origin, err := f.j.Results(f.ctx, id)
	if err != nil || origin != journal.OriginArchive || !reflect.DeepEqual(rs, before.Results) {
		t.Errorf("Results after expiry: %v from %q:\n%s", err, origin, dumpResults(rs))
	}
	m, err := f.j.Meta(f.ctx, id)
	if err != nil || !reflect.DeepEqual(m, wantMeta) {
		t.Errorf("Meta after expiry = %+v, %v", m, err)
	}
	if hr, ok := f.j.(journal.HeadReader); ok {
		m, head, err := hr.Head(f.ctx, id, 2)
		if err != nil || !reflect.DeepEqual(m, wantMeta) {
			t.Errorf("Head after expiry: meta %+v, %v; want %+v", m, err, wantMeta)
		}
		sameEvents(t, "Head", head, before.Events[:2])
	}
	// An archived run is finished and its id is taken.
	_, err = f.j.Create(f.ctx, journal.CreateParams{RunID: id, TargetName: "t"})
	wantErr(t, "Create with the id of an archived run", err, journal.ErrRunExists)
	_, err = f.j.Acquire(f.ctx, journal.AcquireParams{RunID: id, Owner: "x"})
	wantErr(t, "Acquire of an archived run", err, journal.ErrRunFinished)
	_, err = f.j.Append(f.ctx, l, journal.Batch{})
	wantErr(t, "Append to an archived run", err, journal.ErrRunFinished)
	if err := f.j.Seal(f.ctx, id); err != nil {
		t.Errorf("Seal of an archived run: %v", err)
	}
}

// sameEvents checks that got are want, byte for byte.
func sameEvents(t *testing.T, what string, got, want []journal.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d events, want %d", what, len(got), len(want))
	}
	for i := range got {
		if g, w := eventJSON(t, got[i]), eventJSON(t, want[i]); g != w {
			t.Errorf("%s: event %d =\n%s\nwant\n%s", what, i+1, g, w)
		}
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("%s: event %d differs as a value", what, i+1)
		}
	}
}

func testCancelled(t *testing.T, h *Harness) {
	f := setup(t, h)
	id, l := f.create(t, "w", time.Minute)
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	_, err := f.j.Create(ctx, journal.CreateParams{RunID: newID("run"), TargetName: "t"})
	wantErr(t, "Create", err, context.Canceled)
	_, err = f.j.Append(ctx, l, journal.Batch{Events: []journal.Event{callStart(0)}})
	wantErr(t, "Append", err, context.Canceled)
	_, err = f.j.Finish(ctx, l, journal.Batch{Events: []journal.Event{{Kind: runevent.RunComplete}}})
	wantErr(t, "Finish", err, context.Canceled)
	_, err = f.j.Meta(ctx, id)
	wantErr(t, "Meta", err, context.Canceled)
	_, _, err = f.j.Events(ctx, id)
	wantErr(t, "Events", err, context.Canceled)
	_, err = f.j.Run(ctx, id)
	wantErr(t, "Run", err, context.Canceled)
	_, err = f.j.Acquire(ctx, journal.AcquireParams{RunID: id, Owner: "x"})
	wantErr(t, "Acquire", err, context.Canceled)
	if m := f.meta(t, id); m.LastSeq != 1 || m.Status != journal.StatusRunning {
		t.Errorf("cancelled calls changed the run: %+v", m)
	}
}

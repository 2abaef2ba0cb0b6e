package worker_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/worker"
)

// onBackends runs scenario against real Valkey, the Valkey Cluster and the
// embedded server.
func onBackends(t *testing.T, scenario func(t *testing.T, setup newEnv)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			scenario(t, func(t *testing.T, st store.Store, mod func(*worker.Config)) *env {
				t.Helper()
				return setupWith(t, b.connect(t), st, mod)
			})
		})
	}
}

// onServers is onBackends on the real servers only: Valkey and the Valkey
// Cluster (for scenarios the embedded server cannot play).
func onServers(t *testing.T, scenario func(t *testing.T, setup newEnv)) {
	for _, b := range backends {
		if b.name == "embedded" {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			scenario(t, func(t *testing.T, st store.Store, mod func(*worker.Config)) *env {
				t.Helper()
				return setupWith(t, b.connect(t), st, mod)
			})
		})
	}
}

// hashOf is the hex hash n repeated (a valid fixture hash).
func hashOf(n int) string { return strings.Repeat(fmt.Sprintf("%x", n%16), 64) }

// putBundle stores a blob under hash h.
func putBundle(t *testing.T, st store.Store, h string) {
	t.Helper()
	bh, err := bundle.ParseHash(h)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(context.Background(), bh, strings.NewReader("blob "+h)); err != nil {
		t.Fatal(err)
	}
}

func stored(t *testing.T, st store.Store, h string) bool {
	t.Helper()
	bh, _ := bundle.ParseHash(h)
	_, err := st.Stat(context.Background(), bh)
	return err == nil
}

// noTransientError checks that no delivery of message id failed
// transiently (the worker keeps a transient error at <ns>:msg:{id}:error):
// the message was answered on its first delivery.
func (e *env) noTransientError(id string) {
	e.t.Helper()
	n, err := e.client.Do(context.Background(), e.client.B().Exists().Key(e.cfg.Namespace+":msg:{"+id+"}:error").Build()).AsInt64()
	if err != nil {
		e.t.Fatal(err)
	}
	if n != 0 {
		e.t.Errorf("message %s failed transiently before its reply (retried)", id)
	}
}

// Bad input is refused on the first delivery, never retried.
func TestInvalidInputRefusedOnce(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, setup newEnv) {
		e := setup(t, memstore.New(memstore.Options{}), func(c *worker.Config) { c.MaxDeliveries = 5 })
		run := e.record("checkout")
		e.send("f1", "save_case", map[string]any{"target_name": "checkout", "run_id": run, "fork_after_seq": 9999})
		e.send("f2", "save_case", map[string]any{"target_name": "no_such_target", "run_id": run})
		e.send("f3", "save_case", map[string]any{"target_name": "support_agent", "run_id": run})
		got := byID(e.waitReplies(3))
		wantReply(t, got["f1"], messages.StatusRefused, messages.InvalidOverrides)
		if !strings.Contains(got["f1"].Message, "fork_after_seq 9999 is past the last event of run") {
			t.Errorf("f1 message %q", got["f1"].Message)
		}
		wantReply(t, got["f2"], messages.StatusRefused, messages.InvalidOverrides)
		wantReply(t, got["f3"], messages.StatusRefused, messages.InvalidOverrides)
		for _, id := range []string{"f1", "f2", "f3"} {
			e.noTransientError(id)
		}
		// run_case from the journal past the run's end: the run ends
		// invalid_overrides at once, no dead letter.
		e.send("f4", "run_case", map[string]any{"target_name": "checkout",
			"source": map[string]any{"journal": map[string]any{"run_id": run, "fork_after_seq": 9999}}})
		r := e.waitReplies(4)[3]
		wantReply(t, r, messages.StatusOK, "")
		if kind, code := last(t, e.waitRun(runResult(t, r).RunID, 20*time.Second)); kind != "run:error" || code != messages.InvalidOverrides {
			t.Fatalf("f4 ended %s %s, want run:error invalid_overrides", kind, code)
		}
		if n, _ := e.client.Do(context.Background(), e.client.B().Xlen().Key(e.cfg.Namespace+":runs:dead").Build()).AsInt64(); n != 0 {
			t.Errorf("%d runs dead-lettered", n)
		}
	})
}

// message_id that is not valid UTF-8, empty or too long is refused, never
// normalised; the refusal names the entry (entry_id), not the id.
func TestMessageIDValidation(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, setup newEnv) {
		st := memstore.New(memstore.Options{})
		e := setup(t, st, nil)
		putBundle(t, st, hashOf(1))
		ids := []string{
			`"bad-utf8-` + "\xff" + `"`,
			`"bad-utf8-` + "\xfe" + `"`,
			`"lone-\ud800"`,
			`"repl-` + "\uFFFD" + `"`,
			`""`,
			`"` + strings.Repeat("a", 201) + `"`,
		}
		entries := map[string]string{} // entry id → raw id
		for _, id := range ids {
			msg := `{"message_id":` + id + `,"type":"delete_case_bundle","body":{"fixture_hash":"` + hashOf(1) + `"}}`
			eid, err := e.client.Do(context.Background(), e.client.B().Xadd().Key(e.cfg.CaseStream).Id("*").FieldValue().FieldValue("message", msg).Build()).ToString()
			if err != nil {
				t.Fatal(err)
			}
			entries[eid] = id
		}
		// 200 bytes is accepted.
		long := strings.Repeat("b", 200)
		e.send(long, "delete_case_bundle", map[string]any{"fixture_hash": hashOf(2)})
		got := e.waitReplies(len(ids) + 1)
		for _, r := range got {
			if r.MessageID == long {
				wantReply(t, r, messages.StatusOK, "")
				continue
			}
			id, ok := entries[r.EntryID]
			if !ok || r.MessageID != "" {
				t.Fatalf("reply %+v: want one naming its entry, without message_id", r)
			}
			delete(entries, r.EntryID)
			if r.Status != messages.StatusRefused || r.Code != messages.InvalidOverrides {
				t.Errorf("id %q: reply %+v, want refused invalid_overrides", id, r)
			}
		}
		if len(entries) != 0 {
			t.Errorf("entries without their own reply: %v", entries)
		}
		if !stored(t, st, hashOf(1)) {
			t.Error("a message with an invalid id was executed")
		}
	})
}

// A message id reused with another body at the same moment: one body is
// executed and answered, the other refused, every time.
func TestReusedIDConcurrentOneExecuted(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, setup newEnv) {
		st := memstore.New(memstore.Options{})
		e := setup(t, st, func(c *worker.Config) { c.Concurrency = 8 })
		const rounds = 20
		for i := 0; i < rounds; i++ {
			a, b := hashOf(2*i), hashOf(2*i+1)
			if i >= 8 { // hashOf repeats after 16 digits; vary the head too
				a, b = fmt.Sprintf("%02x", i)+a[2:], fmt.Sprintf("%02x", i)+b[2:]
			}
			putBundle(t, st, a)
			putBundle(t, st, b)
			id := fmt.Sprintf("reuse-%d", i)
			var wg sync.WaitGroup
			for _, h := range []string{a, b} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					e.send(id, "delete_case_bundle", map[string]any{"fixture_hash": h})
				}()
			}
			wg.Wait()
			got := e.waitReplies(2 * (i + 1))[2*i:]
			var ok, refused int
			for _, r := range got {
				switch {
				case r.Status == messages.StatusOK && string(r.Result) == `{"deleted":true}`:
					ok++
				case r.Status == messages.StatusRefused && r.Code == messages.InvalidOverrides && strings.Contains(r.Message, "reused with another body"):
					refused++
				default:
					t.Errorf("round %d: unexpected reply %+v", i, r)
				}
			}
			if ok != 1 || refused != 1 {
				t.Fatalf("round %d: %d ok and %d refused replies, want 1 and 1", i, ok, refused)
			}
			if sa, sb := stored(t, st, a), stored(t, st, b); sa == sb {
				t.Fatalf("round %d: bundles stored %v %v, want exactly one deleted", i, sa, sb)
			}
		}
	})
}

// bodyHash is the worker's body hash of a canonical body.
func bodyHash(typ, canonicalBody string) string {
	h := sha256.New()
	h.Write([]byte(typ))
	h.Write([]byte{0})
	h.Write([]byte(canonicalBody))
	return hex.EncodeToString(h.Sum(nil))
}

// A delete_case_bundle whose first delivery deleted the bundle and died
// before recording its reply is answered deleted: true on redelivery; one
// that died before finding the bundle, with the bundle absent, false.
func TestRedoneDeleteTellsTheTruth(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, setup newEnv) {
		st := memstore.New(memstore.Options{})
		e := setup(t, st, nil)
		ctx := context.Background()
		started := func(id, h string, present bool) {
			body, _ := json.Marshal(map[string]any{"fixture_hash": h})
			rec := `{"state":"started","body_hash":"` + bodyHash("delete_case_bundle", string(body)) + `"`
			if present {
				rec += `,"bundle_present":true`
			}
			rec += `}`
			if err := e.client.Do(ctx, e.client.B().Set().Key(e.cfg.Namespace+":msg:{"+id+"}").Value(rec).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		// r1: the first attempt found the bundle, deleted it, died.
		started("r1", hashOf(1), true)
		// r2: the first attempt died before looking; the bundle was never there.
		started("r2", hashOf(2), false)
		// r3: the first attempt died before deleting; the bundle is there.
		putBundle(t, st, hashOf(3))
		started("r3", hashOf(3), false)
		e.send("r1", "delete_case_bundle", map[string]any{"fixture_hash": hashOf(1)})
		e.send("r2", "delete_case_bundle", map[string]any{"fixture_hash": hashOf(2)})
		e.send("r3", "delete_case_bundle", map[string]any{"fixture_hash": hashOf(3)})
		got := byID(e.waitReplies(3))
		for id, want := range map[string]string{"r1": `{"deleted":true}`, "r2": `{"deleted":false}`, "r3": `{"deleted":true}`} {
			wantReply(t, got[id], messages.StatusOK, "")
			if string(got[id].Result) != want {
				t.Errorf("%s: result %s, want %s", id, got[id].Result, want)
			}
		}
		// The replies are recorded: a resend repeats them.
		e.send("r1", "delete_case_bundle", map[string]any{"fixture_hash": hashOf(1)})
		if r := e.waitReplies(4)[3]; string(r.Result) != `{"deleted":true}` {
			t.Errorf("resent r1: %+v", r)
		}
	})
}

// TestReplyToNotUTF8Refused: a reply_to that is not valid UTF-8 (or holds
// what invalid bytes decode to) is refused on the default reply stream,
// never normalised into the name of another stream, and nothing is done.
func TestReplyToNotUTF8Refused(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, setup newEnv) {
		st := memstore.New(memstore.Options{})
		e := setup(t, st, nil)
		putBundle(t, st, hashOf(1))
		ctx := context.Background()
		replyTo := e.cfg.Namespace + ":mine-"
		entries := map[string]bool{}
		for i, rt := range []string{`"` + replyTo + "\xff" + `"`, `"` + replyTo + `\ud800"`, `"` + replyTo + "\uFFFD" + `"`} {
			msg := fmt.Sprintf(`{"message_id":"rt-%d","type":"delete_case_bundle","reply_to":%s,"body":{"fixture_hash":"%s"}}`, i, rt, hashOf(1))
			eid, err := e.client.Do(ctx, e.client.B().Xadd().Key(e.cfg.CaseStream).Id("*").FieldValue().FieldValue("message", msg).Build()).ToString()
			if err != nil {
				t.Fatal(err)
			}
			entries[eid] = true
		}
		for _, r := range e.waitReplies(len(entries)) {
			if !entries[r.EntryID] || r.Status != messages.StatusRefused || r.Code != messages.InvalidOverrides || !strings.Contains(r.Message, "reply_to") {
				t.Errorf("reply %+v: want refused invalid_overrides naming its entry and reply_to", r)
			}
			delete(entries, r.EntryID)
		}
		if len(entries) != 0 {
			t.Errorf("entries without a reply on the default stream: %v", entries)
		}
		if n, err := e.client.Do(ctx, e.client.B().Exists().Key(replyTo+"\uFFFD").Build()).AsInt64(); err != nil || n != 0 {
			t.Errorf("the normalised reply_to stream exists (%d, %v)", n, err)
		}
		if !stored(t, st, hashOf(1)) {
			t.Error("a message with an unusable reply_to was executed")
		}
	})
}

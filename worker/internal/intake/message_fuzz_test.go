package intake

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/examples"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/memvalkey"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/suite"
	"github.com/pyrula/caseworker/worker/internal/envelope"
	"github.com/pyrula/caseworker/worker/internal/runwire"
)

// fuzzHash is a valid fixture hash.
var fuzzHash = strings.Repeat("ab", 32)

// fuzzBodies are seed bodies of each message type.
var fuzzBodies = []struct {
	typ  messages.MessageType
	body string
}{
	{messages.DeleteCaseBundle, `{"fixture_hash":"` + fuzzHash + `"}`},
	{messages.DeleteCaseBundle, `{"fixture_hash":"` + fuzzHash + `","fixture_store":"memory:"}`},
	{messages.DeleteCaseBundle, `{"fixture_hash":"ABC"}`},
	{messages.SaveCase, `{"target_name":"checkout","run_id":"run_1","fork_after_seq":3,"kind":"workflow","fixture_store":"memory:"}`},
	{messages.SaveCase, `{"target_name":"checkout","run_id":"run_1","fork_after_seq":-1,"kind":"robot"}`},
	{messages.StartRun, `{"target_name":"checkout","inputs":{"order_id":"o-1","amount":12.5},"run_id":"run_a"}`},
	{messages.StartRun, `{"target_name":"support_agent","inputs":[1],"llm_ref":"nope"}`},
	{messages.RunCase, `{"target_name":"checkout","source":{"bundle":{"fixture_hash":"` + fuzzHash + `"}},"options":{"from_start":true,"inputs":{"amount":3},"live_budget":2,"max_cost_usd":0.5,"allow_write":["step:charge"],"replay_only":false}}`},
	{messages.RunCase, `{"target_name":"support_agent","source":{"journal":{"run_id":"run_1","fork_after_seq":4,"expected_hash":"` + fuzzHash + `"}},"options":{"model":"local-support-1","prompt":"be brief","supply":{"calls":{"model:step:answer:0":{"content":"ok"}},"tools":{"refund":{"ok":true}}},"prices":{"local-support-1":{"input_per_mtok":1,"output_per_mtok":2,"long_context":{"above_input_tokens":10,"input_per_mtok":3,"output_per_mtok":4}}}}}`},
	{messages.RunCase, `{"target_name":"checkout","source":{},"options":{"supply":{"calls":{}},"prices":{"m":{"input_per_mtok":-1,"output_per_mtok":1}},"live_budget":-1}}`},
	{messages.RunCase, `{"target_name":"checkout","source":{"bundle":{"fixture_hash":"` + fuzzHash + `"}},"options":{"replay_only":true,"supply":"ignored","max_cost_usd":-0.5}}`},
	{messages.RunCase, `{"target_name":"checkout","source":{"journal":{"run_id":"run_1","fork_after_seq":null}},"options":{"max_cost_usd":1e400,"live_budget":1.5,"inputs":{"n":-1E+999}}}`},
	{messages.RunCase, `{"target_name":"checkout","source":{"journal":{"run_id":"run_1","fork_after_seq":99999999999999999999}},"options":{"prices":{"m":{"input_per_mtok":2e308,"output_per_mtok":1}}}}`},
	{messages.RunSuite, `{"target_name":"checkout","cases":{"bundles":["` + fuzzHash + `"]},"arms":[{"name":"a","options":{"replay_only":true},"assert":[{"path":"$.total","equals":12.5},{"max_live_calls":3}]}],"max_cost_usd":2,"max_live_calls":10,"min_cases":1}`},
	{messages.RunSuite, `{"target_name":"support_agent","cases":{"journal":{"after":"2026-01-02T03:04:05Z","before":"2026-02-01T00:00:00+02:00","sample":50,"seed":7,"fork":"inputs_only"}},"arms":[{"options":{"model":"m"},"assert":[{"path":"$[\"a\"][0]","matches":"(?i)ok"},{"contains":"x","equals":1}]}]}`},
	{messages.RunSuite, `{"target_name":"checkout","cases":{"store":{"limit":-1},"bundles":[]},"arms":[],"min_cases":-2,"max_cost_usd":1e400}`},
}

// fuzzEnvelopes are seed envelopes: fuzzBodies in envelopes, and broken ones.
func fuzzEnvelopes() []string {
	out := []string{
		``, `null`, `[]`, `{}`, `{"message_id":"m1"}`, `{"message_id":"m1","type":"save_case","body":null}`,
		`{"message_id":"m1","type":"nope","body":{}}`, `{"message_id":"a b","type":"save_case","body":{}}`,
		`{"message_id":"m1","type":"delete_case_bundle","body":{"fixture_hash":"` + fuzzHash + `"},"reply_to":"pyrula:case-messages"}`,
		`{"message_id":"m\u00e9","type":"delete_case_bundle","body":{"fixture_hash":"\ud800"}}`,
		"{\"message_id\":\"m\xff\",\"type\":\"delete_case_bundle\",\"body\":{\"fixture_hash\":\"\xc3\"}}",
		`{"MESSAGE_ID":"m2","Type":"delete_case_bundle","body":{},"bOdY":{"fixture_hash":"x"}}`,
		`{"message_id":"m1","type":"delete_case_bundle","body":{"fixture_hash":"` + fuzzHash + `"}} trailing`,
		`{"message_id":"` + strings.Repeat("x", 201) + `","type":"delete_case_bundle","body":{}}`,
		`{"message_id":"m1","type":"save_case","body":` + strings.Repeat("[", 30) + strings.Repeat("]", 30) + `}`,
	}
	for i, b := range fuzzBodies {
		out = append(out, `{"message_id":"fuzz-`+string(rune('a'+i))+`","type":"`+string(b.typ)+`","reply_to":"r","body":`+b.body+`}`)
	}
	return out
}

// fuzzTargets are the example targets, whose vocabulary run_case options
// are checked against.
func fuzzTargets(tb testing.TB) (*flow.Registry, []host.TargetInfo) {
	reg := flow.NewRegistry()
	if _, err := examples.Register(reg); err != nil {
		tb.Fatal(err)
	}
	return reg, reg.Targets()
}

// FuzzMessage: a message stream entry's envelope never panics the parser;
// what it decodes has valid UTF-8 members, re-encodes and decodes to the
// same envelope with the same body hash (so a resend after re-encoding is
// the same message; a body that is not Unicode text is refused both times),
// and its body decodes as its type's handler decodes it
// (see fuzzCheckBody).
//
//	go test -run '^$' -fuzz '^FuzzMessage$' -fuzztime 30s ./worker/
func FuzzMessage(f *testing.F) {
	for _, s := range fuzzEnvelopes() {
		f.Add(s)
	}
	_, targets := fuzzTargets(f)
	f.Fuzz(func(t *testing.T, raw string) {
		env, err := envelope.Parse(raw)
		if err != nil {
			return
		}
		for _, s := range []string{env.MessageID, string(env.Type), env.ReplyTo} {
			if !utf8.ValidString(s) {
				t.Fatalf("decoded member %q is not valid UTF-8", s)
			}
		}
		enc, err := json.Marshal(env)
		if err != nil {
			t.Fatalf("a decoded envelope does not encode: %v", err)
		}
		again, err := envelope.Parse(string(enc))
		if err != nil {
			t.Fatalf("the re-encoded envelope %s does not decode: %v", enc, err)
		}
		if again.MessageID != env.MessageID || again.Type != env.Type || again.ReplyTo != env.ReplyTo {
			t.Fatalf("envelope %+v reads back as %+v", env, again)
		}
		if enc2, err := json.Marshal(again); err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("envelope encoding is not a fixed point:\n%s\n%s", enc, enc2)
		}
		h1, err1 := envelope.HashBody(env)
		h2, err2 := envelope.HashBody(again)
		if err1 != nil && err2 != nil {
			return // a body that is not Unicode text, refused either way
		}
		if err1 != nil || err2 != nil || h1 != h2 {
			t.Fatalf("body hash %s, %v; re-encoded %s, %v", h1, err1, h2, err2)
		}
		fuzzCheckBody(t, env.Type, env.Body, targets)
	})
}

// FuzzMessageBody: the body of each message type (kind picks it) never
// panics its handler's decoding and checks; see fuzzCheckBody.
//
//	go test -run '^$' -fuzz FuzzMessageBody -fuzztime 30s ./worker/
func FuzzMessageBody(f *testing.F) {
	kinds := []messages.MessageType{messages.DeleteCaseBundle, messages.SaveCase, messages.StartRun, messages.RunCase}
	for _, b := range fuzzBodies {
		for i, k := range kinds {
			if k == b.typ {
				f.Add(uint8(i), b.body)
			}
		}
	}
	f.Add(uint8(0), `{"fixture_store":"s","fixture_hash":"h"}`)
	f.Add(uint8(3), `{"options":{"inputs":{"a":1,"a":2,"\ud800":"x"},"allow_write":[],"live_budget":0}}`)
	_, targets := fuzzTargets(f)
	f.Fuzz(func(t *testing.T, kind uint8, body string) {
		fuzzCheckBody(t, kinds[int(kind)%len(kinds)], json.RawMessage(body), targets)
	})
}

// fuzzCheckBody decodes body as the handler of typ does: a body it
// refuses is refused invalid_overrides; a body it decodes re-encodes to
// the same value; a run_case's options give the same decision once
// re-encoded and, when valid, respect the supply and prices limits; the
// option checks against each example target never panic.
func fuzzCheckBody(t *testing.T, typ messages.MessageType, body json.RawMessage, targets []host.TargetInfo) {
	t.Helper()
	switch typ {
	case messages.DeleteCaseBundle:
		var b messages.DeleteCaseBundleBody
		if err := decodeBody(body, &b); err != nil {
			fuzzWantCode(t, err, messages.InvalidOverrides)
			return
		}
		fuzzRoundTrip(t, b)
		if h, err := bundle.ParseHash(b.FixtureHash); err == nil && !bundle.ValidHash(string(h)) {
			t.Fatalf("fixture_hash %q accepted", b.FixtureHash)
		}
	case messages.SaveCase:
		var b messages.SaveCaseBody
		if err := decodeBody(body, &b); err != nil {
			fuzzWantCode(t, err, messages.InvalidOverrides)
			return
		}
		fuzzRoundTrip(t, b)
	case messages.StartRun:
		var b messages.StartRunBody
		if err := decodeBody(body, &b); err != nil {
			fuzzWantCode(t, err, messages.InvalidOverrides)
			return
		}
		fuzzRoundTrip(t, b)
	case messages.RunCase:
		var b messages.RunCaseBody
		if err := decodeBody(body, &b); err != nil {
			fuzzWantCode(t, err, messages.InvalidOverrides)
			return
		}
		again := fuzzRoundTrip(t, b)
		opts, err := runwire.CaseOptions(b.Options)
		_, err2 := runwire.CaseOptions(again.Options)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("options decided %v, re-encoded %v", err, err2)
		}
		if err != nil {
			fuzzWantCode(t, err, messages.InvalidOverrides)
			return
		}
		fuzzCheckOptions(t, opts)
		for _, info := range targets {
			_ = replay.CheckOptions(opts, info, nil)
		}
	case messages.RunSuite:
		var b messages.RunSuiteBody
		if err := decodeBody(body, &b); err != nil {
			fuzzWantCode(t, err, messages.InvalidOverrides)
			return
		}
		again := fuzzRoundTrip(t, b)
		if len(again.Arms) != len(b.Arms) {
			t.Fatalf("%d arms re-encoded as %d", len(b.Arms), len(again.Arms))
		}
		for i, arm := range b.Arms {
			_, err := runwire.CaseOptions(arm.Options)
			_, err2 := runwire.CaseOptions(again.Arms[i].Options)
			if (err == nil) != (err2 == nil) {
				t.Fatalf("arm %d options decided %v, re-encoded %v", i, err, err2)
			}
			for k, a := range arm.Assert {
				err := suite.CheckAssertionShape(a)
				err2 := suite.CheckAssertionShape(again.Arms[i].Assert[k])
				if (err == nil) != (err2 == nil) {
					t.Fatalf("arm %d assertion %d decided %v, re-encoded %v", i, k, err, err2)
				}
				if err == nil {
					_ = suite.CheckAssertion(a, body, replay.Outcome{})
				}
			}
		}
	}
}

// fuzzCheckOptions fails when valid options break a documented limit.
func fuzzCheckOptions(t *testing.T, o replay.Options) {
	t.Helper()
	switch {
	case o.LiveBudget != nil && *o.LiveBudget < 0:
		t.Fatalf("live_budget %d accepted", *o.LiveBudget)
	case o.MaxCostUSD != nil && !(*o.MaxCostUSD >= 0):
		t.Fatalf("max_cost_usd %v accepted", *o.MaxCostUSD)
	case len(o.Supply.Calls) > replay.MaxSupplyEntries || len(o.Supply.Tools) > replay.MaxSupplyEntries:
		t.Fatalf("supply of %d calls and %d tools accepted", len(o.Supply.Calls), len(o.Supply.Tools))
	case len(o.Prices) > replay.MaxPriceEntries:
		t.Fatalf("%d prices accepted", len(o.Prices))
	}
	for id, p := range o.Prices {
		rates := []*float64{&p.InputPerMTok, &p.OutputPerMTok, p.CacheWritePerMTok, p.CacheReadPerMTok}
		if lc := p.LongContext; lc != nil {
			rates = append(rates, &lc.InputPerMTok, &lc.OutputPerMTok, lc.CacheWritePerMTok, lc.CacheReadPerMTok)
		}
		for _, r := range rates {
			if r != nil && !(*r >= 0) {
				t.Fatalf("price of %q: rate %v accepted", id, *r)
			}
		}
	}
}

// fuzzRoundTrip fails unless v encodes, the encoding decodes as a body
// (decodeBody) and encodes to the same bytes; it returns the decoded copy.
func fuzzRoundTrip[T any](t *testing.T, v T) T {
	t.Helper()
	enc, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("decoded body %+v does not encode: %v", v, err)
	}
	var again T
	if err := decodeBody(enc, &again); err != nil {
		t.Fatalf("re-encoded body %s does not decode: %v", enc, err)
	}
	if enc2, err := json.Marshal(again); err != nil || !bytes.Equal(enc, enc2) {
		t.Fatalf("body does not read back:\n%s\n%s (%v)", enc, enc2, err)
	}
	return again
}

func fuzzWantCode(t *testing.T, err error, code messages.Code) {
	t.Helper()
	if got, ok := messages.CodeOf(err); !ok || got != code {
		t.Fatalf("error %v: code %q, want %q", err, got, code)
	}
}

// FuzzDecide: whatever a message stream entry holds (too large, not an
// envelope, invalid UTF-8, any body), the worker decides a reply for it
// without panicking and without a transient failure (so it is never
// redelivered until dead-lettered): an ok reply, or a refusal with a known
// reason code, encodable, never to the message stream; an entry over
// PYRULA_MAX_MESSAGE_BYTES is refused unread; the re-encoded envelope gets
// the same decision. It runs the worker's decide against the embedded
// Valkey server (memvalkey, emptied before each input) with the example
// targets and a memory store.
//
//	go test -run '^$' -fuzz FuzzDecide -fuzztime 30s ./worker/
func FuzzDecide(f *testing.F) {
	for _, s := range fuzzEnvelopes() {
		f.Add(s)
	}
	f.Add(`{"message_id":"big","type":"delete_case_bundle","body":{"pad":"` + strings.Repeat("x", 5000) + `"}}`)
	// Found by this fuzzer: a run_id the journal refuses was a transient
	// failure (redelivered, then dead-lettered), not invalid_overrides.
	f.Add(`{"message_id":"m3","type":"save_case","body":{"target_name":"checkout","run_id":" "}}`)
	f.Add(`{"message_id":"m4","type":"run_case","body":{"target_name":"checkout","source":{"journal":{"run_id":"-x"}}}}`)
	srv, err := memvalkey.Start()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(srv.Close)
	c, err := srv.NewClient()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(c.Close) // before srv.Close
	reg, _ := fuzzTargets(f)
	const maxBytes = 4096
	in := newTestIntake(f, c, reg, Config{Namespace: "fuzz", CaseStream: "pyrula:case-messages", ReplyStream: "pyrula:case-replies",
		ConsumerGroup: "pyrula-workers", ConsumerName: "c1", MaxMessageBytes: maxBytes})
	decide := func(t *testing.T, raw string) messages.Reply {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e := valkey.XRangeEntry{ID: "1-0", FieldValues: map[string]string{messages.MessageField: raw}}
		m := in.read(e)
		out, _, err := in.decide(ctx, e, &m)
		if err != nil {
			t.Fatalf("decide %q: transient error %v", raw, err)
		}
		r := out.reply
		switch {
		case r.Status == messages.StatusOK:
			if r.Code != "" || checkMessageID(r.MessageID) != nil || !json.Valid(r.Result) {
				t.Fatalf("decide %q: ok reply %+v", raw, r)
			}
		case r.Status != messages.StatusRefused || !r.Code.Known():
			t.Fatalf("decide %q: reply %+v is neither ok nor a refusal with a known code", raw, r)
		}
		if out.replyTo == "" || out.replyTo == in.cfg.CaseStream {
			t.Fatalf("decide %q: reply to %q", raw, out.replyTo)
		}
		if enc, err := json.Marshal(r); err != nil || !json.Valid(enc) {
			t.Fatalf("decide %q: reply %+v encodes as %q, %v", raw, r, enc, err)
		}
		if len(raw) > maxBytes && (r.Code != messages.InvalidOverrides || r.EntryID != "1-0" || r.MessageID != "") {
			t.Fatalf("decide: an entry of %d bytes got %+v", len(raw), r)
		}
		return r
	}
	f.Fuzz(func(t *testing.T, raw string) {
		// Each input starts from an empty server: message ids claimed and
		// runs submitted by earlier inputs do not decide this one.
		if err := c.Do(context.Background(), c.B().Flushall().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		r := decide(t, raw)
		env, err := envelope.Parse(raw)
		if err != nil || len(raw) > maxBytes {
			return
		}
		enc, err := json.Marshal(env)
		if err != nil || len(enc) > maxBytes {
			return
		}
		if r2 := decide(t, string(enc)); r2.Status != r.Status || r2.Code != r.Code || r2.MessageID != r.MessageID {
			t.Fatalf("decide %q: %+v; re-encoded %s: %+v", raw, r, enc, r2)
		}
	})
}

package worker_test

import (
	"context"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store/memstore"
)

// A body holding invalid UTF-8 (or a lone surrogate escape) is refused
// with invalid_overrides, never normalised: two bodies that differ only in
// their invalid bytes, sent under one message id, are each refused on their
// own (neither is answered as the other's duplicate), no idempotency record
// is kept for them, and the id then still runs a valid body.
func TestBodyWithInvalidUTF8Refused(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, setup newEnv) {
		st := memstore.New(memstore.Options{})
		e := setup(t, st, nil)
		h := hashOf(7)
		putBundle(t, st, h)
		bodies := []string{
			`{"fixture_hash":"` + h + `","fixture_store":"memory:` + "\xff" + `"}`,
			`{"fixture_hash":"` + h + `","fixture_store":"memory:` + "\xfe" + `"}`,
			`{"fixture_hash":"` + h + `","fixture_store":"memory:\ud800"}`,
		}
		for _, b := range bodies {
			e.sendRaw(`{"message_id":"utf8-body","type":"delete_case_bundle","body":` + b + `}`)
		}
		got := e.waitReplies(len(bodies)) // in any order
		utf8, surrogate := 0, 0
		for i, r := range got {
			if r.MessageID != "utf8-body" || r.Status != messages.StatusRefused || r.Code != messages.InvalidOverrides ||
				!strings.HasPrefix(r.Message, "body: ") {
				t.Errorf("reply %d: %+v, want refused invalid_overrides naming the body", i, r)
			}
			switch {
			case strings.Contains(r.Message, "not valid UTF-8"):
				utf8++
			case strings.Contains(r.Message, "lone surrogate escape"):
				surrogate++
			}
		}
		if utf8 != 2 || surrogate != 1 {
			t.Errorf("%d refusals for invalid UTF-8 and %d for a lone surrogate, want 2 and 1: %+v", utf8, surrogate, got)
		}
		n, err := e.client.Do(context.Background(), e.client.B().Exists().Key(e.cfg.Namespace+":msg:{utf8-body}").Build()).AsInt64()
		if err != nil || n != 0 {
			t.Fatalf("an idempotency record exists for the refused bodies (%d, %v)", n, err)
		}
		if !stored(t, st, h) {
			t.Fatal("a refused body was executed")
		}
		// The id was never claimed: a valid body under it runs.
		e.send("utf8-body", "delete_case_bundle", map[string]any{"fixture_hash": h})
		wantReply(t, e.waitReplies(len(bodies) + 1)[len(bodies)], messages.StatusOK, "")
		if stored(t, st, h) {
			t.Error("the valid body did not delete the bundle")
		}
	})
}

package intake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/canonjson"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/capture"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/version"
	"github.com/pyrula/caseworker/worker/internal/runwire"
)

// decodeBody decodes a message body into v. A body that is not a JSON
// object, or whose values do not fit, is invalid_overrides, naming the field
// in the message's terms (checkNumbers, fieldError).
func decodeBody(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return messages.Errorf(messages.InvalidOverrides, "the body is missing")
	}
	if err := checkNumbers(raw); err != nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		if ferr := fieldError(err); ferr != nil {
			return ferr
		}
		return messages.Errorf(messages.InvalidOverrides, "the body is not a valid object: %v", err)
	}
	return nil
}

// checkNumbers refuses a body holding a number that no double holds:
// one that overflows (1e400: JSON can write it, and encoding/json and the
// journal's canonical JSON refuse it), or an integer of more digits than
// canonical JSON keeps (canonjson.MaxIntDigits). JSON has no NaN or
// infinity, so these are the numbers that are not finite. The message
// names the value's path in the body (options.max_cost_usd,
// options.prices["m"].input_per_mtok, options.inputs.qty). A body that
// does not parse is left to the decoder's verdict.
func checkNumbers(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	return walkNumbers("", v)
}

func walkNumbers(path string, v any) error {
	switch v := v.(type) {
	case json.Number:
		s := string(v)
		if !strings.ContainsAny(s, ".eE") {
			if digits := len(strings.TrimPrefix(s, "-")); digits > canonjson.MaxIntDigits {
				return messages.Errorf(messages.InvalidOverrides, "%s is an integer of %d digits, more than %d", path, digits, canonjson.MaxIntDigits)
			}
			return nil
		}
		if _, err := strconv.ParseFloat(s, 64); err != nil {
			return messages.Errorf(messages.InvalidOverrides, "%s %.40s is not a finite number (a double cannot hold it)", path, s)
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if err := walkNumbers(memberPath(path, k), v[k]); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range v {
			if err := walkNumbers(fmt.Sprintf("%s[%d]", path, i), e); err != nil {
				return err
			}
		}
	}
	return nil
}

// memberPath is the path of member name of the value at path: .name for
// a name of letters, digits and underscores, else ["name"].
func memberPath(path, name string) string {
	plain := name != ""
	for _, c := range name {
		plain = plain && (c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9')
	}
	switch {
	case !plain:
		return fmt.Sprintf("%s[%q]", path, name)
	case path == "":
		return name
	}
	return path + "." + name
}

// fieldError words a decoding error of a field in the message's terms
// (the field's path in the body, what it holds and what it should hold),
// or returns nil for other errors.
func fieldError(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field == "" || te.Type == nil {
		return nil
	}
	want := map[reflect.Kind]string{
		reflect.Int: "an integer", reflect.Int64: "an integer", reflect.Float64: "a number",
		reflect.String: "a string", reflect.Bool: "true or false", reflect.Slice: "an array",
		reflect.Map: "an object", reflect.Struct: "an object",
	}[te.Type.Kind()]
	n, isNumber := strings.CutPrefix(te.Value, "number ")
	switch {
	case want == "":
		return nil
	case isNumber && want == "an integer" && !strings.ContainsAny(n, ".eE"):
		return messages.Errorf(messages.InvalidOverrides, "%s %.40s is too large: it must fit in 64 bits", te.Field, n)
	case isNumber && want == "an integer":
		return messages.Errorf(messages.InvalidOverrides, "%s %.40s is not an integer", te.Field, n)
	case isNumber && want == "a number":
		return messages.Errorf(messages.InvalidOverrides, "%s %.40s is not a finite number (a double cannot hold it)", te.Field, n)
	}
	return messages.Errorf(messages.InvalidOverrides, "%s is a JSON %s, not %s", te.Field, te.Value, want)
}

// claimed is the idempotency record a delivery holds while it works: its
// key and body hash, and whether an earlier delivery of the message found
// the bundle of a delete_case_bundle stored (its started record says so).
type claimed struct {
	key, bodyHash string
	bundlePresent bool
}

// deleteCaseBundle handles delete_case_bundle. deleted is true when this
// delivery deleted the bundle, or when the started record says an earlier
// delivery of the message found the bundle stored and it is gone now (that
// delivery deleted it, then died before recording its reply, or is still
// running). So the first delivery that finds the bundle stored notes it in
// the started record before deleting it, and a delivery that finds nothing
// to delete reads the record again; a bundle absent then is deleted: false.
func (in *Intake) deleteCaseBundle(ctx context.Context, raw json.RawMessage, cl claimed) (any, error) {
	var b messages.DeleteCaseBundleBody
	if err := decodeBody(raw, &b); err != nil {
		return nil, err
	}
	if b.FixtureHash == "" {
		return nil, messages.Errorf(messages.InvalidOverrides, "fixture_hash is missing")
	}
	h, err := bundle.ParseHash(b.FixtureHash)
	if err != nil {
		return nil, messages.Errorf(messages.InvalidFixtureHash, "fixture_hash is not 64 lowercase hex characters")
	}
	s, err := in.deps.FixtureStore(b.FixtureStore)
	if err != nil {
		return nil, err
	}
	if !cl.bundlePresent {
		_, err := s.Stat(ctx, h)
		switch {
		case errors.Is(err, store.ErrNotFound):
			// Nothing to note: a later delivery looks again.
		case err != nil:
			return nil, fmt.Errorf("stat %s: %w", h, err)
		default:
			do := func(cmd valkey.Completed) valkey.ValkeyResult { return in.batch.Do(ctx, cmd) }
			err := in.setRecord(do, cl.key, cl.bodyHash, startedRecord(cl.bodyHash, true)).Error()
			if err != nil && !valkey.IsValkeyNil(err) {
				return nil, fmt.Errorf("note the bundle in the idempotency record: %w", err)
			}
			// Not written (nil is written): a reply of this body is
			// recorded already, and finish repeats it.
			cl.bundlePresent = true
		}
	}
	deleted, err := s.Delete(ctx, h)
	if err != nil {
		return nil, fmt.Errorf("delete %s: %w", h, err)
	}
	if !deleted && !cl.bundlePresent {
		// Another delivery of this message (the message sent twice, or
		// redelivered while this one ran) may have found the bundle,
		// noted it and deleted it between this delivery's claim and its
		// Stat. Its note was written before its delete, so it is there
		// now: read it, or this delivery would answer false and, if it
		// records first, be the message's one reply.
		if cl.bundlePresent, err = in.bundleNoted(ctx, cl); err != nil {
			return nil, err
		}
	}
	return messages.DeleteCaseBundleResult{Deleted: deleted || cl.bundlePresent}, nil
}

// bundleNoted reports whether the idempotency record at cl.key is the
// started record of cl's body noting the bundle present.
func (in *Intake) bundleNoted(ctx context.Context, cl claimed) (bool, error) {
	cur, err := in.batch.Do(ctx, in.client.B().Get().Key(cl.key).Build()).ToString()
	if valkey.IsValkeyNil(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the idempotency record: %w", err)
	}
	return cur == startedRecord(cl.bodyHash, true), nil
}

// saveCase handles save_case: capture the run from the journal (live or
// archived), as `pyrula case save` does, and save it durably to the store.
func (in *Intake) saveCase(ctx context.Context, raw json.RawMessage) (any, error) {
	var b messages.SaveCaseBody
	if err := decodeBody(raw, &b); err != nil {
		return nil, err
	}
	switch {
	case b.TargetName == "":
		return nil, messages.Errorf(messages.InvalidOverrides, "target_name is missing")
	case b.RunID == "":
		return nil, messages.Errorf(messages.InvalidOverrides, "run_id is missing")
	case journal.CheckRunID(b.RunID) != nil:
		return nil, messages.Errorf(messages.InvalidOverrides, "run_id: %v", journal.CheckRunID(b.RunID))
	case b.ForkAfterSeq != nil && *b.ForkAfterSeq < 0:
		return nil, messages.Errorf(messages.InvalidOverrides, "fork_after_seq %d is negative", *b.ForkAfterSeq)
	case b.Kind != "" && b.Kind != string(bundle.KindWorkflow) && b.Kind != string(bundle.KindAgent):
		return nil, messages.Errorf(messages.InvalidOverrides, "kind %q is not workflow or agent", b.Kind)
	}
	s, err := in.deps.FixtureStore(b.FixtureStore)
	if err != nil {
		return nil, err
	}
	// At most SaveConcurrency bundles are built at once: each holds up to
	// about 2.5× its size in memory.
	select {
	case in.saves <- struct{}{}:
		defer func() { <-in.saves }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c, err := capture.FromJournal(ctx, in.journal, capture.FromJournalParams{
		Target: b.TargetName, RunID: b.RunID,
		Params: capture.Params{ForkAfterSeq: b.ForkAfterSeq, Kind: bundle.Kind(b.Kind), PyrulaVersion: version.Version},
		Registration: func(target string) (bundle.Registration, error) {
			info, ok := in.reg.Lookup(target)
			if !ok {
				return bundle.Registration{}, messages.Errorf(messages.InvalidOverrides, "no target %q is registered in this worker", target)
			}
			return info.Registration, nil
		},
	})
	switch {
	case errors.Is(err, journal.ErrRunNotFound):
		return nil, messages.Errorf(messages.CaptureIncomplete, "%v", err)
	case errors.Is(err, capture.ErrTargetMismatch):
		return nil, messages.Errorf(messages.InvalidOverrides, "%v", err)
	case err != nil:
		if fe := (*capture.ForkRangeError)(nil); errors.As(err, &fe) {
			return nil, runwire.ForkRangeRefusal("fork_after_seq", fe)
		}
		return nil, err
	}
	if _, err := store.Save(ctx, s, c); err != nil {
		return nil, fmt.Errorf("save %s: %w", c.Hash(), err)
	}
	summary, err := json.Marshal(c.Summary())
	if err != nil {
		return nil, fmt.Errorf("encode the manifest summary: %w", err)
	}
	return messages.SaveCaseResult{FixtureHash: string(c.Hash()), FixtureStore: s.Identity(), ManifestSummary: summary}, nil
}

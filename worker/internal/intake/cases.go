package intake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
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
	"github.com/pyrula/caseworker/worker/internal/batch"
	"github.com/pyrula/caseworker/worker/internal/envelope"
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
	if !mayHoldBadNumber(raw) {
		return nil
	}
	return refuseBadNumbers(raw)
}

// refuseBadNumbers is checkNumbers without its quick scan: it decodes raw
// and walks every number.
func refuseBadNumbers(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	return walkNumbers("", v)
}

// mayHoldBadNumber reports whether raw, outside its strings, holds a number
// that checkNumbers could refuse: one with a fraction or an exponent, or an
// integer of more than canonjson.MaxIntDigits digits. Most bodies hold
// none, and are not decoded twice.
func mayHoldBadNumber(raw []byte) bool {
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '"': // skip the string
			for i++; i < len(raw) && raw[i] != '"'; i++ {
				if raw[i] == '\\' {
					i++
				}
			}
		case c == '-' || c >= '0' && c <= '9':
			digits := 0
			for ; i+1 < len(raw) && isNumberByte(raw[i+1]); i++ {
				if c := raw[i+1]; c == '.' || c == 'e' || c == 'E' {
					return true
				}
				digits++
			}
			if c != '-' {
				digits++
			}
			if digits > canonjson.MaxIntDigits {
				return true
			}
		}
	}
	return false
}

// isNumberByte reports whether c can continue a JSON number.
func isNumberByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+'
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
// key and body hash, and whether the started record notes the bundle of a
// delete_case_bundle found in its store.
type claimed struct {
	key, bodyHash string
	bundlePresent bool
}

// peekDeleteBody reads a delete_case_bundle body that is a compact object
// of its two members, strings without escapes ({"fixture_hash":"…"} as a
// client's JSON encoder writes it) without a JSON decoder; it reports
// false for any other body, which decodeBody decodes.
func peekDeleteBody(raw string) (b messages.DeleteCaseBundleBody, ok bool) {
	rest, ok := strings.CutPrefix(raw, "{")
	for ok && rest != "}" {
		var name, value string
		if name, rest, ok = cutJSONString(rest); !ok || len(rest) == 0 || rest[0] != ':' {
			return b, false
		}
		if value, rest, ok = cutJSONString(rest[1:]); !ok {
			return b, false
		}
		switch name {
		case "fixture_hash":
			b.FixtureHash = value
		case "fixture_store":
			b.FixtureStore = value
		default:
			return b, false
		}
		if rest, ok = strings.CutPrefix(rest, ","); ok && rest == "}" {
			return b, false // a trailing comma
		} else if !ok {
			ok = rest == "}"
		}
	}
	return b, ok && b.FixtureHash != ""
}

// deletion is the bundle a delete_case_bundle names, looked up in its store
// before the message id is claimed.
type deletion struct {
	store   store.Store
	hash    bundle.Hash
	present bool
}

// findBundle decodes the body of a delete_case_bundle, raw (the text of
// its JSON), and looks its bundle up in its store. A body it refuses is a
// messages error.
func (in *Intake) findBundle(ctx context.Context, raw string) (deletion, error) {
	b, ok := peekDeleteBody(raw)
	if !ok {
		var full messages.DeleteCaseBundleBody // decoded apart: b stays off the heap
		if err := decodeBody(json.RawMessage(raw), &full); err != nil {
			return deletion{}, err
		}
		b = full
	}
	if b.FixtureHash == "" {
		return deletion{}, messages.Errorf(messages.InvalidOverrides, "fixture_hash is missing")
	}
	h, err := bundle.ParseHash(b.FixtureHash)
	if err != nil {
		return deletion{}, messages.Errorf(messages.InvalidFixtureHash, "fixture_hash is not 64 lowercase hex characters")
	}
	s, err := in.deps.FixtureStore(b.FixtureStore)
	if err != nil {
		return deletion{}, err
	}
	if !store.IsLocal(s) {
		batch.Detach(ctx) // a network's round trip: not on the consumer's loop
	}
	_, err = s.Stat(ctx, h)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return deletion{store: s, hash: h}, nil
	case err != nil:
		return deletion{}, fmt.Errorf("stat %s: %w", h, err)
	}
	return deletion{store: s, hash: h, present: true}, nil
}

// The replies of delete_case_bundle are deleted: true when the bundle was in
// its store when a delivery of the message looked, and is gone now; a
// bundle that no delivery found is deleted: false. A delivery that finds
// the bundle claims the message id with a started record noting it
// (claimRecord), or notes it in the started record of another delivery,
// before it deletes; so a delivery that finds nothing may be late (another
// delivery of the message found the bundle and deleted it), and answers by
// the record: one write (answerDelete, then finish) records deleted: false
// where there is no record or a started record of this body without the
// note, deleted: true over a started record with the note, and otherwise
// returns the reply recorded (a duplicate) or another body's record.

// answerDelete answers a delete_case_bundle whose bundle is not in its
// store, with no claim and no work: its outcome is deleted: false, or
// deleted: true over the started record of its body noting the bundle
// (alt), recorded by finish, whose write is the claim (unclaimed).
func (in *Intake) answerDelete(out outcome, key, bodyHash string) (outcome, string, error) {
	typ := string(messages.DeleteCaseBundle)
	out.reply = messages.Reply{MessageID: out.reply.MessageID, Type: messages.DeleteCaseBundle, Status: messages.StatusOK, Result: deletedFalse}
	// Both replies in one allocation. They differ only in their result,
	// the last member, which is spliced in: the reply without it, as
	// envelope.AppendReply writes it, then ,"result":<result>} (as it
	// would write a result it had to check).
	head := out.reply
	head.Result = nil
	var buf [256]byte
	b, err := envelope.AppendReply(buf[:0], head)
	if err != nil {
		return out, typ, fmt.Errorf("encode the reply: %w", err)
	}
	n := len(b) - len("}")
	b = append(b[:n], `,"result":`...)
	b = append(b, deletedFalse...)
	b = append(b, '}')
	alt := len(b)
	b = append(b, b[:n]...)
	b = append(b, `,"result":`...)
	b = append(b, deletedTrue...)
	b = append(b, '}')
	s := string(b)
	out.replyJSON = s[:alt]
	out.alt = altAnswer{result: deletedTrue, replyJSON: s[alt:]}
	out.key, out.bodyHash, out.unclaimed = key, bodyHash, true
	return out, typ, nil
}

// deletedFalse and deletedTrue are the results of delete_case_bundle
// (shared: never written to).
var deletedFalse, deletedTrue = json.RawMessage(`{"deleted":false}`), json.RawMessage(`{"deleted":true}`)

// deleteCaseBundle handles a delete_case_bundle whose bundle del was in its
// store when this delivery looked and which holds the message id by cl:
// it notes the bundle in a started record of another delivery that lacks
// the note, then deletes it. The reply is deleted: true whether this
// delivery deleted it or another one did first.
func (in *Intake) deleteCaseBundle(ctx context.Context, del deletion, cl claimed) (any, error) {
	if !cl.bundlePresent {
		do := func(cmd valkey.Completed) valkey.ValkeyResult { return in.batch.Do(ctx, cmd) }
		err := in.setRecord(do, cl.key, []string{startedPrefix(cl.bodyHash), startedRecord(cl.bodyHash, true), in.ttl}).Error()
		if err != nil && !valkey.IsValkeyNil(err) {
			return nil, fmt.Errorf("note the bundle in the idempotency record: %w", err)
		}
		// Not written (nil is written): a reply of this body is recorded
		// already, and finish repeats it.
	}
	if _, err := del.store.Delete(ctx, del.hash); err != nil {
		return nil, fmt.Errorf("delete %s: %w", del.hash, err)
	}
	return messages.DeleteCaseBundleResult{Deleted: true}, nil
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
	// At most SaveConcurrency bundles are built at once: each holds a page
	// of the run and its results' index in memory, its canonical bytes
	// (from 16 MiB) in a temporary file.
	select {
	case in.saves <- struct{}{}:
		defer func() { <-in.saves }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c, err := capture.FromJournal(ctx, in.journal, capture.FromJournalParams{
		Target: b.TargetName, RunID: b.RunID, SpillDir: os.TempDir(),
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
	// A spilled bundle's file, which reserves room for the largest bundle
	// in TMPDIR, goes when the save is done, not when the collector runs.
	defer c.Release()
	if _, err := store.Save(ctx, s, c); err != nil {
		return nil, fmt.Errorf("save %s: %w", c.Hash(), err)
	}
	summary, err := json.Marshal(c.Summary())
	if err != nil {
		return nil, fmt.Errorf("encode the manifest summary: %w", err)
	}
	return messages.SaveCaseResult{FixtureHash: string(c.Hash()), FixtureStore: s.Identity(), ManifestSummary: summary}, nil
}

package bundle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"strconv"

	"github.com/pyrula/caseworker/bundle/volatile"
	"github.com/pyrula/caseworker/canonjson"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

// manifestFields are the manifest keys of format 1, in canonical order.
var manifestFields = []string{
	"capture", "code_version", "fork_after_seq", "format", "inputs", "kind",
	"pyrula_version", "recorded_config", "registration", "source", "target_name",
}

// decodeManifest checks the manifest's members and decodes them. The format
// and kind are checked first: a bundle this version cannot read is
// format_unsupported, whatever else is wrong with it.
func (r *reader) decodeManifest() (*Manifest, error) {
	var m Manifest
	format, ok := r.manifest["format"]
	if !ok {
		return nil, messages.Errorf(messages.FormatUnsupported, "the manifest has no format")
	}
	if n, err := strconv.ParseInt(string(format), 10, 64); err != nil || n != Format {
		return nil, messages.Errorf(messages.FormatUnsupported,
			"bundle format %s is not readable by this version (it reads format %d)", truncate(string(format), 40), Format)
	}
	m.Format = Format
	kind, ok := stringValue(r.manifest["kind"])
	if !ok || (Kind(kind) != KindWorkflow && Kind(kind) != KindAgent) {
		return nil, messages.Errorf(messages.FormatUnsupported,
			"manifest kind %s is not readable by this version (it reads workflow and agent)", truncate(string(r.manifest["kind"]), 40))
	}
	m.Kind = Kind(kind)
	for _, f := range manifestFields {
		if f == "inputs" {
			if !r.inputsSeen {
				return nil, corrupt("the manifest has no inputs", nil)
			}
			continue
		}
		if _, ok := r.manifest[f]; !ok {
			return nil, corrupt(fmt.Sprintf("the manifest has no %s", f), nil)
		}
	}
	if !r.inputsIsObject {
		return nil, corrupt("manifest.inputs is not an object", nil)
	}
	m.Inputs = json.RawMessage(r.inputs)
	fields := []struct {
		name string
		dst  any
	}{
		{"target_name", &m.TargetName},
		{"code_version", &m.CodeVersion},
		{"pyrula_version", &m.PyrulaVersion},
		{"registration", &m.Registration},
		{"source", &m.Source},
		{"capture", &m.Capture},
		{"fork_after_seq", &m.ForkAfterSeq},
	}
	for _, f := range fields {
		if err := decodeStrict(r.manifest[f.name], f.dst); err != nil {
			return nil, corrupt("manifest."+f.name, err)
		}
	}
	if m.TargetName == "" {
		return nil, corrupt("manifest.target_name is empty", nil)
	}
	if err := checkRules(m.Registration); err != nil {
		return nil, err
	}
	if m.ForkAfterSeq != nil && *m.ForkAfterSeq < 0 {
		return nil, corrupt("manifest.fork_after_seq is negative", nil)
	}
	if m.Capture.Missing == nil {
		return nil, corrupt("manifest.capture.missing is not an array", nil)
	}
	rc := r.manifest["recorded_config"]
	if rc[0] != '{' {
		return nil, corrupt("manifest.recorded_config is not an object", nil)
	}
	m.RecordedConfig = json.RawMessage(rc)
	return &m, nil
}

// checkRules checks the volatile-field rules a registration records, so
// that replay never meets a rule it cannot apply.
func checkRules(reg Registration) error {
	v := reg.Volatile
	if v == nil {
		return nil
	}
	for _, group := range []struct {
		name  string
		rules map[string][]string
	}{{"steps", v.Steps}, {"tools", v.Tools}} {
		for _, name := range slices.Sorted(maps.Keys(group.rules)) {
			if err := volatile.CheckFields(group.rules[name]); err != nil {
				return corrupt(fmt.Sprintf("manifest.registration.volatile.%s[%q]", group.name, name), err)
			}
		}
	}
	if err := volatile.CheckPrompt(v.Prompt); err != nil {
		return corrupt("manifest.registration.volatile.prompt", err)
	}
	return nil
}

// decodeStrict decodes a canonical value into dst, refusing type mismatches.
func decodeStrict(v []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(v))
	return dec.Decode(dst)
}

// validateHistory checks the history events: objects with an integer run_seq
// that increases, no later than the fork, and a kind that is not terminal.
func (r *reader) validateHistory(fork *int64) error {
	if fork == nil && len(r.history) > 0 {
		return corrupt("history must be empty when fork_after_seq is null", nil)
	}
	var prev int64
	for i, e := range r.history {
		where := fmt.Sprintf("history[%d]", i)
		switch {
		case !e.hasRunSeq:
			return corrupt(where+" has no run_seq", nil)
		case e.runSeqErr != nil || e.runSeq < 1:
			return corrupt(where+": run_seq is not a positive integer", nil)
		case e.runSeq <= prev:
			return corrupt(fmt.Sprintf("%s: run_seq %d is not after %d (history is in run_seq order)", where, e.runSeq, prev), nil)
		case e.runSeq > *fork:
			return corrupt(fmt.Sprintf("%s: run_seq %d is after fork_after_seq %d", where, e.runSeq, *fork), nil)
		case !e.hasKind || !e.kindOK:
			return corrupt(where+": kind is missing or not a non-empty string", nil)
		case e.terminal:
			return corrupt(where+": a terminal event (run:complete, run:error, run:cancelled) is never kept in a bundle", nil)
		}
		prev = e.runSeq
	}
	return nil
}

// callEvent says whether a history event is a call:start or a call:done.
type callEvent uint8

const (
	callStart callEvent = 1 + iota
	callDone
)

func (k callEvent) String() string {
	if k == callDone {
		return string(runevent.CallDone)
	}
	return string(runevent.CallStart)
}

// callID is a call's identity kind:key, as results are keyed; the key is
// the unquoted bytes (an alias of the buffer unless it had escapes).
type callID struct {
	kind string
	key  []byte
}

// String names the call kind:key, its key cut to 80 bytes.
func (id callID) String() string { return id.kind + ":" + truncate(string(id.key), 80) }

var (
	// callIDSeed seeds the hashes of call identities.
	callIDSeed = maphash.MakeSeed()
	// callIDHashMask is all ones; a test clears it to make every identity
	// collide.
	callIDHashMask = ^uint64(0)
)

// callIDHash hashes the call identity kind:key. Equal hashes do not mean
// equal identities: checkCalls compares them.
func callIDHash[K string | []byte](kind string, key K) uint64 {
	var h uint64
	switch k := any(key).(type) {
	case string:
		h = maphash.String(callIDSeed, k)
	case []byte:
		h = maphash.Bytes(callIDSeed, k)
	}
	return (h ^ maphash.String(callIDSeed, kind)*0x9e3779b97f4a7c15) & callIDHashMask
}

// parseCall reads the canonical "call" member of a history event: its kind
// (a non-empty string, interned), key (a string) and fingerprint (64
// lowercase hex characters, returned quoted); ok is false when it is not
// such an object.
func (r *reader) parseCall(v []byte) (id callID, fp []byte, ok bool) {
	var kindOK, keyOK bool
	isObject := eachMember(v, func(name, value []byte) bool {
		switch string(name) {
		case `"kind"`:
			id.kind, kindOK = r.kinds.intern(value)
		case `"key"`:
			id.key, keyOK = unquote(value)
		case `"fingerprint"`:
			fp = value
		}
		return true
	})
	return id, fp, isObject && kindOK && id.kind != "" && keyOK && validFingerprint(fp)
}

// unquote returns the bytes of a canonical JSON string value: a slice of v
// when it has no escapes, else a decoded copy.
func unquote(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' {
		return nil, false
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return v[1 : len(v)-1], true
	}
	s, err := canonjson.Unquote(nil, v)
	return s, err == nil
}

// callSlot is one distinct call of the history: its identity, the index
// of its result (or -1), and the next slot whose identity has the same
// hash (or -1).
type callSlot struct {
	id           callID
	result, next int32
}

// callRef is one call event of the history.
type callRef struct {
	slot int32  // the event's call
	fpAt uint32 // where its quoted fingerprint is in the buffer
}

// callIndex is the history's calls by the hash of their identity, built
// by indexCalls (it reads only the history, so it runs while the results
// are sorted) and used by checkCalls.
type callIndex struct {
	heads map[uint64]int32 // identity hash → first slot
	slots []callSlot
	refs  []callRef // one per event, up to the first that names no call
}

// indexCalls builds the callIndex of the history's call events.
func (r *reader) indexCalls() *callIndex {
	idx := &callIndex{
		heads: make(map[uint64]int32, len(r.calls)),
		slots: make([]callSlot, 0, len(r.calls)),
		refs:  make([]callRef, 0, len(r.calls)),
	}
	heads := idx.heads
	read := uint32(0) // how far the history's bytes have been counted in a spill
	for _, c := range r.calls {
		r.spill.touch(int(c.start - read))
		read = c.start
		id, fp, ok := r.parseCall(memberValue(r.buf[c.start:], `"call"`))
		if !ok {
			break // reported by checkCalls, unless an earlier event has a problem
		}
		h := callIDHash(id.kind, id.key)
		s, seen := heads[h]
		for seen && (idx.slots[s].id.kind != id.kind || !bytes.Equal(idx.slots[s].id.key, id.key)) {
			s, seen = idx.slots[s].next, idx.slots[s].next >= 0
		}
		if !seen {
			s = int32(len(idx.slots))
			next := int32(-1)
			if head, ok := heads[h]; ok {
				next = head
			}
			heads[h] = s
			idx.slots = append(idx.slots, callSlot{id: id, result: -1, next: next})
		}
		// fp is a slice of the buffer: its offset is what its capacity lacks.
		idx.refs = append(idx.refs, callRef{slot: s, fpAt: uint32(cap(r.buf) - cap(fp))})
	}
	return idx
}

// checkCalls refuses a history whose calls disagree with the results, so
// that every reader (import, save, the verified read of run, export and
// show) sees a bundle whose history and results belong together:
//
//   - a call:start or call:done event names its call: "call" is an object
//     with a non-empty string kind, a string key and a fingerprint of 64
//     lowercase hex characters;
//   - when a result of that kind:key is recorded, its fingerprint is the
//     call's;
//   - a call:done has a recorded result.
//
// A call:start without a result is allowed (replay resolves it down the
// ladder). While history was read only the offsets of its call events were
// kept. One map of the history's calls (by the hash of their identity) is
// built (indexCalls), the results are looked up in it in one pass, and the events are
// checked in history order, so that the earliest event with a problem is
// reported.
func (r *reader) checkCalls(idx *callIndex) error {
	if len(r.calls) == 0 {
		return nil
	}
	heads, slots, refs := idx.heads, idx.slots, idx.refs
	for i, e := range r.results {
		kind, key := r.kindNames[e.kind], r.keyOf(e)
		s, ok := heads[callIDHash(kind, key)]
		for ok && (slots[s].id.kind != kind || !bytes.Equal(slots[s].id.key, key)) {
			s, ok = slots[s].next, slots[s].next >= 0
		}
		if ok {
			slots[s].result = int32(i)
		}
	}
	var scratch []byte
	for k, c := range r.calls {
		where := func() string {
			return fmt.Sprintf("history[%d] (run_seq %d): %s", c.index, r.history[c.index].runSeq, c.ev)
		}
		if k == len(refs) {
			return corrupt(where()+" has no call object with a non-empty string kind, a string key and a fingerprint of 64 lowercase hex characters", nil)
		}
		ref := refs[k]
		fp, sl := r.buf[ref.fpAt:ref.fpAt+66], slots[ref.slot]
		switch {
		case sl.result >= 0:
			e := r.results[sl.result]
			if want := memberValue(r.resultBytes(e, &scratch), `"fingerprint"`); !bytes.Equal(fp, want) {
				return corrupt(fmt.Sprintf("%s of %s has fingerprint %s, but its result has %s", where(), sl.id, fp[1:65], want[1:len(want)-1]), nil)
			}
		case c.ev == callDone:
			return corrupt(fmt.Sprintf("%s of %s has no recorded result", where(), sl.id), nil)
		}
	}
	return nil
}

// validFingerprint reports whether v is a quoted string of 64 lowercase
// hex characters.
func validFingerprint(v []byte) bool {
	if len(v) != 66 || v[0] != '"' || v[65] != '"' {
		return false
	}
	for _, c := range v[1:65] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// memberValue returns the value of member name (quoted) of the canonical
// JSON object at the start of b, or nil.
func memberValue(b []byte, name string) []byte {
	var v []byte
	eachMember(b, func(n, value []byte) bool {
		if string(n) == name {
			v = value
			return false
		}
		return true
	})
	return v
}

// eachMember calls visit with the name (quoted, as written) and value of
// each member of the canonical JSON object at the start of b, until visit
// returns false. It reports false when b does not start with an object. The
// input is canonical (no whitespace, valid), so a value ends at the first
// ',' or closing bracket outside strings at its depth.
func eachMember(b []byte, visit func(name, value []byte) bool) bool {
	if len(b) < 2 || b[0] != '{' {
		return false
	}
	for i := 1; i < len(b) && b[i] != '}'; {
		if b[i] == ',' {
			i++
		}
		nameEnd := skipValue(b, i)
		if nameEnd < 0 || nameEnd >= len(b) || b[nameEnd] != ':' {
			return false
		}
		valueEnd := skipValue(b, nameEnd+1)
		if valueEnd < 0 {
			return false
		}
		if !visit(b[i:nameEnd], b[nameEnd+1:valueEnd]) {
			return true
		}
		i = valueEnd
	}
	return true
}

// skipValue returns the end of the canonical JSON value that starts at
// b[i], or -1 when b ends inside it.
func skipValue(b []byte, i int) int {
	depth := 0
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '"':
			if j = stringEnd(b, j); j < 0 {
				return -1
			}
			if depth == 0 {
				return j + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return j // the end of a number, true, false or null
			}
			if depth--; depth == 0 {
				return j + 1
			}
		case ',', ':':
			if depth == 0 {
				return j
			}
		}
	}
	if depth == 0 {
		return len(b)
	}
	return -1
}

// stringEnd returns the index of the quote that ends the JSON string whose
// opening quote is b[i], or -1.
func stringEnd(b []byte, i int) int {
	for {
		k := bytes.IndexByte(b[i+1:], '"')
		if k < 0 {
			return -1
		}
		i += 1 + k
		// The quote is escaped when an odd number of backslashes precede it.
		n := 0
		for n < i && b[i-1-n] == '\\' {
			n++
		}
		if n%2 == 0 {
			return i
		}
	}
}

// resultBytes returns the canonical bytes of result e: a slice of the
// buffer or, when it is spilled, a copy read from the spill's file into
// scratch (the results a history's calls name are scattered over the
// buffer, and a read through the mapping would map 64 KiB around each).
func (r *reader) resultBytes(e resultEntry, scratch *[]byte) []byte {
	b := r.buf[e.start:e.end]
	if r.spill == nil {
		return b
	}
	*scratch = slices.Grow((*scratch)[:0], len(b))[:len(b)]
	if _, err := r.spill.f.ReadAt(*scratch, int64(e.start)); err != nil {
		return b // through the mapping, then
	}
	return *scratch
}

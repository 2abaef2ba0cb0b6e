package bundle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/pyrula/caseworker/messages"
)

// terminalKinds are the event kinds a bundle's history never holds.
var terminalKinds = map[string]bool{"run:complete": true, "run:error": true, "run:cancelled": true}

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

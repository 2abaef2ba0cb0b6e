package core

import (
	"encoding/json"

	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/pyrula/caseworker/flow/internal/resultjson"
)

// unmarshalResult decodes a call's result (canonical JSON) into a new T,
// as json.Unmarshal does. resultjson decodes the types results usually
// have (about three times as fast as encoding/json); for the others, and for
// input it leaves, go-json-experiment's v1 emulation tries (the
// implementation behind encoding/json's jsonv2 experiment, about twice as
// fast); when that fails, encoding/json decodes the value again into a
// zero T, so that errors, and any type the emulation reads differently
// enough to fail, get encoding/json's answer. FuzzUnmarshalResult holds
// the three to the same values.
func unmarshalResult[T any](raw []byte) (T, error) {
	var v T
	err := unmarshalInto(raw, &v)
	return v, err
}

// unmarshalInto is unmarshalResult into *dst, which it sets to the zero
// value before each of the three tries; after a failure *dst holds what
// encoding/json left.
func unmarshalInto[T any](raw []byte, dst *T) error {
	var zero T
	*dst = zero
	if resultjson.Decode(raw, dst) {
		return nil
	}
	*dst = zero
	if jsonv1.Unmarshal(raw, dst) == nil {
		return nil
	}
	*dst = zero
	return json.Unmarshal(raw, dst)
}

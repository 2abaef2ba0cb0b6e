package core

import (
	"encoding/json"
	"reflect"

	"github.com/invopop/jsonschema"
)

// InputSchema returns the JSON Schema of the Go type I as a tool's input:
// what provider clients send as a tool's input_schema (parameters). It is
// derived with the type's JSON field names (encoding/json tags) and inlines
// nested types; a field without omitempty is required. A type that does not
// encode as a JSON object gives {"type":"object"}, since tool inputs are
// objects.
func InputSchema[I any]() json.RawMessage {
	return schemaOf(reflect.TypeFor[I](), true)
}

// inputsSchema is the schema of a target's inputs I, for a sub-agent tool
// that runs the target: as InputSchema, but with nothing required at the
// top level, since every input has a default.
func inputsSchema[I any]() json.RawMessage {
	return schemaOf(reflect.TypeFor[I](), false)
}

// objectSchema is the schema of any object.
var objectSchema = json.RawMessage(`{"type":"object"}`)

func schemaOf(t reflect.Type, required bool) json.RawMessage {
	r := jsonschema.Reflector{DoNotReference: true, ExpandedStruct: true, Anonymous: true}
	s := r.ReflectFromType(t)
	if s == nil || s.Type != "object" {
		return objectSchema
	}
	s.Version = "" // providers take the schema body, not a $schema URI
	s.ID = ""
	if !required {
		s.Required = nil
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return objectSchema
	}
	return raw
}

package envelope

import (
	"encoding/json"

	"github.com/pyrula/caseworker/messages"
)

// EncodeResult is json.Marshal(result), the result member of an ok reply,
// without reflection for the results of delete_case_bundle.
func EncodeResult(result any) ([]byte, error) {
	if r, ok := result.(messages.DeleteCaseBundleResult); ok {
		if r.Deleted {
			return []byte(`{"deleted":true}`), nil
		}
		return []byte(`{"deleted":false}`), nil
	}
	return json.Marshal(result)
}

package htmlreport_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/pyrula/caseworker/cli/internal/htmlreport"
)

// A case test of one passing case, as one self-contained page.
func ExampleWrite() {
	var b bytes.Buffer
	err := htmlreport.Write(&b, htmlreport.Report{
		Command: "case test",
		Title:   "pyrula case test tests/cases",
		Version: "0.9.0",
		Summary: json.RawMessage(`{"type":"summary","cases":1,"passed":1,"failed":0,"errors":0,"duration_ms":3}`),
		Cases: []htmlreport.Case{{
			Line:     json.RawMessage(`{"type":"case","file":"tests/cases/a.case","target":"checkout","status":"pass","calls":1}`),
			Timeline: []htmlreport.Call{{Seq: 1, Call: "step:quote:0", Effect: "read", Provenance: "verified"}},
		}},
	})
	page := b.String()
	fmt.Println(err)
	fmt.Println(strings.Contains(page, "<title>pyrula case test tests/cases</title>"))
	fmt.Println(strings.Contains(page, `<script type="application/json" id="report-data">`))
	// Output:
	// <nil>
	// true
	// true
}

package messages_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/pyrula/caseworker/messages"
)

// TestExitStatus pins the product page's exit statuses: refusals before a
// start exit 2, stops of a started run exit 3.
func TestExitStatus(t *testing.T) {
	want := map[messages.Code]int{
		messages.CaptureIncomplete: 2, messages.NoFixtureStore: 2, messages.BundleMissing: 2,
		messages.BundleCorrupt: 2, messages.BundleTooLarge: 2, messages.FormatUnsupported: 2,
		messages.KindMismatch: 2, messages.InvalidFixtureHash: 2, messages.InvalidKeepHash: 2,
		messages.PrefixDiverged: 2, messages.BindingMismatch: 2, messages.InvalidOverrides: 2,
		messages.NoEligibleRuntime: 2, messages.RunsQuotaExceeded: 2,
		messages.ReplayInputChanged: 3, messages.MissingContext: 3, messages.LiveBudgetExceeded: 3,
		messages.WriteNotAllowed: 3, messages.ReplayDiverged: 3, messages.WhatifSourceMissing: 3,
		messages.WhatifSourceChanged: 3, messages.RuntimeError: 3, messages.Cancelled: 3,
		messages.RuntimeLost: 3, messages.SuiteTooSmall: 3, messages.SuiteFailed: 3,
	}
	all := messages.AllCodes()
	if len(all) != len(want) {
		t.Fatalf("AllCodes has %d codes, the table %d", len(all), len(want))
	}
	for _, c := range all {
		if !c.Known() {
			t.Errorf("%s is not Known", c)
		}
		if got := c.ExitStatus(); got != want[c] {
			t.Errorf("%s exits %d, want %d", c, got, want[c])
		}
	}
	if messages.Code("nope").Known() {
		t.Error("an unknown code is Known")
	}
}

func TestErrorCarriesCode(t *testing.T) {
	cause := io.ErrUnexpectedEOF
	err := fmt.Errorf("import x.json: %w", messages.Errorf(messages.BundleCorrupt, "not valid JSON: %w", cause))
	code, ok := messages.CodeOf(err)
	if !ok || code != messages.BundleCorrupt {
		t.Fatalf("CodeOf = %q, %v", code, ok)
	}
	if !errors.Is(err, cause) {
		t.Fatal("the cause does not unwrap")
	}
	if got := messages.AsError(err).Message; got != "not valid JSON: unexpected EOF" {
		t.Fatalf("message = %q", got)
	}
	if _, ok := messages.CodeOf(cause); ok {
		t.Fatal("a plain error has a code")
	}
}

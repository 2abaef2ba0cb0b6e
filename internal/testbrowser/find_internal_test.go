package testbrowser

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// verdict is a testing.TB that keeps what Skipf or Fatalf said instead of
// ending the test.
type verdict struct {
	testing.TB
	skipped, failed string
}

func (v *verdict) Helper() {}

func (v *verdict) Skipf(format string, args ...any) { v.skipped = fmt.Sprintf(format, args...) }

func (v *verdict) Fatalf(format string, args ...any) { v.failed = fmt.Sprintf(format, args...) }

func TestFind(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "chromium")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	absent := filepath.Join(dir, "absent")
	for _, tc := range []struct {
		name          string
		env, def      string
		required      bool
		want          string
		skip, failure string // in the message, "" for none
	}{
		{name: "the variable", env: bin, def: absent, want: bin},
		{name: "the default", def: bin, want: bin},
		{name: "none: skip naming the variable", def: absent, skip: EnvChromium + " not set"},
		{name: "none, required: fail", def: absent, required: true, failure: EnvChromium + " not set"},
		{name: "a variable naming nothing: fail", env: absent, def: bin, failure: EnvChromium + "=" + absent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &verdict{TB: t}
			got := find(v, tc.env, tc.def, tc.required)
			if got != tc.want {
				t.Errorf("find = %q, want %q", got, tc.want)
			}
			if (v.skipped == "") != (tc.skip == "") || !strings.Contains(v.skipped, tc.skip) {
				t.Errorf("skipped with %q, want %q", v.skipped, tc.skip)
			}
			if (v.failed == "") != (tc.failure == "") || !strings.Contains(v.failed, tc.failure) {
				t.Errorf("failed with %q, want %q", v.failed, tc.failure)
			}
		})
	}
}

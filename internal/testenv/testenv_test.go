package testenv

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// recorder is a testing.TB that records Skipf and Fatalf instead of stopping
// the goroutine, so that lookup's choice can be checked.
type recorder struct {
	testing.TB
	skipped, fatal string
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) { r.skipped = fmt.Sprintf(format, args...) }

func (r *recorder) Fatalf(format string, args ...any) { r.fatal = fmt.Sprintf(format, args...) }

func TestMissingVariableSkipsOrFails(t *testing.T) {
	cases := []struct {
		name      string
		require   string
		ci        string
		wantFatal bool
	}{
		{name: "local", require: "", ci: "", wantFatal: false},
		{name: "required", require: "1", ci: "", wantFatal: true},
		{name: "required-true", require: "true", ci: "", wantFatal: true},
		{name: "ci", require: "", ci: "true", wantFatal: true},
		{name: "ci-explicitly-not-required", require: "0", ci: "true", wantFatal: false},
	}
	getters := map[string]func(testing.TB){
		EnvValkeyURL:        func(tb testing.TB) { ValkeyURL(tb) },
		EnvValkeyClusterURL: func(tb testing.TB) { ValkeyClusterURL(tb) },
		EnvPostgresDSN:      func(tb testing.TB) { PostgresDSN(tb) },
		EnvS3Endpoint:       func(tb testing.TB) { S3(tb) },
	}
	for _, c := range cases {
		for name, get := range getters {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				t.Setenv(EnvRequireServices, c.require)
				t.Setenv("CI", c.ci)
				t.Setenv(name, "")
				r := &recorder{TB: t}
				get(r)
				msg := r.skipped
				if c.wantFatal {
					msg = r.fatal
				}
				if msg == "" {
					t.Fatalf("got skipped=%q fatal=%q, want a %s", r.skipped, r.fatal, map[bool]string{true: "failure", false: "skip"}[c.wantFatal])
				}
				if !strings.Contains(msg, name) {
					t.Errorf("message %q does not name %s", msg, name)
				}
			})
		}
	}
}

func TestVariablesAreRead(t *testing.T) {
	t.Setenv(EnvValkeyURL, "redis://127.0.0.1:1/0")
	t.Setenv(EnvValkeyClusterURL, "redis://127.0.0.1:4?addr=127.0.0.1:5")
	t.Setenv(EnvPostgresDSN, "postgres://u@127.0.0.1:2/test")
	t.Setenv(EnvS3Endpoint, "http://127.0.0.1:3")
	t.Setenv(EnvS3Region, "")
	t.Setenv(EnvS3AccessKey, "ak")
	t.Setenv(EnvS3SecretKey, "sk")
	if got := ValkeyURL(t); got != "redis://127.0.0.1:1/0" {
		t.Errorf("ValkeyURL = %q", got)
	}
	if got := ValkeyClusterURL(t); got != "redis://127.0.0.1:4?addr=127.0.0.1:5" {
		t.Errorf("ValkeyClusterURL = %q", got)
	}
	if got := PostgresDSN(t); got != "postgres://u@127.0.0.1:2/test" {
		t.Errorf("PostgresDSN = %q", got)
	}
	want := S3Env{Endpoint: "http://127.0.0.1:3", Region: DefaultS3Region, AccessKey: "ak", SecretKey: "sk"}
	if got := S3(t); got != want {
		t.Errorf("S3 = %+v, want %+v", got, want)
	}
}

func TestUniqueName(t *testing.T) {
	a, b := UniqueName(t, "pyrula"), UniqueName(t, "pyrula")
	if a == b {
		t.Fatalf("two names are equal: %q", a)
	}
	if !regexp.MustCompile(`^pyrula-[0-9a-f]{16}$`).MatchString(a) {
		t.Fatalf("UniqueName = %q", a)
	}
}

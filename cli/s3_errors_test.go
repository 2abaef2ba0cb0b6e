package cli_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// An S3 fixture store without credentials fails with exactly one "error:"
// line: nothing the AWS SDK logs (such as its "SDK … WARN falling back to
// IMDSv1" when the instance metadata service refuses a token) reaches
// stderr, and a 404 from the metadata service is not reported as a missing
// bucket.
func TestS3WithoutCredentialsOneErrorLine(t *testing.T) {
	t.Parallel()
	// An instance metadata service that refuses tokens (IMDSv2) and knows
	// no role: the SDK warns, then finds no credentials.
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(imds.Close)
	base := []string{
		"PYRULA_FIXTURE_STORE=s3://bucket/prefix?region=us-east-1&endpoint_url=http://127.0.0.1:1",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
	}
	for name, env := range map[string][]string{
		"imds disabled": {"AWS_EC2_METADATA_DISABLED=true"},
		"imds refusing": {"AWS_EC2_METADATA_SERVICE_ENDPOINT=" + imds.URL},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := run(t, invocation{args: []string{"case", "list"}, env: append(append([]string{}, base...), env...)})
			lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
			if r.code != 1 || r.stdout != "" || len(lines) != 1 || !strings.HasPrefix(lines[0], "error: ") {
				t.Fatalf("want exit 1 and exactly one error: line on stderr\n%s", r)
			}
			if !strings.Contains(lines[0], "credentials") || strings.Contains(lines[0], "does not exist") {
				t.Errorf("want an error about credentials\n%s", r)
			}
		})
	}
}

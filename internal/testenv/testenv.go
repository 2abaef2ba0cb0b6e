// Package testenv tells tests where the real services they need are running.
//
// Tests that touch Valkey, PostgreSQL or S3 talk to real servers (docs/development.md).
// scripts/test starts or reuses them and exports their addresses in the
// environment variables named by the constants below. Without a variable a test
// skips with a message naming it, unless services are required
// (PYRULA_TEST_REQUIRE_SERVICES=1, which scripts/test sets, or CI=true): then the
// test fails, so that a run can never pass by skipping.
package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// Names of the environment variables read by this package.
const (
	// EnvValkeyURL holds a Valkey/Redis URL such as redis://127.0.0.1:6379/0.
	EnvValkeyURL = "PYRULA_TEST_VALKEY_URL"
	// EnvValkeyClusterURL holds the URL of a Valkey/Redis Cluster: every
	// master's address, as redis://127.0.0.1:7001?addr=127.0.0.1:7002&addr=127.0.0.1:7003.
	EnvValkeyClusterURL = "PYRULA_TEST_VALKEY_CLUSTER_URL"
	// EnvPostgresDSN holds a PostgreSQL URL such as
	// postgres://postgres@127.0.0.1:5432/test?sslmode=disable.
	EnvPostgresDSN = "PYRULA_TEST_POSTGRES_DSN"
	// EnvS3Endpoint holds the base URL of an S3 server, such as http://127.0.0.1:7070.
	EnvS3Endpoint = "PYRULA_TEST_S3_ENDPOINT"
	// EnvS3Region holds the S3 region; DefaultS3Region is used when it is unset.
	EnvS3Region = "PYRULA_TEST_S3_REGION"
	// EnvS3AccessKey holds the access key id for the S3 server.
	EnvS3AccessKey = "AWS_ACCESS_KEY_ID"
	// EnvS3SecretKey holds the secret access key for the S3 server.
	EnvS3SecretKey = "AWS_SECRET_ACCESS_KEY"
	// EnvRequireServices, when true ("1" or "true"), turns every skip for a
	// missing service variable into a failure. When it is false ("0" or
	// "false") tests skip even under CI=true.
	EnvRequireServices = "PYRULA_TEST_REQUIRE_SERVICES"
)

// DefaultS3Region is the region used when EnvS3Region is unset.
const DefaultS3Region = "us-east-1"

// S3Env describes the S3 server that tests use. Tests create their own buckets;
// the server is path-style (the SDK needs UsePathStyle).
type S3Env struct {
	// Endpoint is the base URL, e.g. http://127.0.0.1:7070.
	Endpoint string
	// Region is the signing region.
	Region string
	// AccessKey is the access key id.
	AccessKey string
	// SecretKey is the secret access key.
	SecretKey string
}

// Required reports whether a missing service variable must fail a test rather
// than skip it: EnvRequireServices when it is set, otherwise CI=true.
func Required() bool {
	if v, ok := os.LookupEnv(EnvRequireServices); ok && v != "" {
		return truthy(v)
	}
	return truthy(os.Getenv("CI"))
}

func truthy(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// ValkeyURL returns the Valkey URL from EnvValkeyURL, or skips (fails when
// Required) when it is unset.
func ValkeyURL(t testing.TB) string {
	t.Helper()
	return need(t, "a Valkey server", EnvValkeyURL)[0]
}

// ValkeyClusterURL returns the Valkey Cluster URL from EnvValkeyClusterURL,
// or skips (fails when Required) when it is unset.
func ValkeyClusterURL(t testing.TB) string {
	t.Helper()
	return need(t, "a Valkey Cluster", EnvValkeyClusterURL)[0]
}

// PostgresDSN returns the PostgreSQL DSN from EnvPostgresDSN, or skips (fails
// when Required) when it is unset.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	return need(t, "a PostgreSQL server", EnvPostgresDSN)[0]
}

// S3 returns the S3 server from EnvS3Endpoint, EnvS3Region, EnvS3AccessKey and
// EnvS3SecretKey, or skips (fails when Required) when any of them but the
// region is unset.
func S3(t testing.TB) S3Env {
	t.Helper()
	v := need(t, "an S3 server", EnvS3Endpoint, EnvS3AccessKey, EnvS3SecretKey)
	env := S3Env{Endpoint: v[0], AccessKey: v[1], SecretKey: v[2], Region: os.Getenv(EnvS3Region)}
	if env.Region == "" {
		env.Region = DefaultS3Region
	}
	return env
}

// need returns the values of the named variables, or skips (fails when
// Required) naming every one that is unset.
func need(t testing.TB, service string, names ...string) []string {
	t.Helper()
	values := make([]string, len(names))
	var missing []string
	for i, name := range names {
		values[i] = os.Getenv(name)
		if values[i] == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return values
	}
	unset := strings.Join(missing, ", ")
	if Required() {
		t.Fatalf("%s not set: this test needs %s and services are required (%s=1 or CI=true); run scripts/test", unset, service, EnvRequireServices)
	} else {
		t.Skipf("%s not set: skipping a test that needs %s (scripts/test starts one)", unset, service)
	}
	return values
}

// UniqueName returns prefix followed by "-" and 16 random lowercase hex digits,
// usable as a key, stream, table suffix or S3 bucket name (for a bucket, keep
// prefix lowercase and at most 46 characters).
func UniqueName(t testing.TB, prefix string) string {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("testenv: random name: %v", err)
	}
	return prefix + "-" + hex.EncodeToString(b[:])
}

package store_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/store"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		in, scheme, dir, identity string
	}{
		{"memory:", "memory", "", "memory:"},
		{"  MEMORY:  ", "memory", "", "memory:"},
		{"file:///srv/pyrula/cases", "file", "/srv/pyrula/cases", "file:///srv/pyrula/cases"},
		{"file:///srv/pyrula/cases/", "file", "/srv/pyrula/cases", "file:///srv/pyrula/cases"},
		{"file:///srv//pyrula/./x/../cases", "file", "/srv/pyrula/cases", "file:///srv/pyrula/cases"},
		{"file://localhost/srv/cases", "file", "/srv/cases", "file:///srv/cases"},
		{"FILE:///srv/cases", "file", "/srv/cases", "file:///srv/cases"},
		{"file:///srv/my%20cases", "file", "/srv/my cases", "file:///srv/my%20cases"},
		{"file:///", "file", "/", "file:///"},
		{"/srv/pyrula/cases", "file", "/srv/pyrula/cases", "file:///srv/pyrula/cases"},
		{"/srv/pyrula/cases/", "file", "/srv/pyrula/cases", "file:///srv/pyrula/cases"},
		{"/srv/my cases", "file", "/srv/my cases", "file:///srv/my%20cases"},
		{"tests/cases", "file", filepath.Join(wd, "tests/cases"), store.FileIdentity(filepath.Join(wd, "tests/cases"))},
		{"./a:b", "file", filepath.Join(wd, "a:b"), store.FileIdentity(filepath.Join(wd, "a:b"))},
		{".", "file", wd, store.FileIdentity(wd)},
		{"postgres://db.example.com/pyrula", "postgres", "", "postgres://db.example.com:5432/pyrula"},
		{"postgresql://u:secret@DB.example.com:6543/pyrula?sslmode=require", "postgres", "", "postgres://db.example.com:6543/pyrula"},
		{"postgres://u@[::1]/pyrula", "postgres", "", "postgres://[::1]:5432/pyrula"},
		{"postgres://pyrula:secret@localhost", "postgres", "", "postgres://localhost:5432/pyrula"},
		{"postgres:///archive?host=/var/run/postgresql", "postgres", "", "postgres://localhost:5432/archive"},
		{"postgres://h/?dbname=arch", "postgres", "", "postgres://h:5432/arch"},
		{"postgres:///pyrula", "postgres", "", "postgres://localhost:5432/pyrula"},
		{"s3://bucket/prefix?region=eu-west-1&endpoint_url=http://127.0.0.1:7070", "s3", "", "s3://bucket/prefix"},
		{"s3://bucket/a//b/", "s3", "", "s3://bucket/a/b"},
		{"s3://bucket", "s3", "", "s3://bucket"},
		{"s3://bucket/", "s3", "", "s3://bucket"},
	}
	for _, tc := range tests {
		loc, err := store.ParseURL(tc.in)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", tc.in, err)
			continue
		}
		if loc.Scheme != tc.scheme || loc.Dir != tc.dir || loc.Identity != tc.identity {
			t.Errorf("ParseURL(%q) = %+v, want scheme %q dir %q identity %q", tc.in, loc, tc.scheme, tc.dir, tc.identity)
		}
		// An identity is a fixed point.
		again, err := store.ParseURL(loc.Identity)
		if err != nil || again.Identity != loc.Identity {
			t.Errorf("ParseURL(identity %q) = %q, %v; want the same identity", loc.Identity, again.Identity, err)
		}
	}
}

func TestParseURLErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string // in the message
	}{
		{"", "empty"},
		{"   ", "empty"},
		{"memory:x", `exactly "memory:"`},
		{"memory://", `exactly "memory:"`},
		{"file:relative/dir", "file:///absolute/path"},
		{"file://host/srv/cases", "local directory"},
		{"file://u@/srv", "no user"},
		{"file:///srv?x=1", "no query"},
		{"file:///srv#frag", "no query"},
		{"file://", "needs a directory"},
		{"ftp://example.com/x", `unknown scheme "ftp"`},
		{"cases:2024", "./cases:2024"},
		{"postgres:db", "postgres://host:port/database"},
		{"postgres://h1,h2/db", "one host"},
		{"postgres://host", "names a database"},
		{"postgres://u:topsecret@host:notaport/db", "does not parse"},
		{"s3://AKIAEXAMPLE:topsecret@bucket/prefix", "AWS SDK chain"},
		{"s3://AKIAEXAMPLE@bucket/prefix", "AWS SDK chain"},
		{"s3://bucket/prefix?aws_secret_access_key=topsecret", "AWS SDK chain"},
		{"s3://bucket/p?session_token=topsecret", "AWS SDK chain"},
		{"s3:///prefix", "names a bucket"},
		{"s3://bucket:9000/prefix", "no port"},
		{"s3:bucket", "s3://bucket/prefix"},
		{"host=db.example.com dbname=pyrula password=topsecret", "keyword/value"},
	}
	for _, tc := range tests {
		_, err := store.ParseURL(tc.in)
		if !errors.Is(err, store.ErrInvalidURL) {
			t.Errorf("ParseURL(%q): %v, want ErrInvalidURL", tc.in, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, tc.want) {
			t.Errorf("ParseURL(%q): %q does not say %q", tc.in, msg, tc.want)
		}
		for _, secret := range []string{"topsecret", "AKIAEXAMPLE"} {
			if strings.Contains(msg, secret) {
				t.Errorf("ParseURL(%q): error %q shows a credential", tc.in, msg)
			}
		}
	}
}

func TestFileIdentity(t *testing.T) {
	t.Parallel()
	for dir, want := range map[string]string{
		"/srv/cases":      "file:///srv/cases",
		"/srv/my cases":   "file:///srv/my%20cases",
		"/srv/100%/cases": "file:///srv/100%25/cases",
		"/":               "file:///",
	} {
		if got := store.FileIdentity(dir); got != want {
			t.Errorf("FileIdentity(%q) = %q, want %q", dir, got, want)
		}
		if loc, err := store.ParseURL(want); err != nil || loc.Dir != dir {
			t.Errorf("ParseURL(%q) = %+v, %v; want dir %q", want, loc, err, dir)
		}
	}
}

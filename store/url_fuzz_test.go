package store_test

import (
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/internal/fuzztext"
	"github.com/pyrula/caseworker/internal/redact"
	"github.com/pyrula/caseworker/store"
)

// FuzzParseURL: a fixture store URL (--fixture-store, PYRULA_FIXTURE_STORE,
// PYRULA_POSTGRES_DSN, a message's fixture_store) never panics the parser;
// a refusal wraps ErrInvalidURL; an accepted URL has a known scheme and an
// identity without user info or query that is a fixed point of ParseURL.
//
//	go test -run '^$' -fuzz '^FuzzParseURL$' -fuzztime 30s ./store/
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"memory:", "  MEMORY:  ", "memory:x",
		"file:///srv/pyrula/cases/", "file://localhost/srv/cases", "file:///srv/my%20cases", "file://host/x", "file:rel",
		"/srv/cases", "tests/cases", "./a:b", "cases:2024",
		"postgresql://u:secret@DB.example.com:6543/pyrula?sslmode=require", "postgres://u@[::1]/pyrula",
		"postgres://pyrula:secret@localhost", "postgres:///archive?host=/var/run/postgresql", "postgres://h/?dbname=arch",
		"postgres://h1,h2/db", "postgres://u:topsecret@host:notaport/db",
		"s3://bucket/prefix?region=eu-west-1&endpoint_url=http://127.0.0.1:7070", "s3://bucket/a//b/",
		"s3://k:topsecret@bucket/p", "s3://bucket/p?session_token=x", "s3://bucket:9000/p",
		"host=db dbname=pyrula password=topsecret", "ftp://example.com/x", "",
		"postgres:/0?host=0+", // found by this fuzzer: an identity that did not parse
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		loc, err := store.ParseURL(raw)
		if err != nil {
			if !errors.Is(err, store.ErrInvalidURL) {
				t.Fatalf("ParseURL(%q): %v does not wrap ErrInvalidURL", raw, err)
			}
			return
		}
		switch loc.Scheme {
		case store.SchemeMemory:
			if loc.Identity != "memory:" {
				t.Fatalf("ParseURL(%q): memory identity %q", raw, loc.Identity)
			}
		case store.SchemeFile:
			if !filepath.IsAbs(loc.Dir) || filepath.Clean(loc.Dir) != loc.Dir || loc.Identity != store.FileIdentity(loc.Dir) {
				t.Fatalf("ParseURL(%q) = %+v: dir not absolute and clean, or identity not FileIdentity(dir)", raw, loc)
			}
		case store.SchemePostgres, store.SchemeS3:
		default:
			t.Fatalf("ParseURL(%q): scheme %q", raw, loc.Scheme)
		}
		if loc.Scheme != store.SchemeMemory {
			u, err := url.Parse(loc.Identity)
			if err != nil || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
				t.Fatalf("ParseURL(%q): identity %q has user info, a query or a fragment, or does not parse (%v)", raw, loc.Identity, err)
			}
		}
		again, err := store.ParseURL(loc.Identity)
		if err != nil || again != loc {
			t.Fatalf("ParseURL(%q) = %+v; its identity parses as %+v, %v", raw, loc, again, err)
		}
	})
}

// FuzzURLCredentials: a password in a store URL's user info, in a
// credential query parameter, or in a keyword/value DSN never reaches
// what ParseURL returns (identity or error) nor what Redact returns: both
// are the same whatever the password is.
//
//	go test -run '^$' -fuzz FuzzURLCredentials -fuzztime 30s ./store/
func FuzzURLCredentials(f *testing.F) {
	f.Add(uint8(0), uint8(0), "", "pyrula", "Tr0ub4dor", "db.internal:5432", "/pyrula?sslmode=require")
	f.Add(uint8(0), uint8(1), "", "u", "p@ss/w?rd", "h", "/db")
	f.Add(uint8(0), uint8(2), "", "AKIAEXAMPLE", "se:cr:et", "bucket", "/prefix?region=eu-west-1")
	f.Add(uint8(0), uint8(3), "", "", "hunter2", "localhost", "/srv/cases")
	f.Add(uint8(0), uint8(5), "", "u", "Tr0ub4dor", "h", "/db")
	f.Add(uint8(1), uint8(0), "", "u", "Tr0ub4dor", "h", "/db?sslmode=disable")
	f.Add(uint8(1), uint8(2), "", "", "wJalrXUtnFEMI", "bucket", "/p?region=x")
	f.Add(uint8(2), uint8(0), "", "app", "Tr0ub4dor", "db.example.com", "pyrula")
	f.Add(uint8(0), uint8(7), "mysql", "root", "Tr0ub4dor", "h", "/x")
	f.Add(uint8(7), uint8(7), "mysql", "root", "Tr0ub4dor", "h", "/x")
	// Found by this fuzzer: the password in the error of an unknown
	// scheme, and the part of a query password after an '@'.
	f.Add(uint8(7), uint8(1), "0", "0", "\xeeX", "0", "0")
	f.Add(uint8(1), uint8(0), "", "app", "p@ssw0rd", "db", "/pyrula?user=app")
	f.Fuzz(func(t *testing.T, mode, scheme uint8, custom, user, pass, host, tail string) {
		if len(custom)+len(user)+len(pass)+len(host)+len(tail) > 256 {
			return // long texts find nothing short ones do not, slowly
		}
		a := credentialText(mode, scheme, custom, user, pass, host, tail, false)
		b := credentialText(mode, scheme, custom, user, pass, host, tail, true)
		if a == b {
			return // no letter of the password to change
		}
		if fuzztext.Keywords(a) != fuzztext.Keywords(b) {
			return // the change made or unmade a word that redaction looks for
		}
		if ra, rb := redact.Secrets(a), redact.Secrets(b); ra != rb {
			t.Fatalf("Redact shows the password:\n%q → %q\n%q → %q", a, ra, b, rb)
		}
		la, ea := store.ParseURL(a)
		lb, eb := store.ParseURL(b)
		if la != lb {
			t.Fatalf("the identity depends on the password:\n%q → %+v\n%q → %+v", a, la, b, lb)
		}
		if (ea == nil) != (eb == nil) || ea != nil && ea.Error() != eb.Error() {
			t.Fatalf("the error shows the password:\n%q → %v\n%q → %v", a, ea, b, eb)
		}
	})
}

// The alphabets the fuzzer's strings are mapped into.
const (
	// userinfoChars are what net/url accepts in user info (RFC 3986's
	// unreserved, sub-delims and ':', with '@' and '%').
	userinfoChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:@%"
	// valueChars are a query or DSN value's: no space, quote, '&' or '#'.
	valueChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$()*+,;=:@/?"
	hostChars  = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._:[]"
	schemeRest = "abcdefghijklmnopqrstuvwxyz0123456789+.-"
)

var schemes = []string{"postgres", "postgresql", "s3", "file", "memory", "PostgreSQL", "redis"}

// secretParams are query parameters that hold a credential.
var secretParams = []string{"password", "sslpassword", "aws_secret_access_key", "X-Amz-Security-Token", "session_token", "secret"}

// credentialText builds a store URL (mode 0: password in the user info;
// 1: in a credential query parameter) or a keyword/value DSN (mode 2)
// holding pass; with other, every letter g–z of the password is changed
// to the next one (keeping its class, and every percent escape as valid
// as it was).
func credentialText(mode, scheme uint8, custom, user, pass, host, tail string, other bool) string {
	pass = fuzztext.Within(pass, userinfoChars)
	if mode%3 != 0 {
		pass = fuzztext.Within(pass, valueChars)
	}
	if other {
		pass = fuzztext.Shift(pass)
	}
	sch := schemes[int(scheme)%len(schemes)]
	if int(scheme)%(len(schemes)+1) == len(schemes) && custom != "" {
		sch = fuzztext.Within(custom, schemeRest) // any other scheme
		if c := sch[0]; c < 'a' || c > 'z' {
			sch = "x" + sch
		}
	}
	host = fuzztext.Within(host, hostChars)
	switch mode % 3 {
	case 0:
		return sch + "://" + fuzztext.Within(user, strings.ReplaceAll(userinfoChars, ":", "")) + ":" + pass + "@" + host + tail
	case 1:
		tail, _, _ = strings.Cut(tail, "#") // the parameter is in the query, not the fragment
		sep := "?"
		if strings.Contains(tail, "?") {
			sep = "&"
		}
		return sch + "://" + host + tail + sep + secretParams[int(scheme)%len(secretParams)] + "=" + pass
	default:
		return "host=" + host + " user=" + fuzztext.Within(user, valueChars) + " password=" + pass + " dbname=" + fuzztext.Within(tail, valueChars)
	}
}

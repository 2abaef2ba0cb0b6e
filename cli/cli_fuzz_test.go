package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/internal/fuzztext"
	"github.com/pyrula/caseworker/internal/redact"
	"github.com/pyrula/caseworker/messages"
)

// fuzzHashRE is what a kept hash must be: 64 lowercase hex characters.
var fuzzHashRE = regexp.MustCompile(`\A[0-9a-f]{64}\z`)

// FuzzReadKeepFile: a `case gc --keep-file` file never panics the reader;
// every hash it keeps is 64 lowercase hex characters; it keeps exactly the
// entries of the documented format (one per line, "#" comments, blank
// lines, surrounding white space, a BOM, CRLF) and refuses the first other
// entry with invalid_keep_hash naming its line.
//
//	go test -run '^$' -fuzz FuzzReadKeepFile -fuzztime 30s ./cli/
func FuzzReadKeepFile(f *testing.F) {
	h1, h2 := strings.Repeat("a", 64), strings.Repeat("0", 63)+"f"
	for _, s := range []string{
		"", h1 + "\n", h1,
		"# header\n\n" + h1 + "\n   \n\t" + h2 + "\t# why\n#" + strings.Repeat("b", 64) + "\n",
		h1 + "\r\n" + h2 + "\r\n", "\ufeff" + h1 + "\n", h1 + "\n" + h1 + "\n",
		strings.ToUpper(h1) + "\n", h1 + "\nabc\n", "sha256:" + h1 + "\n",
		h1 + "\r\r\n", "\u00a0" + h1 + "\u2028\n", h1 + "\x00\n", "\ufeff\ufeff" + h1, "\n\ufeff" + h1,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		set := map[bundle.Hash]bool{}
		err := readKeepFile(bytes.NewReader(data), "keep.txt", set)
		want, badLine := fuzzKeepModel(string(data))
		if err != nil {
			if errors.Is(err, bufio.ErrTooLong) {
				return
			}
			e := messages.AsError(err)
			if e == nil || e.Code != messages.InvalidKeepHash {
				t.Fatalf("error %v, want invalid_keep_hash", err)
			}
			if badLine == 0 || !strings.Contains(e.Message, fmt.Sprintf("(keep.txt:%d)", badLine)) {
				t.Fatalf("error %q; the first bad entry is on line %d (0: none)", e.Message, badLine)
			}
			return
		}
		if badLine != 0 {
			t.Fatalf("line %d is not a hash, but the file is accepted: %v", badLine, set)
		}
		for h := range set {
			if !fuzzHashRE.MatchString(string(h)) {
				t.Fatalf("kept %q, not 64 lowercase hex characters", h)
			}
			if !want[string(h)] {
				t.Fatalf("kept %q, not an entry of the file", h)
			}
		}
		if len(set) != len(want) {
			t.Fatalf("kept %d hashes, the file lists %d", len(set), len(want))
		}
	})
}

// fuzzKeepModel reads a keep file as its documentation says: the hashes it
// lists, or the line number of its first entry that is not a hash.
func fuzzKeepModel(s string) (map[string]bool, int) {
	hashes := map[string]bool{}
	for i, line := range strings.Split(s, "\n") {
		line = strings.TrimSuffix(line, "\r")
		if i == 0 {
			line = strings.TrimPrefix(line, "\ufeff")
		}
		line, _, _ = strings.Cut(line, "#")
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case fuzzHashRE.MatchString(line):
			hashes[line] = true
		default:
			return nil, i + 1
		}
	}
	return hashes, 0
}

// FuzzRedact: whatever text surrounds it, redact.Secrets never shows the password
// of a URL with user info (net/url parses it, with that password), nor the
// value of a password, secret or token parameter of a query string or a
// keyword/value DSN: its output is the same whatever the password is.
//
//	go test -run '^$' -fuzz FuzzRedact -fuzztime 30s ./cli/
func FuzzRedact(f *testing.F) {
	f.Add(uint8(0), uint8(0), "", "user", "hunter2", "h", "/db", "", "")
	f.Add(uint8(0), uint8(1), "", "user", "hunter2", "h:5432", "/db?sslmode=require", "", "")
	f.Add(uint8(0), uint8(0), "", "u", "p%40ss", "10.0.0.1:5432", "/x", `dial "`, `": refused`)
	f.Add(uint8(0), uint8(2), "", "AKIA", "se:cr:et", "bucket", "/p", "open ", " failed")
	f.Add(uint8(0), uint8(0), "", "u", "p@ss", "h", "/db", "", "")
	f.Add(uint8(0), uint8(0), "", "", "hunter2", "h", "/db", "", "")
	f.Add(uint8(0), uint8(6), "", "b", "Tr0ub4dor", "k", "", "a postgres://a:1@h and ", "")
	f.Add(uint8(1), uint8(0), "", "a", "hunter2", "h", "/db?user=a", "", "&sslmode=disable")
	f.Add(uint8(1), uint8(2), "", "", "abc", "b", "/p?region=x", "", "")
	f.Add(uint8(2), uint8(0), "", "app", "hunter2", "db", "x", "", "")
	f.Add(uint8(0), uint8(7), "mysql", "root", "Tr0ub4dor", "h", "/x", "error: ", "\n")
	// Found by this fuzzer: a "'" or '@' in the user name or a "'" in
	// the password hid nothing.
	f.Add(uint8(0), uint8(5), "", "'", "X", "0", "0", "", "")
	f.Add(uint8(0), uint8(0), "", "me@corp.example", "Tr0ub4dor", "h", "/db", "", "")
	f.Add(uint8(0), uint8(0), "", "u", "it's", "h", "/db", "open '", "' failed")
	// Found while fixing the above: a query password holding an '@' after
	// a host:port.
	f.Add(uint8(1), uint8(0), "", "", "p@ssw0rd", "h:5432", "/db", "", "")
	f.Fuzz(func(t *testing.T, mode, scheme uint8, custom, user, pass, host, tail, prefix, suffix string) {
		if len(custom)+len(user)+len(pass)+len(host)+len(tail)+len(prefix)+len(suffix) > 256 {
			return // long texts find nothing short ones do not, slowly
		}
		a, ok := fuzzRedactText(mode, scheme, custom, user, pass, host, tail, false)
		if !ok {
			return // not a URL with that password
		}
		b, _ := fuzzRedactText(mode, scheme, custom, user, pass, host, tail, true)
		if a == b {
			return // no letter of the password to change
		}
		if fuzztext.Keywords(a) != fuzztext.Keywords(b) {
			return // the change made or unmade a word that redaction looks for
		}
		a, b = prefix+a+suffix, prefix+b+suffix
		if ra, rb := redact.Secrets(a), redact.Secrets(b); ra != rb {
			t.Fatalf("Redact shows the password:\n%q → %q\n%q → %q", a, ra, b, rb)
		}
	})
}

// The alphabets the fuzzer's strings are mapped into.
const (
	// fuzzUserinfoChars are what net/url accepts in user info (RFC 3986's
	// unreserved, sub-delims and ':', with '@' and '%').
	fuzzUserinfoChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:@%"
	// fuzzValueChars are a query or DSN value's: no space, quote, '&' or '#'.
	fuzzValueChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$()*+,;=:@/?"
	fuzzHostChars  = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._:[]"
	fuzzPathChars  = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$()*+,;=:@/?&"
	fuzzSchemeRest = "abcdefghijklmnopqrstuvwxyz0123456789+.-"
)

var fuzzSchemes = []string{"postgres", "postgresql", "s3", "file", "redis", "rediss", "https"}

// fuzzSecretParams are query and DSN parameters that hold a password, secret or token.
var fuzzSecretParams = []string{"password", "sslpassword", "aws_secret_access_key", "X-Amz-Security-Token", "session_token", "client_secret"}

// fuzzRedactText builds a URL (mode 0: password in the user info; 1: in a
// secret query parameter) or a keyword/value DSN (mode 2) holding pass;
// with other, every letter g–z of the password is changed to the next one
// (keeping its class, and every percent escape as valid as it was). ok is
// false for mode 0 when net/url does not read pass as the URL's password.
func fuzzRedactText(mode, scheme uint8, custom, user, pass, host, tail string, other bool) (string, bool) {
	if mode%3 == 0 {
		pass = fuzztext.Within(pass, fuzzUserinfoChars)
	} else {
		pass = fuzztext.Within(pass, fuzzValueChars)
	}
	if other {
		pass = fuzztext.Shift(pass)
	}
	sch := fuzzSchemes[int(scheme)%len(fuzzSchemes)]
	if int(scheme)%(len(fuzzSchemes)+1) == len(fuzzSchemes) && custom != "" {
		sch = fuzztext.Within(custom, fuzzSchemeRest) // any other scheme
		if c := sch[0]; c < 'a' || c > 'z' {
			sch = "x" + sch
		}
	}
	host = fuzztext.Within(host, fuzzHostChars)
	if tail = fuzztext.Within(tail, fuzzPathChars); tail != "" && tail[0] != '/' {
		tail = "/" + tail
	}
	switch mode % 3 {
	case 0:
		user = fuzztext.Within(user, strings.ReplaceAll(fuzzUserinfoChars, ":", ""))
		raw := sch + "://" + user + ":" + pass + "@" + host + tail
		u, err := url.Parse(raw)
		if err != nil || u.User == nil {
			return raw, false
		}
		p, set := u.User.Password()
		want, err := url.PathUnescape(pass)
		return raw, err == nil && set && p == want
	case 1:
		sep := "?"
		if strings.Contains(tail, "?") {
			sep = "&"
		}
		return sch + "://" + host + tail + sep + fuzzSecretParams[int(scheme)%len(fuzzSecretParams)] + "=" + pass, true
	default:
		return "host=" + host + " user=" + fuzztext.Within(user, fuzzValueChars) + " " + fuzzSecretParams[int(scheme)%len(fuzzSecretParams)] + "=" + pass + " dbname=" + fuzztext.Within(tail, fuzzValueChars), true
	}
}

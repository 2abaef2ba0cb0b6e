// Package redact is the one function that hides credentials in text the
// CLI prints, the worker logs and the stores put in their errors: URL
// passwords, and the values of password, secret and token settings of
// query strings and keyword/value DSNs.
//
// redact imports only the standard library.
package redact

import (
	"cmp"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Mask replaces a hidden value.
const Mask = "xxxxx"

// secretWord matches a setting's name that holds a credential.
const secretWord = `(?:password|passwd|secret|token|credential|signature|sslkey|access_?key)`

var (
	// urlPassword matches the user:password@ part of a URL anywhere in a
	// text (the whole user info is hidden). The password runs to the last '@' before whitespace, a double
	// quote or a backquote, so an unescaped '/', ':', '@' or "'" in it is
	// still caught (at worst a little more than the password is hidden);
	// the user name may hold "'" and '@' too, as net/url accepts.
	urlPassword = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.\-]*://([^\s/?#:"` + "`" + `]*):[^\s"` + "`" + `]*@`)
	// urlUser matches a URL's user info without a password: it may be a
	// token (https://TOKEN@host, s3://ACCESS_KEY@bucket), so it is hidden
	// whole.
	urlUser = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.\-]*://([^\s/?#:@"` + "`" + `]+)@`)
	// keyValue matches a credential setting of a keyword/value DSN or a
	// query string ("password=…", "sslpassword=…", "aws_secret_access_key=…",
	// "X-Amz-Signature=…"), its value quoted (with backslash escapes) or
	// bare.
	keyValue = regexp.MustCompile(`(?i)\b([\w-]*` + secretWord + `[\w-]*\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s&'"` + "`" + `#]+)`)
	// queryParam matches a query parameter whose name may be
	// percent-encoded ("p%61ssword=…"), checked once unescaped.
	queryParam  = regexp.MustCompile(`[?&]([^=&\s#"'` + "`" + `]+)=([^&\s#"'` + "`" + `]*)`)
	secretName  = regexp.MustCompile(`(?i)` + secretWord)
	encodedName = regexp.MustCompile(`%[0-9A-Fa-f]{2}`)
)

// Secrets returns s with every credential it can recognise replaced by
// Mask: the user info of any URL, user and password together
// (postgres://user:secret@host → postgres://xxxxx@host: a user name can be a
// token or an access key), and the
// values of password, secret, token, credential and signature settings of
// key=value DSNs and query strings (their names percent-encoded too). It
// works on any text, URL or not, and may hide more than needed, never less.
// All are found in s as given and hidden together, so that a value holding
// an '@' (postgres://h:5432/db?password=p@ss) or a URL password holding
// "password=" is hidden whole.
func Secrets(s string) string {
	var hide [][2]int // spans of s to hide
	for _, m := range urlPassword.FindAllStringSubmatchIndex(s, -1) {
		hide = append(hide, [2]int{m[2], m[1] - 1}) // the user info: between "://" and '@'
	}
	for _, m := range urlUser.FindAllStringSubmatchIndex(s, -1) {
		hide = append(hide, [2]int{m[2], m[3]})
	}
	for _, m := range keyValue.FindAllStringSubmatchIndex(s, -1) {
		hide = append(hide, [2]int{m[4], m[5]}) // the value
	}
	for _, m := range queryParam.FindAllStringSubmatchIndex(s, -1) {
		name := s[m[2]:m[3]]
		if !encodedName.MatchString(name) {
			continue // keyValue saw it as it is
		}
		if un, err := url.QueryUnescape(name); err != nil || secretName.MatchString(un) {
			hide = append(hide, [2]int{m[4], m[5]})
		}
	}
	if len(hide) == 0 {
		return s
	}
	slices.SortFunc(hide, func(a, b [2]int) int { return cmp.Compare(a[0], b[0]) })
	var b strings.Builder
	end := 0 // s[:end] is written
	for j := 0; j < len(hide); j++ {
		start, stop := hide[j][0], hide[j][1]
		for j+1 < len(hide) && hide[j+1][0] <= stop { // overlapping or touching spans are one
			stop = max(stop, hide[j+1][1])
			j++
		}
		if start < end {
			start = end
		}
		b.WriteString(s[end:start])
		b.WriteString(Mask)
		end = max(end, stop)
	}
	b.WriteString(s[end:])
	return b.String()
}

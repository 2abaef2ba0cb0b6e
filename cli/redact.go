package cli

import (
	"cmp"
	"regexp"
	"slices"
	"strings"
)

var (
	// urlPassword matches the user:password@ part of a URL anywhere in a
	// text. The password runs to the last '@' before whitespace, a double
	// quote or a backquote, so an unescaped '/', ':', '@' or "'" in it is
	// still caught (at worst a little more than the password is hidden);
	// the user name may hold "'" and '@' too, as net/url accepts.
	urlPassword = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://[^\s/?#:"` + "`" + `]*):[^\s"` + "`" + `]*@`)
	// kvPassword matches password, secret and token settings of key=value
	// DSNs and URL query strings ("password=…", "sslpassword=…",
	// "aws_secret_access_key=…", "session_token=…").
	kvPassword = regexp.MustCompile(`(?i)\b(\w*(?:password|secret|token)\w*\s*=\s*)('[^']*'|[^\s&'"` + "`" + `]+)`)
)

// Redact returns s with every password it can recognise replaced by "xxxxx":
// the password of any URL with user info (postgres://user:secret@host →
// postgres://user:xxxxx@host, as url.URL.Redacted writes it) and the values
// of password, secret and token settings of key=value DSNs and query
// strings. Everything the CLI prints on failure goes through it. Both are
// found in s as given and hidden together, so that a value holding an '@'
// (postgres://h:5432/db?password=p@ss) or a URL password holding
// "password=" is hidden whole.
func Redact(s string) string {
	var hide [][2]int // spans of s to hide
	for _, m := range urlPassword.FindAllStringSubmatchIndex(s, -1) {
		hide = append(hide, [2]int{m[3] + 1, m[1] - 1}) // between "user:" and '@'
	}
	for _, m := range kvPassword.FindAllStringSubmatchIndex(s, -1) {
		hide = append(hide, [2]int{m[4], m[5]}) // the value
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
		b.WriteString(s[end:start])
		b.WriteString("xxxxx")
		end = stop
	}
	b.WriteString(s[end:])
	return b.String()
}

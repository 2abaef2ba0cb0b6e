package cli

import "regexp"

var (
	// urlPassword matches the user:password@ part of a URL anywhere in a
	// text. The password runs to the last '@' before whitespace or a quote,
	// so an unescaped '/', ':' or '@' in it is still caught (at worst a
	// little more than the password is hidden).
	urlPassword = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://[^\s/?#@:"'` + "`" + `]*):[^\s"'` + "`" + `]*@`)
	// kvPassword matches password, secret and token settings of key=value
	// DSNs and URL query strings ("password=…", "sslpassword=…",
	// "aws_secret_access_key=…", "session_token=…").
	kvPassword = regexp.MustCompile(`(?i)\b(\w*(?:password|secret|token)\w*\s*=\s*)('[^']*'|[^\s&'"` + "`" + `]+)`)
)

// Redact returns s with every password it can recognise replaced by "xxxxx":
// the password of any URL with user info (postgres://user:secret@host →
// postgres://user:xxxxx@host, as url.URL.Redacted writes it) and the values
// of password, secret and token settings of key=value DSNs and query
// strings. Everything the CLI prints on failure goes through it.
func Redact(s string) string {
	s = urlPassword.ReplaceAllString(s, "${1}:xxxxx@")
	return kvPassword.ReplaceAllString(s, "${1}xxxxx")
}

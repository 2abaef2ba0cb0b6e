package cli

import "testing"

func TestRedact(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"postgres://user:secret@h/db", "postgres://user:xxxxx@h/db"},
		{"postgresql://user:secret@h:5432/db?sslmode=require", "postgresql://user:xxxxx@h:5432/db?sslmode=require"},
		{`dial "postgres://u:p%40ss@10.0.0.1:5432/x": refused`, `dial "postgres://u:xxxxx@10.0.0.1:5432/x": refused`},
		{"open s3://AKIA:se/cr:et@bucket/p failed", "open s3://AKIA:xxxxx@bucket/p failed"},
		{"postgres://u:p@ss@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://:secret@h/db", "postgres://:xxxxx@h/db"},
		{"a postgres://a:1@h and redis://b:2@k", "a postgres://a:xxxxx@h and redis://b:xxxxx@k"},
		{"host=db user=app password=secret dbname=x", "host=db user=app password=xxxxx dbname=x"},
		{"host=db password='sec ret' dbname=x", "host=db password=xxxxx dbname=x"},
		{"postgres://h/db?user=a&password=secret&sslmode=disable", "postgres://h/db?user=a&password=xxxxx&sslmode=disable"},
		{"sslpassword=secret", "sslpassword=xxxxx"},
		{"s3://b/p?region=x&aws_secret_access_key=abc&x_session_token=def", "s3://b/p?region=x&aws_secret_access_key=xxxxx&x_session_token=xxxxx"},
		// Nothing to hide.
		{"postgres://user@h/db", "postgres://user@h/db"},
		{"postgres://h:5432/db", "postgres://h:5432/db"},
		{"file:///srv/cases: permission denied", "file:///srv/cases: permission denied"},
		{"contact user:me@example.com", "contact user:me@example.com"},
		{"", ""},
	} {
		if got := Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

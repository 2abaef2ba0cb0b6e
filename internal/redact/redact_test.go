package redact_test

import (
	"testing"

	"github.com/pyrula/caseworker/internal/redact"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"postgres://user:secret@h/db", "postgres://xxxxx@h/db"},
		{"postgresql://user:secret@h:5432/db?sslmode=require", "postgresql://xxxxx@h:5432/db?sslmode=require"},
		{`dial "postgres://u:p%40ss@10.0.0.1:5432/x": refused`, `dial "postgres://xxxxx@10.0.0.1:5432/x": refused`},
		{"open s3://AKIA:se/cr:et@bucket/p failed", "open s3://xxxxx@bucket/p failed"},
		{"postgres://u:p@ss@h/db", "postgres://xxxxx@h/db"},
		{"postgres://:secret@h/db", "postgres://xxxxx@h/db"},
		{"a postgres://a:1@h and redis://b:2@k", "a postgres://xxxxx@h and redis://xxxxx@k"},
		{"host=db user=app password=secret dbname=x", "host=db user=app password=xxxxx dbname=x"},
		{"host=db password='sec ret' dbname=x", "host=db password=xxxxx dbname=x"},
		{"postgres://h/db?user=a&password=secret&sslmode=disable", "postgres://h/db?user=a&password=xxxxx&sslmode=disable"},
		{"sslpassword=secret", "sslpassword=xxxxx"},
		{"s3://b/p?region=x&aws_secret_access_key=abc&x_session_token=def", "s3://b/p?region=x&aws_secret_access_key=xxxxx&x_session_token=xxxxx"},
		// What the stores hide in their errors.
		{"postgres://u:secret@host:5432/db", "postgres://xxxxx@host:5432/db"},
		{"postgres://u:p@ss/w?rd@host/db", "postgres://xxxxx@host/db"},
		{"postgres://host/db?sslmode=require&password=secret", "postgres://host/db?sslmode=require&password=xxxxx"},
		{"s3://KEY:secret@bucket/p?region=eu&aws_secret_access_key=secret#f", "s3://xxxxx@bucket/p?region=eu&aws_secret_access_key=xxxxx#f"},
		{"s3://bucket/p?X-Amz-Signature=abc&X-Amz-Security-Token=def", "s3://bucket/p?X-Amz-Signature=xxxxx&X-Amz-Security-Token=xxxxx"},
		{"s3://bucket/p?X-Amz-Credential=AKIA%2F2026&region=x", "s3://bucket/p?X-Amz-Credential=xxxxx&region=x"},
		{"postgres://h/db?p%61ssword=secret&sslmode=disable", "postgres://h/db?p%61ssword=xxxxx&sslmode=disable"},
		{"host=h dbname=d password=secret sslmode=require", "host=h dbname=d password=xxxxx sslmode=require"},
		{"host=h password='a b\\' c' user=u", "host=h password=xxxxx user=u"},
		{"host=h passwd=secret sslkey=/k/client.key", "host=h passwd=xxxxx sslkey=xxxxx"},
		// Nothing to hide.
		{"mailto:me@example.com", "mailto:me@example.com"},
		{"file:///srv/cases", "file:///srv/cases"},
		{"memory:", "memory:"},
		{"/srv/cases", "/srv/cases"},
		{"idempotency_key=abc", "idempotency_key=abc"},
		{"https://ghp_token123@github.com/x", "https://xxxxx@github.com/x"},
		{"s3://AKIAEXAMPLE@bucket/prefix", "s3://xxxxx@bucket/prefix"},
		{"postgres://h:5432/db", "postgres://h:5432/db"},
		{"file:///srv/cases: permission denied", "file:///srv/cases: permission denied"},
		{"contact user:me@example.com", "contact user:me@example.com"},
		{"", ""},
	} {
		if got := redact.Secrets(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

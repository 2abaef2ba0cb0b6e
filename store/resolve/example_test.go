package resolve_test

import (
	"fmt"

	"github.com/pyrula/caseworker/store/resolve"
)

func ExampleIdentity() {
	for _, u := range []string{
		"memory:",
		"file:///srv/pyrula/cases/",
		"postgresql://pyrula:secret@DB.internal/archive?sslmode=require",
		"s3://cases/ci/?region=eu-west-1&endpoint_url=http://127.0.0.1:7070",
	} {
		id, err := resolve.Identity(u)
		fmt.Println(id, err)
	}
	_, err := resolve.Identity("s3://KEY:secret@cases/ci")
	fmt.Println(err)
	// Output:
	// memory: <nil>
	// file:///srv/pyrula/cases <nil>
	// postgres://db.internal:5432/archive <nil>
	// s3://cases/ci <nil>
	// invalid fixture store URL "s3://xxxxx@cases/ci": an s3 store URL takes no credentials: they come from the AWS SDK chain (environment, profile, role)
}

func ExampleURL() {
	getenv := func(k string) string {
		return map[string]string{"PYRULA_FIXTURE_STORE": "/srv/pyrula/cases"}[k]
	}
	fromEnv, _ := resolve.URL("", getenv)
	fromFlag, _ := resolve.URL("memory:", getenv)
	_, err := resolve.URL("", func(string) string { return "" })
	fmt.Println(fromEnv)
	fmt.Println(fromFlag)
	fmt.Println(err)
	// Output:
	// /srv/pyrula/cases
	// memory:
	// no_fixture_store: no fixture store configured: pass --fixture-store URL, or set PYRULA_FIXTURE_STORE (memory:, file:///abs/path or a directory, postgres://…, s3://bucket/prefix) or PYRULA_POSTGRES_DSN
}

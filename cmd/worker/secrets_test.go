package main_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/resolve"
)

// TestNoSecretLeaks runs a worker with every secret it can be given set: a
// Valkey password (an ACL user of its own, in PYRULA_VALKEY_USERNAME and
// PYRULA_VALKEY_PASSWORD as the Deployment sets them), a PostgreSQL password in
// PYRULA_POSTGRES_DSN (the archive), S3 keys (the fixture store on the test
// gateway) and model API keys (OpenAI, answered by a local server that
// checks the key, and Anthropic, unused). It records an agent's run with
// live model calls, saves it, runs the case with another model, and sends a
// refused message, its traces exported to a local OTLP collector that
// needs a token (OTEL_EXPORTER_OTLP_HEADERS); then no secret appears in the
// worker's logs, the exported spans, its metrics, its replies, events,
// journals and records in Valkey, the archive's rows, the stored bundles,
// or the help and db migrate output.
func TestNoSecretLeaks(t *testing.T) {
	vurl := testenv.ValkeyURL(t)
	bucket := testenv.FreshS3Bucket(t, "pyrula-secrets")
	dsn := testenv.FreshPostgresDatabase(t)
	suffix := randomHex(t)
	secrets := map[string]string{
		"the Valkey password":       "vk-pass-" + suffix,
		"the PostgreSQL password":   "pg-pass-" + suffix,
		"the S3 secret key":         bucket.Env.SecretKey,
		"the OpenAI API key":        "sk-openai-" + suffix,
		"the Anthropic API key":     "sk-ant-" + suffix,
		"the S3 access key's pair":  bucket.Env.AccessKey + ":" + bucket.Env.SecretKey,
		"the OTLP exporter's token": "otlp-token-" + suffix,
	}
	spans := newCollector(t)

	// The Valkey user the worker logs in as.
	admin := testenv.ValkeyClientAt(t, vurl, "")
	user := "pyrula_leak_" + suffix
	if err := admin.Do(t.Context(), admin.B().AclSetuser().Username(user).Rule("on", ">"+secrets["the Valkey password"], "~*", "&*", "+@all").Build()).Error(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), admin.B().AclDeluser().Username(user).Build()) })
	pu, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	// The test server trusts loopback: the password is sent and ignored.
	pu.User = url.UserPassword(pu.User.Username(), secrets["the PostgreSQL password"])

	var modelCalls, badKeys atomic.Int64
	models := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+secrets["the OpenAI API key"] {
			badKeys.Add(1)
			http.Error(w, "bad key", http.StatusUnauthorized)
			return
		}
		modelCalls.Add(1)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Refund approved."},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`)
	}))
	t.Cleanup(models.Close)

	ns := testenv.UniqueName(t, "wsecrets")
	storeURL := bucket.StoreURL("cases")
	env := workerEnv(vurl, ns, "a", "PYRULA_VALKEY_USERNAME="+user, "PYRULA_VALKEY_PASSWORD="+secrets["the Valkey password"],
		"PYRULA_POSTGRES_DSN="+pu.String(), "PYRULA_FIXTURE_STORE="+storeURL,
		"AWS_ACCESS_KEY_ID="+bucket.Env.AccessKey, "AWS_SECRET_ACCESS_KEY="+bucket.Env.SecretKey,
		"PYRULA_LLM_REF=openai", "OPENAI_API_KEY="+secrets["the OpenAI API key"], "OPENAI_BASE_URL="+models.URL+"/v1",
		"ANTHROPIC_API_KEY="+secrets["the Anthropic API key"],
		"OTEL_EXPORTER_OTLP_ENDPOINT="+spans.URL, "OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20"+secrets["the OTLP exporter's token"],
		"OTEL_BSP_SCHEDULE_DELAY=50")

	outputs := map[string]string{}
	migrate := run(t, 2*time.Minute, env, "db", "migrate")
	if migrate.code != 0 {
		t.Fatalf("db migrate\n%s", migrate)
	}
	outputs["db migrate output"] = migrate.stdout + migrate.stderr
	for _, arg := range []string{"--help", "help"} {
		r := run(t, time.Minute, env, arg)
		outputs["worker "+arg] = r.stdout + r.stderr
	}

	d := startReady(t, env...)
	client := testenv.ValkeyClientAt(t, vurl, ns)
	if list, err := admin.Do(t.Context(), admin.B().ClientList().Build()).ToString(); err != nil || !strings.Contains(list, "user="+user+" ") {
		t.Fatalf("no Valkey connection logged in as %s (%v)", user, err)
	}
	cases := ns + ":case-messages"
	replies := ns + ":case-replies"
	sendAll(t, client, cases, []any{envelope{MessageID: "agent", Type: "start_run", Body: map[string]any{"target_name": "support_agent"}}})
	got, last := readReplies(t, client, replies, "0", 1, 30*time.Second)
	runID := runResultID(got[0])
	if runID == "" {
		t.Fatalf("start_run: %+v", got[0])
	}
	waitRunsFinished(t, client, ns, []string{runID}, 30*time.Second)
	j := readJournal(t, client, ns, runID)
	sendAll(t, client, cases, []any{envelope{MessageID: "save", Type: "save_case", Body: map[string]any{"target_name": "support_agent", "run_id": runID, "fork_after_seq": 2}}})
	got, last = readReplies(t, client, replies, last, 1, 30*time.Second)
	hash := fixtureHashOf(got[0])
	if hash == "" {
		t.Fatalf("save_case: %+v (the run: %s)", got[0], j)
	}
	sendAll(t, client, cases, []any{
		envelope{MessageID: "whatif", Type: "run_case", Body: map[string]any{"target_name": "support_agent",
			"source": map[string]any{"bundle": map[string]any{"fixture_hash": hash}}, "options": map[string]any{"model": "gpt-other", "live_budget": 10}}},
		envelope{MessageID: "refused", Type: "run_case", Body: map[string]any{"target_name": "support_agent", "options": map[string]any{"model": 7}}},
	})
	got, _ = readReplies(t, client, replies, last, 2, 30*time.Second)
	byID := byMessageID(got)
	caseRun := runResultID(byID["whatif"])
	if caseRun == "" || byID["refused"].Status != "refused" {
		t.Fatalf("run_case and the refused message: %+v", got)
	}
	waitRunsFinished(t, client, ns, []string{caseRun}, 30*time.Second)
	if modelCalls.Load() < 2 || badKeys.Load() != 0 {
		t.Fatalf("the model server had %d calls with the key and %d without: the key was not used as it should be", modelCalls.Load(), badKeys.Load())
	}
	_, metrics, err := d.get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	outputs["/metrics"] = metrics
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not stop within 30s of SIGTERM")
	}
	outputs["the worker's logs"] = d.logs()
	outputs["the exported spans"] = spans.dump()
	spans.mu.Lock()
	if auth := spans.auth; len(auth) != 1 || auth["Bearer "+secrets["the OTLP exporter's token"]] == 0 {
		t.Errorf("the exports' Authorization headers: %d kinds, not the one OTEL_EXPORTER_OTLP_HEADERS gives", len(auth))
	}
	spans.mu.Unlock()
	outputs["Valkey"] = dumpNamespace(t, client, ns)
	outputs["the archive"] = dumpDatabase(t, dsn)
	outputs["the bundles"] = dumpBundles(t, storeURL, bucket)
	for what, text := range outputs {
		if strings.TrimSpace(text) == "" {
			t.Errorf("%s is empty: nothing was checked there", what)
		}
	}
	if !strings.Contains(outputs["the archive"], runID) || !strings.Contains(outputs["the bundles"], "support_agent") {
		t.Errorf("the archive or the bundles lack the run: nothing of it was checked there")
	}
	for name, secret := range secrets {
		for what, text := range outputs {
			if i := strings.Index(text, secret); i >= 0 {
				t.Errorf("%s appears in %s: …%s…", name, what, text[max(i-80, 0):min(i+len(secret)+20, len(text))])
			}
		}
	}
}

func randomHex(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// dumpNamespace is every key of namespace ns and its value, as text.
func dumpNamespace(t *testing.T, c valkey.Client, ns string) string {
	t.Helper()
	ctx := t.Context()
	var b strings.Builder
	keys, err := testenv.ScanKeys(ctx, c, ns+":*")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		typ, err := c.Do(ctx, c.B().Type().Key(k).Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		var v any
		switch typ {
		case "string":
			v, err = c.Do(ctx, c.B().Get().Key(k).Build()).ToString()
		case "hash":
			v, err = c.Do(ctx, c.B().Hgetall().Key(k).Build()).AsStrMap()
		case "set":
			v, err = c.Do(ctx, c.B().Smembers().Key(k).Build()).AsStrSlice()
		case "zset":
			v, err = c.Do(ctx, c.B().Zrange().Key(k).Min("0").Max("-1").Build()).AsStrSlice()
		case "stream":
			v, err = c.Do(ctx, c.B().Xrange().Key(k).Start("-").End("+").Build()).AsXRange()
		}
		if err != nil && !valkey.IsValkeyNil(err) {
			t.Fatalf("read %s (%s): %v", k, typ, err)
		}
		fmt.Fprintf(&b, "%s %s %v\n", k, typ, v)
	}
	return b.String()
}

// dumpDatabase is every row of every table of the database at dsn, as
// JSON text.
func dumpDatabase(t *testing.T, dsn string) string {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM information_schema.tables
		WHERE table_schema NOT IN ('pg_catalog', 'information_schema') AND table_type = 'BASE TABLE'`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, table := range tables {
		rows, err := conn.Query(ctx, "SELECT row_to_json(t)::text FROM "+table+" t")
		if err != nil {
			t.Fatal(err)
		}
		texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s\n%s\n", table, strings.Join(texts, "\n"))
	}
	return b.String()
}

// dumpBundles is every bundle of the store at storeURL, as its canonical
// JSON, read with the test's own credentials.
func dumpBundles(t *testing.T, storeURL string, bucket testenv.S3Bucket) string {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", bucket.Env.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", bucket.Env.SecretKey)
	st, err := resolve.Open(t.Context(), storeURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var b strings.Builder
	for info, err := range st.List(t.Context()) {
		if err != nil {
			t.Fatal(err)
		}
		rc, err := store.Get(t.Context(), st, info.Hash)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		b.Write(raw)
		b.WriteByte('\n')
	}
	return b.String()
}

package worker

import (
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/valkeyconn"
	"github.com/pyrula/caseworker/journal"
	jresolve "github.com/pyrula/caseworker/journal/resolve"
)

// EnvPrefix is the prefix of every variable of Config.
const EnvPrefix = "PYRULA"

// Defaults of Config's fields: what Defaults fills an empty field with.
// The default tags of Config, which `worker --help` lists, say the same
// (a test ties each tag to its constant). PYRULA_NAMESPACE and
// PYRULA_COMPLETED_TTL default to journal.DefaultNamespace and
// journal.DefaultCompletedTTL; the streams' defaults derive from the
// namespace, the consumer name's from the host name.
const (
	DefaultValkeyURL           = jresolve.DefaultValkeyURL
	DefaultConsumerGroup       = "case-workers"
	DefaultConcurrency         = 64
	DefaultSaveConcurrency     = 4
	DefaultRunConcurrency      = 4
	DefaultMaxDeliveries       = 5
	DefaultClaimIdle           = 30 * time.Second
	DefaultRunLease            = 30 * time.Second
	DefaultShutdownGrace       = 30 * time.Second
	DefaultWaitTimeout         = 5 * time.Second
	DefaultMaxMessageBytes     = 1 << 20
	DefaultIdempotencyTTL      = 7 * 24 * time.Hour
	DefaultMaintenanceInterval = time.Minute
	DefaultConsumerExpiry      = 24 * time.Hour
	DefaultHTTPAddr            = ":9090"
	DefaultLogLevel            = "info"
	DefaultLogFormat           = "json"
)

// Config is the worker's configuration: one variable per field, named
// PYRULA_<envconfig tag>, read by LoadConfig (docs/worker.md, "Configuration"). Zero values
// of optional fields mean their defaults (Defaults fills them in).
type Config struct {
	// FixtureStore is PYRULA_FIXTURE_STORE: the fixture store URL, resolved
	// exactly as the CLI does (then PYRULA_POSTGRES_DSN); none means
	// save_case and delete_case_bundle are refused no_fixture_store.
	FixtureStore string `envconfig:"FIXTURE_STORE" desc:"fixture store URL (memory:, a directory, postgres://, s3://); default PYRULA_POSTGRES_DSN"`
	// PostgresDSN is PYRULA_POSTGRES_DSN: the journal archive, and the
	// fixture store when PYRULA_FIXTURE_STORE is unset.
	PostgresDSN string `envconfig:"POSTGRES_DSN" desc:"PostgreSQL DSN of the run archive (and the fixture store when PYRULA_FIXTURE_STORE is unset)"`
	// ValkeyURL is PYRULA_VALKEY_URL: the Valkey server (redis:// or rediss://).
	ValkeyURL string `envconfig:"VALKEY_URL" default:"redis://127.0.0.1:6379/0" desc:"Valkey URL (redis:// or rediss://)"`
	// ValkeyUsername and ValkeyPassword are PYRULA_VALKEY_USERNAME and
	// PYRULA_VALKEY_PASSWORD: the ACL user and password, for a URL that
	// carries none (so that the URL can sit in plain configuration and only
	// these in a Secret).
	ValkeyUsername string `envconfig:"VALKEY_USERNAME" desc:"Valkey ACL user, for a URL without credentials"`
	ValkeyPassword string `envconfig:"VALKEY_PASSWORD" desc:"Valkey password, for a URL without credentials"`
	// ValkeyCAFile is PYRULA_VALKEY_CA_FILE: a PEM file of the certificate
	// authorities that sign a rediss:// server's certificate (a private
	// CA), trusted besides the system's.
	ValkeyCAFile string `envconfig:"VALKEY_CA_FILE" desc:"PEM file of a private CA that signs the rediss:// server's certificate"`
	// ValkeyCertFile and ValkeyKeyFile are PYRULA_VALKEY_CERT_FILE and
	// PYRULA_VALKEY_KEY_FILE: the client certificate and key a rediss://
	// server asks for (mutual TLS); both or neither.
	ValkeyCertFile string `envconfig:"VALKEY_CERT_FILE" desc:"PEM file of the client certificate for a rediss:// server that asks for one (mutual TLS)"`
	ValkeyKeyFile  string `envconfig:"VALKEY_KEY_FILE" desc:"PEM file of the client certificate's private key"`
	// Namespace is PYRULA_NAMESPACE: the prefix of every key.
	Namespace string `envconfig:"NAMESPACE" default:"pyrula" desc:"key namespace"`
	// CompletedTTL is PYRULA_COMPLETED_TTL: how long finished runs stay in Valkey.
	CompletedTTL time.Duration `envconfig:"COMPLETED_TTL" default:"24h" desc:"how long a finished run's keys live in Valkey"`
	// CaseStream is PYRULA_CASE_STREAM: the message stream (default <ns>:case-messages).
	CaseStream string `envconfig:"CASE_STREAM" desc:"message stream (default <namespace>:case-messages)"`
	// ReplyStream is PYRULA_REPLY_STREAM: replies of messages without a
	// reply_to (default <ns>:case-replies).
	ReplyStream string `envconfig:"REPLY_STREAM" desc:"reply stream for messages without reply_to (default <namespace>:case-replies)"`
	// ConsumerGroup is PYRULA_CONSUMER_GROUP.
	ConsumerGroup string `envconfig:"CONSUMER_GROUP" default:"case-workers" desc:"consumer group of the message stream"`
	// ConsumerName is PYRULA_CONSUMER_NAME: stable per pod (default the host name).
	ConsumerName string `envconfig:"CONSUMER_NAME" desc:"consumer name, stable per pod (default the host name)"`
	// Concurrency is PYRULA_CONCURRENCY: messages handled at once, and the
	// most message entries one worker holds pending; 0 means the default.
	// Handling a message is mostly waiting on Valkey, so many in flight pay;
	// the memory-heavy save_case has its own limit, SaveConcurrency.
	Concurrency int `envconfig:"CONCURRENCY" default:"64" desc:"messages handled (and held pending) at once; 0 means the default"`
	// SaveConcurrency is PYRULA_SAVE_CONCURRENCY: save_case messages that
	// build a bundle at once (each keeps a bundle from 16 MiB in a file in
	// TMPDIR that reserves 512 MiB of disk, under 1× the bundle in memory);
	// the others wait, holding their message slot. 0 means the default.
	SaveConcurrency int `envconfig:"SAVE_CONCURRENCY" default:"4" desc:"save_case messages building a bundle at once (each keeps a bundle from 16 MiB in a file in TMPDIR that reserves 512 MiB, and under 1x its size in memory); 0 means the default"`
	// RunConcurrency is PYRULA_RUN_CONCURRENCY: runs executed at once, and
	// the most runs entries one worker holds pending; 0 means the default.
	RunConcurrency int `envconfig:"RUN_CONCURRENCY" default:"4" desc:"runs executed (and held pending) at once; 0 means the default"`
	// MaxDeliveries is PYRULA_MAX_DELIVERIES: deliveries before a message
	// is dead-lettered, and transient failures before a run is.
	MaxDeliveries int `envconfig:"MAX_DELIVERIES" default:"5" desc:"deliveries of a failing message (failures of a run) before it is dead-lettered"`
	// ClaimIdle is PYRULA_CLAIM_IDLE: the idle time after which a pending
	// entry is reclaimed; it doubles with each delivery (capped at 32×).
	ClaimIdle time.Duration `envconfig:"CLAIM_IDLE" default:"30s" desc:"idle time before a pending entry is reclaimed; doubles per delivery"`
	// RunLease is PYRULA_RUN_LEASE: the lease of a run being executed,
	// renewed every third of it; a run whose worker died is resumed
	// elsewhere once its lease lapsed.
	RunLease time.Duration `envconfig:"RUN_LEASE" default:"30s" desc:"lease of a run being executed; renewed every third of it"`
	// ShutdownGrace is PYRULA_SHUTDOWN_GRACE: how long in-flight messages
	// may take to finish on SIGTERM.
	ShutdownGrace time.Duration `envconfig:"SHUTDOWN_GRACE" default:"30s" desc:"time in-flight messages get to finish on shutdown"`
	// WaitReplicas is PYRULA_WAIT_REPLICAS: replicas that must acknowledge
	// the idempotency record (WAIT) before the reply and ack; 0 skips.
	WaitReplicas int `envconfig:"WAIT_REPLICAS" default:"0" desc:"replicas that must acknowledge writes before a reply (WAIT); 0 skips"`
	// WaitTimeout is PYRULA_WAIT_TIMEOUT: how long one WAIT blocks for the
	// replicas; when fewer acknowledged by then, the delivery fails
	// transiently and the message stays pending (retried, then
	// dead-lettered). Used only with PYRULA_WAIT_REPLICAS.
	WaitTimeout time.Duration `envconfig:"WAIT_TIMEOUT" default:"5s" desc:"how long a WAIT blocks for the replicas before the delivery fails and is retried"`
	// MaxMessageBytes is PYRULA_MAX_MESSAGE_BYTES: larger entries are refused unread.
	MaxMessageBytes int `envconfig:"MAX_MESSAGE_BYTES" default:"1048576" desc:"largest message entry accepted, in bytes"`
	// IdempotencyTTL is PYRULA_IDEMPOTENCY_TTL: how long a message's reply
	// is kept to answer duplicates.
	IdempotencyTTL time.Duration `envconfig:"IDEMPOTENCY_TTL" default:"168h" desc:"how long a message id's reply is kept for duplicates"`
	// MaintenanceInterval is PYRULA_MAINTENANCE_INTERVAL: how often a worker
	// trims the message and runs streams of the entries every group acked,
	// and deletes consumers idle past ConsumerExpiry with nothing pending.
	MaintenanceInterval time.Duration `envconfig:"MAINTENANCE_INTERVAL" default:"1m" desc:"how often acked entries are trimmed from the streams and dead consumers deleted"`
	// ConsumerExpiry is PYRULA_CONSUMER_EXPIRY: a consumer of the worker's
	// groups idle this long with no pending entries is deleted.
	ConsumerExpiry time.Duration `envconfig:"CONSUMER_EXPIRY" default:"24h" desc:"idle time after which a consumer without pending entries is deleted"`
	// HTTPAddr is PYRULA_HTTP_ADDR: /healthz, /readyz and /metrics.
	HTTPAddr string `envconfig:"HTTP_ADDR" default:":9090" desc:"listen address of /healthz, /readyz and /metrics"`
	// LogLevel is PYRULA_LOG_LEVEL: debug, info, warn or error.
	LogLevel string `envconfig:"LOG_LEVEL" default:"info" desc:"debug, info, warn or error"`
	// LLMRef is PYRULA_LLM_REF: the model client of agents' live model
	// calls when a message names none (llm_ref): anthropic (configured
	// from ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL), openai (OPENAI_API_KEY,
	// OPENAI_BASE_URL) or a client the binary registered; empty means each
	// agent's own client.
	LLMRef string `envconfig:"LLM_REF" desc:"model client of live model calls: anthropic, openai or one the binary registered; empty: the agent's own"`
	// LogFormat is PYRULA_LOG_FORMAT: json or console.
	LogFormat string `envconfig:"LOG_FORMAT" default:"json" desc:"json or console"`
}

// LoadConfig reads Config from the process environment and validates it:
// LoadConfigFrom(os.Getenv).
func LoadConfig() (Config, error) { return LoadConfigFrom(os.Getenv) }

// LoadConfigFrom reads Config through getenv (PYRULA_<envconfig tag> for
// each field; an empty value counts as unset), fills in the defaults
// (Defaults) and validates it. A bad value is a *SettingError
// naming the variable and its type, never its value (it could be a
// secret).
func LoadConfigFrom(getenv func(string) string) (Config, error) {
	var c Config
	v := reflect.ValueOf(&c).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		key := EnvPrefix + "_" + f.Tag.Get("envconfig")
		raw := getenv(key)
		if raw == "" {
			continue
		}
		if err := setField(v.Field(i), raw); err != nil {
			return Config{}, &SettingError{Variable: key, Problem: "not a valid " + f.Type.String()}
		}
	}
	c, err := c.Defaults()
	if err != nil {
		return Config{}, err
	}
	return c, c.Validate()
}

// setField sets a field of Config (a string, an int or a time.Duration)
// from its variable's text.
func setField(f reflect.Value, raw string) error {
	switch {
	case f.Type() == reflect.TypeFor[time.Duration]():
		d, err := time.ParseDuration(raw)
		if err != nil {
			return err
		}
		f.SetInt(int64(d))
	case f.Kind() == reflect.String:
		f.SetString(raw)
	case f.Kind() == reflect.Int:
		n, err := strconv.ParseInt(raw, 0, strconv.IntSize)
		if err != nil {
			return err
		}
		f.SetInt(n)
	default:
		return fmt.Errorf("worker: config field of type %s", f.Type())
	}
	return nil
}

// Defaults returns c with every empty optional field set to its default,
// including the ones derived from the namespace and the host name.
func (c Config) Defaults() (Config, error) {
	if c.ValkeyURL == "" {
		c.ValkeyURL = DefaultValkeyURL
	}
	if c.Namespace == "" {
		c.Namespace = journal.DefaultNamespace
	}
	if c.CompletedTTL == 0 {
		c.CompletedTTL = journal.DefaultCompletedTTL
	}
	if c.CaseStream == "" {
		c.CaseStream = c.Namespace + ":case-messages"
	}
	if c.ReplyStream == "" {
		c.ReplyStream = c.Namespace + ":case-replies"
	}
	if c.ConsumerGroup == "" {
		c.ConsumerGroup = DefaultConsumerGroup
	}
	if c.ConsumerName == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			return c, &SettingError{Variable: EnvPrefix + "_CONSUMER_NAME", Problem: "not set and the host name is unknown"}
		}
		c.ConsumerName = host
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.SaveConcurrency == 0 {
		c.SaveConcurrency = DefaultSaveConcurrency
	}
	if c.RunConcurrency == 0 {
		c.RunConcurrency = DefaultRunConcurrency
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = DefaultMaxDeliveries
	}
	if c.ClaimIdle == 0 {
		c.ClaimIdle = DefaultClaimIdle
	}
	if c.RunLease == 0 {
		c.RunLease = DefaultRunLease
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	if c.WaitTimeout == 0 {
		c.WaitTimeout = DefaultWaitTimeout
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.IdempotencyTTL == 0 {
		c.IdempotencyTTL = DefaultIdempotencyTTL
	}
	if c.MaintenanceInterval == 0 {
		c.MaintenanceInterval = DefaultMaintenanceInterval
	}
	if c.ConsumerExpiry == 0 {
		c.ConsumerExpiry = DefaultConsumerExpiry
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.LogLevel == "" {
		c.LogLevel = DefaultLogLevel
	}
	if c.LogFormat == "" {
		c.LogFormat = DefaultLogFormat
	}
	return c, nil
}

// valkeySettings are the Valkey connection's settings besides the URL.
func (c Config) valkeySettings() valkeyconn.Settings {
	return valkeyconn.Settings{
		Username: c.ValkeyUsername, Password: c.ValkeyPassword,
		CAFile: c.ValkeyCAFile, CertFile: c.ValkeyCertFile, KeyFile: c.ValkeyKeyFile,
	}
}

// SettingError is a setting of the worker's configuration that is wrong:
// the variable and what is wrong with it (never its value, which may be a
// secret).
type SettingError struct {
	// Variable is the PYRULA_ variable, or "" when the problem (as the
	// Valkey connection's settings) names the variables itself.
	Variable string
	// Problem says what is wrong.
	Problem string
}

// Error is "invalid setting PYRULA_X: problem".
func (e *SettingError) Error() string {
	if e.Variable == "" {
		return "invalid setting: " + e.Problem
	}
	return "invalid setting " + e.Variable + ": " + e.Problem
}

// Validate checks a Config after Defaults; the error is a *SettingError
// naming the first variable that is wrong.
func (c Config) Validate() error {
	bad := func(name, format string, args ...any) error {
		return &SettingError{Variable: EnvPrefix + "_" + name, Problem: fmt.Sprintf(format, args...)}
	}
	if err := journal.CheckNamespace(c.Namespace); err != nil {
		return bad("NAMESPACE", "%v", err)
	}
	if c.ValkeyURL != "" {
		if _, err := valkey.ParseURL(c.ValkeyURL); err != nil {
			return bad("VALKEY_URL", "not a redis://, rediss:// or unix:// URL")
		}
		if _, err := valkeyconn.Options(c.ValkeyURL, c.valkeySettings()); err != nil {
			return &SettingError{Problem: err.Error()}
		}
	}
	positiveDurations := []struct {
		name string
		d    time.Duration
	}{
		{"COMPLETED_TTL", c.CompletedTTL}, {"CLAIM_IDLE", c.ClaimIdle}, {"RUN_LEASE", c.RunLease},
		{"SHUTDOWN_GRACE", c.ShutdownGrace}, {"IDEMPOTENCY_TTL", c.IdempotencyTTL}, {"WAIT_TIMEOUT", c.WaitTimeout},
		{"MAINTENANCE_INTERVAL", c.MaintenanceInterval}, {"CONSUMER_EXPIRY", c.ConsumerExpiry},
	}
	for _, p := range positiveDurations {
		if p.d <= 0 {
			return bad(p.name, "must be a positive duration such as 30s")
		}
	}
	positiveInts := []struct {
		name string
		n    int
	}{
		{"CONCURRENCY", c.Concurrency}, {"SAVE_CONCURRENCY", c.SaveConcurrency}, {"RUN_CONCURRENCY", c.RunConcurrency},
		{"MAX_DELIVERIES", c.MaxDeliveries}, {"MAX_MESSAGE_BYTES", c.MaxMessageBytes},
	}
	for _, p := range positiveInts {
		if p.n <= 0 {
			return bad(p.name, "must be a positive integer")
		}
	}
	if c.WaitReplicas < 0 {
		return bad("WAIT_REPLICAS", "must not be negative")
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return bad("LOG_LEVEL", "%q is not debug, info, warn or error", c.LogLevel)
	}
	switch c.LogFormat {
	case "json", "console":
	default:
		return bad("LOG_FORMAT", "%q is not json or console", c.LogFormat)
	}
	if c.CaseStream == c.ReplyStream {
		return bad("REPLY_STREAM", "must differ from PYRULA_CASE_STREAM")
	}
	return nil
}

// usageGroups are the headings Usage lists Config's variables under, with
// the variables (envconfig names, without the prefix) of each, in order,
// and notes printed after a group's variables. A variable in no group is
// listed under "Other".
var usageGroups = []struct {
	title string
	keys  []string
	notes []string
}{
	{title: "Valkey", keys: []string{"VALKEY_URL", "VALKEY_USERNAME", "VALKEY_PASSWORD", "VALKEY_CA_FILE", "VALKEY_CERT_FILE", "VALKEY_KEY_FILE", "NAMESPACE", "COMPLETED_TTL", "WAIT_REPLICAS", "WAIT_TIMEOUT"}},
	{title: "Message stream and consumers", keys: []string{"CASE_STREAM", "REPLY_STREAM", "CONSUMER_GROUP",
		"CONSUMER_NAME", "CONCURRENCY", "SAVE_CONCURRENCY", "MAX_MESSAGE_BYTES", "MAX_DELIVERIES", "CLAIM_IDLE",
		"IDEMPOTENCY_TTL", "MAINTENANCE_INTERVAL", "CONSUMER_EXPIRY"}},
	{title: "Runs (<namespace>:runs, consumer group run-workers)", keys: []string{"RUN_CONCURRENCY", "RUN_LEASE"}},
	{title: "Fixture store and archive", keys: []string{"FIXTURE_STORE", "POSTGRES_DSN"}},
	{title: "HTTP, logs and shutdown", keys: []string{"HTTP_ADDR", "LOG_LEVEL", "LOG_FORMAT", "SHUTDOWN_GRACE"}},
	{title: "Model clients", keys: []string{"LLM_REF"}, notes: []string{
		"anthropic reads ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL; openai reads OPENAI_API_KEY and OPENAI_BASE_URL.",
	}},
	{title: "Traces (OpenTelemetry, off by default)", notes: []string{
		"on when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, or OTEL_TRACES_EXPORTER=otlp;",
		"exported over OTLP http/protobuf; OTEL_SERVICE_NAME (default pyrula-worker), OTEL_RESOURCE_ATTRIBUTES,",
		"OTEL_TRACES_SAMPLER, OTEL_EXPORTER_OTLP_HEADERS and OTEL_BSP_* as every OpenTelemetry SDK reads them;",
		"OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turns them off.",
	}},
}

// Usage writes every variable of Config with its type, default and
// description, grouped by what it configures, as `worker --help` prints
// them: under each heading one tab-separated row per variable (KEY, TYPE,
// DEFAULT, REQUIRED, DESCRIPTION, as envconfig's table).
func Usage(w io.Writer) error {
	var c Config
	var rows strings.Builder
	const row = "{{range .}}{{usage_key .}}\t{{usage_type .}}\t{{usage_default .}}\t{{usage_required .}}\t{{usage_description .}}\n{{end}}"
	if err := envconfig.Usagef(EnvPrefix, &c, &rows, row); err != nil {
		return err
	}
	byKey := map[string]string{}
	var order []string
	for _, l := range strings.Split(strings.TrimSuffix(rows.String(), "\n"), "\n") {
		key, _, _ := strings.Cut(l, "\t")
		byKey[key] = l
		order = append(order, key)
	}
	var b strings.Builder
	b.WriteString("KEY\tTYPE\tDEFAULT\tREQUIRED\tDESCRIPTION\n")
	listed := map[string]bool{}
	for _, g := range usageGroups {
		fmt.Fprintf(&b, "\n%s:\n", g.title)
		for _, k := range g.keys {
			key := EnvPrefix + "_" + k
			if l, ok := byKey[key]; ok && !listed[key] {
				listed[key] = true
				b.WriteString(l + "\n")
			}
		}
		for _, n := range g.notes {
			b.WriteString("  " + n + "\n")
		}
	}
	other := false
	for _, key := range order {
		if !listed[key] {
			if !other {
				b.WriteString("\nOther:\n")
				other = true
			}
			b.WriteString(byKey[key] + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

package worker_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/worker"
)

// derivedDefaults are the variables whose default is derived at start-up
// (from the namespace or the host name), so they have no default tag.
var derivedDefaults = map[string]bool{"CASE_STREAM": true, "REPLY_STREAM": true, "CONSUMER_NAME": true}

// TestDefaultTagsAreTheDefaults ties the default tags, which `worker
// --help` lists, to what Defaults fills in (the Default… constants): a
// configuration given every tag's value explicitly is the configuration
// given nothing. And every field Defaults fills in has a tag, unless its
// default is derived.
func TestDefaultTagsAreTheDefaults(t *testing.T) {
	t.Parallel()
	typ := reflect.TypeFor[worker.Config]()
	tagged := map[string]string{"PYRULA_CONSUMER_NAME": "c"}
	for i := range typ.NumField() {
		f := typ.Field(i)
		if def, ok := f.Tag.Lookup("default"); ok {
			tagged[worker.EnvPrefix+"_"+f.Tag.Get("envconfig")] = def
		}
	}
	fromTags, err := worker.LoadConfigFrom(func(k string) string { return tagged[k] })
	if err != nil {
		t.Fatalf("the default tags do not load: %v", err)
	}
	fromNothing, err := worker.LoadConfigFrom(func(k string) string {
		if k == "PYRULA_CONSUMER_NAME" {
			return "c"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	a, b := reflect.ValueOf(fromTags), reflect.ValueOf(fromNothing)
	zero := reflect.ValueOf(worker.Config{})
	for i := range typ.NumField() {
		f := typ.Field(i)
		name := f.Tag.Get("envconfig")
		if !a.Field(i).Equal(b.Field(i)) {
			t.Errorf("PYRULA_%s: the default tag %q gives %v, Defaults gives %v", name, f.Tag.Get("default"), a.Field(i), b.Field(i))
		}
		_, hasTag := f.Tag.Lookup("default")
		if !hasTag && !derivedDefaults[name] && !b.Field(i).Equal(zero.Field(i)) {
			t.Errorf("PYRULA_%s: Defaults gives %v but the field has no default tag for --help", name, b.Field(i))
		}
	}
	if fromNothing.Concurrency != worker.DefaultConcurrency || fromNothing.WaitTimeout != worker.DefaultWaitTimeout ||
		fromNothing.ValkeyURL != worker.DefaultValkeyURL {
		t.Errorf("defaults %+v are not the Default constants", fromNothing)
	}
}

// LoadConfigFrom reads every variable through getenv, not from the
// process's environment, parses durations and integers, and refuses a bad
// value naming the variable and its type but not the value.
func TestLoadConfigFrom(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"PYRULA_CONSUMER_NAME": "c7", "PYRULA_NAMESPACE": "ns7", "PYRULA_CONCURRENCY": "0x10",
		"PYRULA_CLAIM_IDLE": "1m30s", "PYRULA_WAIT_TIMEOUT": "250ms", "PYRULA_WAIT_REPLICAS": "2",
	}
	c, err := worker.LoadConfigFrom(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := worker.Config{ConsumerName: "c7", Namespace: "ns7", Concurrency: 16, ClaimIdle: 90 * time.Second,
		WaitTimeout: 250 * time.Millisecond, WaitReplicas: 2, CaseStream: "ns7:case-messages", ReplyStream: "ns7:case-replies"}
	if want, err = want.Defaults(); err != nil {
		t.Fatal(err)
	}
	if c != want {
		t.Errorf("loaded\n%+v\nwant\n%+v", c, want)
	}
	for name, value := range map[string]string{
		"PYRULA_CONCURRENCY": "s3cret", "PYRULA_WAIT_TIMEOUT": "s3cret", "PYRULA_CLAIM_IDLE": "10",
	} {
		_, err := worker.LoadConfigFrom(func(k string) string {
			if k == name {
				return value
			}
			return env[k]
		})
		var se *worker.SettingError
		if !errors.As(err, &se) || se.Variable != name || !strings.Contains(err.Error(), "invalid setting "+name+": not a valid ") ||
			strings.Contains(err.Error(), value) {
			t.Errorf("%s=%s: %v; want an invalid setting naming the variable, not the value", name, value, err)
		}
	}
	_, err = worker.LoadConfigFrom(func(k string) string {
		if k == "PYRULA_WAIT_TIMEOUT" {
			return "-1s"
		}
		return env[k]
	})
	var se *worker.SettingError
	if !errors.As(err, &se) || se.Variable != "PYRULA_WAIT_TIMEOUT" || hasCode(err) {
		t.Errorf("PYRULA_WAIT_TIMEOUT=-1s: %v; want an invalid setting naming it, without a message's reason code", err)
	}
}

// hasCode says whether err carries a message's reason code.
func hasCode(err error) bool {
	_, ok := messages.CodeOf(err)
	return ok
}

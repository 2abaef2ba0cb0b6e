package daemon_test

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/daemon"
	"github.com/pyrula/caseworker/worker"
)

// --help says where the targets come from and lists every variable of
// worker.Config exactly once, with its default, under a heading saying what
// it configures.
func TestHelpGroupsVariables(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := (daemon.Options{}).Main(context.Background(), []string{"--help"}, &stdout, &stderr); code != 0 || stderr.Len() != 0 {
		t.Fatalf("--help: exit %d, stderr %q", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"Targets:", "Register", "example targets"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help does not say where targets come from (no %q)\n%s", want, out)
		}
	}
	headings := []string{"Valkey:", "Message stream and consumers:", "Runs (", "Fixture store and archive:",
		"HTTP, logs and shutdown:", "Model clients:"}
	group := map[string]string{} // variable → heading it is listed under
	rows := map[string][]string{}
	heading := ""
	for l := range strings.SplitSeq(out, "\n") {
		for _, h := range append(headings, "Other:") {
			if strings.HasPrefix(l, h) {
				heading = h
			}
		}
		cols := strings.Split(l, "\t")
		if !strings.HasPrefix(cols[0], worker.EnvPrefix+"_") {
			continue
		}
		if _, dup := rows[cols[0]]; dup {
			t.Errorf("%s is listed twice", cols[0])
		}
		rows[cols[0]], group[cols[0]] = cols, heading
	}
	for _, h := range headings {
		if !strings.Contains(out, "\n"+h) {
			t.Errorf("no %q heading\n%s", h, out)
		}
	}
	typ := reflect.TypeFor[worker.Config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		name := worker.EnvPrefix + "_" + f.Tag.Get("envconfig")
		cols, ok := rows[name]
		switch {
		case !ok:
			t.Errorf("%s is not listed", name)
		case len(cols) != 5 || cols[2] != f.Tag.Get("default") || cols[4] == "":
			t.Errorf("%s: row %q, want KEY TYPE DEFAULT(%q) REQUIRED DESCRIPTION", name, cols, f.Tag.Get("default"))
		case group[name] == "" || group[name] == "Other:":
			t.Errorf("%s is under no heading (%q)", name, group[name])
		}
	}
	if len(rows) != typ.NumField() {
		t.Errorf("%d variables listed, worker.Config has %d", len(rows), typ.NumField())
	}
}

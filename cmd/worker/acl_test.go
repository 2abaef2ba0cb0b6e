package main_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/testenv"
)

// aclLine is the worker's ACL SETUSER line as docs/operate.md gives it,
// for user user, password pass and namespace ns.
func aclLine(t *testing.T, user, pass, ns string) []string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/operate.md")
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^ACL SETUSER pyrula-worker .*$`).Find(doc)
	if line == nil {
		t.Fatal("docs/operate.md has no line ACL SETUSER pyrula-worker …")
	}
	var args []string
	for _, f := range strings.Fields(string(line))[2:] {
		switch f {
		case "pyrula-worker":
			f = user
		case ">PASSWORD":
			f = ">" + pass
		case "~pyrula:*":
			f = "~" + ns + ":*"
		}
		args = append(args, f)
	}
	if !strings.Contains(strings.Join(args, " "), "~"+ns+":*") {
		t.Fatalf("the documented line %s has no ~pyrula:* key pattern", line)
	}
	return args
}

// nodes are a client for each node of the Valkey at url (one for a single
// node; every address the cluster URL names for a cluster).
func nodes(t *testing.T, url string) []valkey.Client {
	t.Helper()
	opt, err := valkey.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	var out []valkey.Client
	for _, addr := range opt.InitAddress {
		c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true,
			Username: opt.Username, Password: opt.Password})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		out = append(out, c)
	}
	return out
}

// setUser runs ACL SETUSER with args on every node and deletes the user
// when t ends.
func setUser(t *testing.T, nodes []valkey.Client, args []string) {
	t.Helper()
	for _, n := range nodes {
		cmd := append([]string{"ACL", "SETUSER"}, args...)
		if err := n.Do(t.Context(), n.B().Arbitrary(cmd...).Build()).Error(); err != nil {
			t.Fatalf("ACL SETUSER %s: %v", strings.Join(args, " "), err)
		}
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.Do(context.Background(), n.B().AclDeluser().Username(args[0]).Build())
		}
	})
}

// denied is what ACL LOG says user was refused, on every node.
func denied(t *testing.T, nodes []valkey.Client, user string) []string {
	t.Helper()
	var out []string
	for _, n := range nodes {
		entries, err := n.Do(t.Context(), n.B().AclLog().Count(1000).Build()).ToArray()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			m, err := e.AsStrMap()
			if err != nil {
				continue
			}
			if m["username"] == user {
				out = append(out, fmt.Sprintf("%s %s (%s)", m["reason"], m["object"], m["context"]))
			}
		}
	}
	return out
}

// TestLeastPrivilegeACL runs a worker as a Valkey user made by the ACL line
// of docs/operate.md for its namespace, on one Valkey and on a Valkey
// Cluster: every message type, a suite and a restart work, and Valkey
// refused it nothing. A second namespace's user, made by the same line,
// can read or write none of the first namespace's streams, journals or
// records.
func TestLeastPrivilegeACL(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  func(testing.TB) string
	}{{"single node", testenv.ValkeyURL}, {"cluster", testenv.ValkeyClusterURL}} {
		t.Run(tc.name, func(t *testing.T) {
			url := tc.url(t)
			all := nodes(t, url)
			suffix := randomHex(t)
			ns, other := testenv.UniqueName(t, "wacl"), testenv.UniqueName(t, "wacl-other")
			user, otherUser := "pyrula_acl_"+suffix, "pyrula_acl_other_"+suffix
			setUser(t, all, aclLine(t, user, "pw-"+suffix, ns))
			setUser(t, all, aclLine(t, otherUser, "pw-other-"+suffix, other))

			client := testenv.ValkeyClientAt(t, url, ns)
			env := workerEnv(url, ns, "a", "PYRULA_VALKEY_USERNAME="+user, "PYRULA_VALKEY_PASSWORD=pw-"+suffix,
				"PYRULA_FIXTURE_STORE=file://"+t.TempDir())
			d := startReady(t, env...)
			loggedIn := false
			for _, n := range all {
				list, err := n.Do(t.Context(), n.B().ClientList().Build()).ToString()
				if err != nil {
					t.Fatal(err)
				}
				loggedIn = loggedIn || strings.Contains(list, "user="+user+" ")
			}
			if !loggedIn {
				t.Fatalf("the worker has no connection logged in as %s", user)
			}
			runID, hash, last := seedCase(t, client, ns)
			sendAll(t, client, ns+":case-messages", []any{
				envelope{MessageID: "case", Type: "run_case", Body: map[string]any{"target_name": "checkout",
					"source": map[string]any{"bundle": map[string]any{"fixture_hash": hash}}, "options": map[string]any{"replay_only": true}}},
				envelope{MessageID: "refused", Type: "run_case", Body: map[string]any{"target_name": "checkout"}},
			})
			got, _ := readReplies(t, client, ns+":case-replies", last, 2, 30*time.Second)
			byID := byMessageID(got)
			caseRun := runResultID(byID["case"])
			if caseRun == "" || byID["refused"].Status != "refused" {
				t.Fatalf("run_case and a refused message: %+v", got)
			}
			waitRunsFinished(t, client, ns, []string{caseRun}, 30*time.Second)
			suiteID := runSuite(t, client, ns, "suite")
			waitRunsFinished(t, client, ns, []string{suiteID}, 60*time.Second)
			if o := suiteOutcome(t, client, ns, suiteID); o.Total == 0 {
				t.Fatalf("suite outcome %+v", o)
			}

			// A restart: the new process takes over the group.
			d.sigkill()
			startReady(t, env...)
			sendAll(t, client, ns+":case-messages", []any{deleteBundle("delete", hash)})
			got, _ = readReplies(t, client, ns+":case-replies", lastReply(t, client, ns), 1, 30*time.Second)
			if got[0].MessageID != "delete" || got[0].Status != "ok" {
				t.Fatalf("delete_case_bundle after the restart: %+v", got[0])
			}
			if refused := denied(t, all, user); len(refused) > 0 {
				t.Errorf("Valkey refused the worker's user %d time(s): %v", len(refused), refused)
			}

			// The other namespace's user reaches none of this namespace's keys.
			oc := testenv.ValkeyClientAt(t, withUser(t, url, otherUser, "pw-other-"+suffix), "")
			for _, cmd := range []valkey.Completed{
				oc.B().Xrange().Key(ns + ":case-replies").Start("-").End("+").Build(),
				oc.B().Xadd().Key(ns+":case-messages").Id("*").FieldValue().FieldValue("message", "{}").Build(),
				oc.B().Xreadgroup().Group("case-workers", "intruder").Count(1).Streams().Key(ns + ":case-messages").Id(">").Build(),
				oc.B().Get().Key(ns + ":msg:{save}").Build(),
				oc.B().Hgetall().Key(ns + ":{" + runID + "}:meta").Build(),
				oc.B().Xrange().Key(ns + ":{" + runID + "}:events").Start("-").End("+").Build(),
				oc.B().Del().Key(ns + ":runs").Build(),
				oc.B().Eval().Script("return redis.call('GET', KEYS[1])").Numkeys(1).Key(ns + ":msg:{save}").Build(),
			} {
				err := oc.Do(t.Context(), cmd).Error()
				if ve, ok := valkey.IsValkeyErr(err); !ok || !strings.HasPrefix(ve.Error(), "NOPERM") {
					t.Errorf("%v as the other namespace's user: %v, want NOPERM", cmd.Commands(), err)
				}
			}
		})
	}
}

// withUser is url with user and password.
func withUser(t *testing.T, raw, user, pass string) string {
	t.Helper()
	i := strings.Index(raw, "://")
	if i < 0 {
		t.Fatalf("URL %s", raw)
	}
	return raw[:i+3] + user + ":" + pass + "@" + raw[i+3:]
}

// lastReply is the id of the last entry of namespace ns's reply stream.
func lastReply(t *testing.T, c valkey.Client, ns string) string {
	t.Helper()
	res, err := c.Do(t.Context(), c.B().Xrevrange().Key(ns+":case-replies").End("+").Start("-").Count(1).Build()).AsXRange()
	if err != nil || len(res) == 0 {
		t.Fatalf("the last reply of %s: %v", ns, err)
	}
	return res[0].ID
}

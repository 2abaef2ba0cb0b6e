package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/pyrula/caseworker/messages"
)

// codeRow is a table row of docs/reason-codes.md: | `code` | exit | when |.
var codeRow = regexp.MustCompile("^\\|\\s*`([a-z_]+)`\\s*\\|\\s*([0-9])\\s*\\|")

// TestReasonCodesListed checks that docs/reason-codes.md has one table row
// for every reason code of package messages, with the exit status the code
// maps to, and no row for a code that does not exist.
func TestReasonCodesListed(t *testing.T) {
	root := repoRoot(t)
	src, err := os.ReadFile(filepath.Join(root, "docs", "reason-codes.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[messages.Code]int{}
	for _, line := range regexp.MustCompile("\r?\n").Split(string(src), -1) {
		m := codeRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		code := messages.Code(m[1])
		exit, _ := strconv.Atoi(m[2])
		if !code.Known() {
			t.Errorf("docs/reason-codes.md lists %s, which is not a reason code of package messages", code)
			continue
		}
		if _, dup := rows[code]; dup {
			t.Errorf("docs/reason-codes.md lists %s twice", code)
		}
		rows[code] = exit
		if want := code.ExitStatus(); exit != want {
			t.Errorf("docs/reason-codes.md gives %s exit %d; messages says %d", code, exit, want)
		}
	}
	for _, code := range messages.AllCodes() {
		if _, ok := rows[code]; !ok {
			t.Errorf("docs/reason-codes.md has no row for %s", code)
		}
	}
}

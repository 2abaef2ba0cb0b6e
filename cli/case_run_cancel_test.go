package cli_test

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pyrula/caseworker/internal/testenv"
)

// TestCaseRunCancelledBySIGINT: a case run interrupted while a live call is
// running ends cancelled: the live call (a minute long) is cut short, the
// outcome line says cancelled and the command exits 3 (a started run that
// was cancelled).
func TestCaseRunCancelledBySIGINT(t *testing.T) {
	e := newJournalEnv(t, false)
	h := savedRun(t, e, "triage", "step:classify:0")
	runID := testenv.UniqueName(t, "case_cancel")

	// The lookup step is new after the fork, so it runs live; it would take
	// a minute.
	cmd := exec.Command(pyrula, "case", "run", h, "--run-id", runID, "--input", "lookup_ms=60000")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "PYRULA_FIXTURE_STORE=" + e.dir}, e.env...)
	cmd.Env = append(cmd.Env, testenv.BinaryEnv()...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// The case run's journal is the process's own, so there is nothing to
	// poll: the replay before the lookup takes milliseconds, and two seconds
	// leave room for a loaded machine.
	time.Sleep(2 * time.Second)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("case run did not end within 20 s of SIGINT: the live call was not cancelled")
	}
	r := result{args: cmd.Args[1:], stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if r.code != 3 {
		t.Fatalf("exit %d, want 3\n%s", r.code, r)
	}
	lines := decodeLines[valueLine](t, r)
	out := lines[len(lines)-1]
	if out.Type != "outcome" || out.Status != "cancelled" || out.Code != "cancelled" {
		t.Fatalf("outcome %+v, want status and code cancelled\n%s", out, r)
	}
	if !strings.Contains(r.stdout, `"run_id":"`+runID+`"`) {
		t.Fatalf("outcome does not name run %s\n%s", runID, r)
	}
}

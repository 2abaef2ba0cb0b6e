package testenv

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// BuildBinary builds the main package pkg (an import path) into dir, with the
// race detector when the tests run under it and the build tags given, and
// returns the binary's path (named after the package, and the tags when
// there are any). Tests that drive a command through its binary call it
// once from TestMain.
func BuildBinary(dir, pkg string, tags ...string) (string, error) {
	name := filepath.Base(pkg)
	if len(tags) > 0 {
		name += "-" + strings.Join(tags, "-")
	}
	bin := filepath.Join(dir, name)
	args := []string{"build", "-o", bin}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	if RaceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, pkg)...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// BinaryEnv is what a binary built with BuildBinary needs in its environment
// besides the test's own variables: a race-built binary must not wait a
// second at every exit.
func BinaryEnv() []string {
	if RaceEnabled {
		return []string{"GORACE=atexit_sleep_ms=0"}
	}
	return nil
}

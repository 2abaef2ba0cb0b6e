package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// --app-dir DIR: the product page's flag that extends the import path. In
// Go the targets are compiled into the binary, so pyrula runs the user's own
// CLI instead: the main package of the module at DIR that imports this
// package (a one-call main over cli.Options), built into a cache directory
// (go build relinks only what changed) and run with the other arguments.

const (
	// flagAppDir is the flag, taken anywhere before "--".
	flagAppDir = "--app-dir"
	// envAppDirChild marks a CLI that --app-dir started, so that an
	// --app-dir passed on again cannot start CLIs without end.
	envAppDirChild = "PYRULA_APP_DIR_CHILD"
	// cliImportPath is the import path a user's CLI main imports.
	cliImportPath = "github.com/pyrula/caseworker/cli"
)

// splitAppDir takes --app-dir DIR (or --app-dir=DIR) out of args (before a
// "--"): the directory, the other arguments, and whether it was given.
func splitAppDir(args []string) (dir string, rest []string, given bool, err error) {
	rest = make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return dir, append(rest, args[i:]...), given, nil
		case a == flagAppDir:
			if i+1 >= len(args) {
				return "", nil, true, fmt.Errorf("%s needs a directory", flagAppDir)
			}
			dir, given = args[i+1], true
			i++
		case strings.HasPrefix(a, flagAppDir+"="):
			dir, given = strings.TrimPrefix(a, flagAppDir+"="), true
		default:
			rest = append(rest, a)
		}
	}
	return dir, rest, given, nil
}

// runAppDir builds the CLI of the module at dir and runs it with args,
// with this process's standard streams and environment; it returns its exit
// status.
func (a *app) runAppDir(ctx context.Context, dir string, args []string) error {
	if a.getenv(envAppDirChild) != "" {
		return fmt.Errorf("%s: this pyrula was started by another's %s; run the commands without it", flagAppDir, flagAppDir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("%s %s: %w", flagAppDir, dir, err)
	}
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		return fmt.Errorf("%s %s: not a directory", flagAppDir, dir)
	}
	pkg, err := findAppCLI(ctx, abs)
	if err != nil {
		return err
	}
	bin, err := a.buildAppCLI(ctx, abs, pkg)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = a.stdin, a.stdout, a.stderr
	cmd.Env = append(os.Environ(), envAppDirChild+"=1")
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return exitStatus(ee.ExitCode())
	}
	if err != nil {
		return fmt.Errorf("%s: run %s: %w", flagAppDir, pkg, err)
	}
	return nil
}

// findAppCLI returns the import path of the main package in the module at
// dir that imports this package: the one whose path ends in /cmd/pyrula
// when there are several.
func findAppCLI(ctx context.Context, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}} {{join .Imports " "}}{{end}}`, "./...")
	cmd.Dir = dir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: go list: %v: %s", flagAppDir, dir, err, strings.TrimSpace(errOut.String()))
	}
	var found []string
	for _, line := range strings.Split(out.String(), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 1 && slices.Contains(fields[1:], cliImportPath) {
			found = append(found, fields[0])
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) == 0:
		return "", fmt.Errorf("%s %s: no main package there imports %s (a one-call main: os.Exit(cli.Options{Register: …}.Run()))", flagAppDir, dir, cliImportPath)
	}
	for _, p := range found {
		if strings.HasSuffix(p, "/cmd/pyrula") {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s %s: several main packages import %s (%s); keep one, or name it cmd/pyrula", flagAppDir, dir, cliImportPath, strings.Join(found, ", "))
}

// buildAppCLI builds pkg of the module at dir into the cache directory
// (PYRULA_APP_CACHE, else the user's cache directory under pyrula/app) and
// returns the binary's path. The build's output goes to stderr only when
// it fails.
func (a *app) buildAppCLI(ctx context.Context, dir, pkg string) (string, error) {
	base := a.getenv("PYRULA_APP_CACHE")
	if base == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("%s: no cache directory (set PYRULA_APP_CACHE): %w", flagAppDir, err)
		}
		base = filepath.Join(cache, "pyrula", "app")
	}
	sum := sha256.Sum256([]byte(dir + "\x00" + pkg))
	out := filepath.Join(base, hex.EncodeToString(sum[:8]), "pyrula")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", fmt.Errorf("%s: %w", flagAppDir, err)
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = dir
	var buildOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buildOut, &buildOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: go build %s failed: %v: %s", flagAppDir, dir, pkg, err, strings.TrimSpace(buildOut.String()))
	}
	return out, nil
}

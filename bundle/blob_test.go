package bundle_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestBlobIsOneStandardFrame: the blob of a large bundle (its sections
// compressed on several cores) is one zstd frame, with its content size,
// that the reference implementation's command line tool decompresses to
// the canonical bytes.
func TestBlobIsOneStandardFrame(t *testing.T) {
	t.Parallel()
	zstdTool, err := exec.LookPath("zstd")
	if err != nil {
		t.Skip("the zstd command is not installed")
	}
	c := mustRead(t, genBundle(12<<20))
	var blob bytes.Buffer
	if err := c.WriteBlob(&blob); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "b.case")
	if err := os.WriteFile(file, blob.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(zstdTool, "-dc", file).Output()
	if err != nil {
		t.Fatalf("zstd -dc: %v", err)
	}
	if !bytes.Equal(out, c.Bytes()) {
		t.Fatalf("zstd -dc gave %d bytes, not the %d canonical bytes", len(out), c.Size())
	}
	list, err := exec.Command(zstdTool, "-lv", file).CombinedOutput()
	if err != nil {
		t.Fatalf("zstd -lv: %v\n%s", err, list)
	}
	if !bytes.Contains(list, []byte("Zstandard Frames: 1\n")) || !bytes.Contains(list, []byte("Decompressed Size:")) {
		t.Fatalf("zstd -lv does not list one frame with its size:\n%s", list)
	}
}

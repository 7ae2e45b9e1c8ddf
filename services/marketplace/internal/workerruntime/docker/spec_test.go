package docker

import (
	"archive/tar"
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

func TestWithDefaults(t *testing.T) {
	t.Parallel()
	got, err := withDefaults(workerruntime.Spec{Journey: "j1", Worker: "w_v1", Image: "img"})
	if err != nil {
		t.Fatal(err)
	}
	if got.User != DefaultUser || got.Network != DefaultNetwork || got.CPUs != DefaultCPUs || got.MemoryBytes != DefaultMemoryBytes || got.PIDs != DefaultPIDs {
		t.Errorf("defaults not applied: %+v", got)
	}
	for _, user := range []string{"1000", "1000:1000", "65532:0"} {
		if _, err := withDefaults(workerruntime.Spec{Journey: "j1", Worker: "w_v1", Image: "img", User: user}); err != nil {
			t.Errorf("user %q refused: %v", user, err)
		}
	}
	for _, user := range []string{"0", "00", "0:0", "root", "root:1000", "nobody", "1000:staff", "-1", "1000:"} {
		if _, err := withDefaults(workerruntime.Spec{Journey: "j1", Worker: "w_v1", Image: "img", User: user}); err == nil {
			t.Errorf("user %q accepted", user)
		}
	}
	_, err = withDefaults(workerruntime.Spec{Journey: "../x", Network: "host", User: "root"})
	for _, want := range []string{"journey", "worker is required", "image is required", "root", "network \"host\""} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
}

func TestRebaseTar(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"./", "workspace/"} {
		var in bytes.Buffer
		tw := tar.NewWriter(&in)
		add := func(hdr *tar.Header, body string) {
			hdr.Size = int64(len(body))
			if err := tw.WriteHeader(hdr); err != nil {
				t.Fatal(err)
			}
			if _, err := io.WriteString(tw, body); err != nil {
				t.Fatal(err)
			}
		}
		add(&tar.Header{Name: prefix, Typeflag: tar.TypeDir, Mode: 0o755}, "")
		add(&tar.Header{Name: prefix + "a.txt", Typeflag: tar.TypeReg, Mode: 0o644}, "a")
		add(&tar.Header{Name: prefix + "workspace/", Typeflag: tar.TypeDir, Mode: 0o755}, "")
		add(&tar.Header{Name: prefix + "workspace/b.txt", Typeflag: tar.TypeReg, Mode: 0o644}, "b")
		add(&tar.Header{Name: prefix + "hard", Typeflag: tar.TypeLink, Linkname: prefix + "a.txt"}, "")
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := rebaseTar(&in, &out); err != nil {
			t.Fatalf("prefix %q: %v", prefix, err)
		}
		var names []string
		tr := tar.NewReader(&out)
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			n := hdr.Name
			if hdr.Typeflag == tar.TypeLink {
				n += "->" + hdr.Linkname
			}
			names = append(names, n)
		}
		// A directory named workspace inside the workspace keeps its name.
		want := "a.txt workspace/ workspace/b.txt hard->a.txt"
		if got := strings.Join(names, " "); got != want {
			t.Errorf("prefix %q: entries %q, want %q", prefix, got, want)
		}
	}
}

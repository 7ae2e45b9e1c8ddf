package source

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
)

// A repository the marketplace's user may not read is said to be so, not
// said to be missing: the user's fix is a chmod, not another path. (The
// tests run as root, whom no mode shuts out, so the error is made here.)
func TestUnreadableSaysWhy(t *testing.T) {
	t.Parallel()
	denial := &fs.PathError{Op: "stat", Path: "/sources/private/.git/objects", Err: os.ErrPermission}
	var e *Error
	if err := unreadable("/sources/private", denial); !errors.As(err, &e) || e.Code != CodeDenied || !strings.Contains(e.Message, "permission denied") || !strings.Contains(e.Message, "chmod") {
		t.Errorf("a permission denial: %v", err)
	}
	missing := &fs.PathError{Op: "stat", Path: "/sources/plain/objects", Err: fs.ErrNotExist}
	if err := unreadable("/sources/plain", missing); !errors.As(err, &e) || e.Code != CodeNotFound || !strings.Contains(e.Message, "not a git repository") {
		t.Errorf("no objects directory: %v", err)
	}
}

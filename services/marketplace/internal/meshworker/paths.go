package meshworker

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"
)

var errPathRequired = errors.New("path is required")

// relPath checks a caller's path before it reaches the os.Root. The root is
// the enforcement (it refuses "..", and symbolic links, that leave it); this
// only turns the two mistakes a caller can make in good faith into clear
// messages. An empty path means the root when emptyIsRoot is set.
func relPath(p string, emptyIsRoot bool) (string, error) {
	if p == "" {
		if emptyIsRoot {
			return ".", nil
		}
		return "", errPathRequired
	}
	if filepath.IsAbs(p) || strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("path %q is absolute: paths are relative to the workspace root", p)
	}
	return p, nil
}

// display is the slash-separated, cleaned form of a path that results show.
// It is never used to open anything: os.Root resolves ".." after following
// links, which lexical cleaning does not.
func display(p string) string {
	return path.Clean(filepath.ToSlash(p))
}

// join appends an entry name read from a directory to the path that
// directory was opened with. Names never contain a separator, so the result
// names exactly that entry for the root.
func join(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

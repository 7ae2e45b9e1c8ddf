// Package gitpath tells which names git takes for its own directory. On
// Linux only ".git" is one, but a repository is checked out on other file
// systems too: NTFS drops trailing dots and spaces and knows ".git" by its
// short name GIT~1, HFS+ ignores some Unicode code points, and both ignore
// letter case. git refuses every such name in a patch or a tree it checks
// out (verify_path, is_ntfs_dotgit and is_hfs_dotgit in git's path.c and
// utf8.c), so that one cannot plant hooks or configuration in a
// repository's .git: Meshwork refuses them too, before git does.
package gitpath

import "strings"

// IsDotGit reports whether a path component names git's directory on some
// file system git runs on.
func IsDotGit(name string) bool {
	n := strings.ToLower(strings.Map(func(r rune) rune {
		if hfsIgnored(r) {
			return -1
		}
		return r
	}, name))
	for _, git := range []string{".git", "git~1"} {
		if rest, ok := strings.CutPrefix(n, git); ok && ntfsEnd(rest) {
			return true
		}
	}
	return false
}

// HasDotGit reports whether any component of a slash-separated path is one
// IsDotGit takes for git's directory.
func HasDotGit(p string) bool {
	for seg := range strings.SplitSeq(p, "/") {
		if IsDotGit(seg) {
			return true
		}
	}
	return false
}

// ntfsEnd reports whether what follows a name is nothing to NTFS: trailing
// dots and spaces, then the end or an alternate data stream (":").
func ntfsEnd(rest string) bool {
	for _, r := range rest {
		switch r {
		case '.', ' ':
		case ':':
			return true
		default:
			return false
		}
	}
	return true
}

// hfsIgnored reports whether HFS+ drops r when it compares names: the
// code points git's is_hfs_dotgit skips.
func hfsIgnored(r rune) bool {
	switch {
	case r >= 0x200c && r <= 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x206a && r <= 0x206f, r == 0xfeff:
		return true
	}
	return false
}

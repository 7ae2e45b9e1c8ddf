package source

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"golang.org/x/sys/unix"

	"github.com/meshwork/meshwork/pkg/gate"
	"github.com/meshwork/meshwork/services/marketplace/internal/bases"
)

// fetchedRef is where a fetched commit is put in the draft.
const fetchedRef = plumbing.ReferenceName("refs/meshwork/source")

var commitPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Git fetches a git source into the draft: the commit becomes the base
// (and its origin, for bundles). Remote repositories come over https from
// an allowed host; local ones are read, never executed, from under an
// allowed root. caller is whose spawn the source is for: it picks the
// host's credential.
func (p *Policy) Git(ctx context.Context, caller string, spec *GitSpec, d *bases.Draft) (Record, error) {
	rec := Record{Kind: "git", URL: spec.URL, Ref: spec.Ref}
	if strings.ContainsAny(spec.Ref, "\x00\n\r") || strings.HasPrefix(spec.Ref, "-") || strings.Contains(spec.Ref, "..") {
		return rec, invalid("source.git.ref %q is not a branch, tag or commit name", spec.Ref)
	}
	ctx, cancel := context.WithTimeout(ctx, p.fetchTimeout())
	defer cancel()
	var (
		commit plumbing.Hash
		err    error
	)
	if dir, ok, lerr := p.localPath(spec.URL); lerr != nil {
		return rec, lerr
	} else if ok {
		commit, err = p.copyLocal(dir, spec.Ref, d)
	} else {
		commit, err = p.fetchRemote(ctx, caller, spec, d)
	}
	if err != nil {
		return rec, err
	}
	c, err := object.GetCommit(d.Storage(), commit)
	if err != nil {
		return rec, fmt.Errorf("reading the fetched commit: %w", err)
	}
	tree, err := c.Tree()
	if err != nil {
		return rec, fmt.Errorf("reading the fetched tree: %w", err)
	}
	if err := d.AddTree(tree); err != nil {
		return rec, err
	}
	if err := d.SetCommit(commit, commit); err != nil {
		return rec, err
	}
	rec.Commit, rec.Files, rec.Bytes = commit.String(), len(d.Files()), d.Bytes()
	return rec, nil
}

// localPath reports whether raw names a local repository (a path or a
// file:// URL) and, if so, checks that it lies under an allowed root once
// symbolic links are resolved.
func (p *Policy) localPath(raw string) (string, bool, error) {
	var dir string
	switch {
	case strings.HasPrefix(raw, "file://"):
		u, err := url.Parse(raw)
		if err != nil || (u.Host != "" && u.Host != "localhost") {
			return "", true, invalid("source.git.url %q is not a file:// URL of a local path", raw)
		}
		dir = u.Path
	case strings.HasPrefix(raw, "/"):
		dir = raw
	case strings.Contains(raw, "://"):
		return "", false, nil
	default:
		return "", true, invalid("source.git.url %q is neither an https URL nor an absolute path", raw)
	}
	if len(p.Roots) == 0 {
		return "", true, denied("local git sources are not allowed on this marketplace (the operator sets --source-roots)")
	}
	real, err := filepath.EvalSymlinks(filepath.Clean(dir))
	if err != nil {
		// Say the same whether or not it exists outside the roots.
		if p.under(filepath.Clean(dir)) {
			return "", true, notFound("no repository at %s", dir)
		}
		return "", true, denied("%s is not under an allowed source root", dir)
	}
	if !p.under(real) {
		return "", true, denied("%s is not under an allowed source root", dir)
	}
	return real, true, nil
}

// unreadable says why the repository at dir could not be opened: the
// marketplace runs as a user of its own, which a repository readable only
// by its owner shuts out, and that is not the same as no repository.
func unreadable(dir string, err error) error {
	if errors.Is(err, fs.ErrPermission) {
		return denied("%s cannot be read by the marketplace (permission denied): make the repository readable to every user, e.g. chmod -R a+rX on it", dir)
	}
	return notFound("%s is not a git repository: %v", dir, err)
}

// firstUnreadable returns a file or directory of gitDir that the
// marketplace may not read, or "". go-git reports such a denial as no
// repository, no such ref or a missing object, which sends a user looking
// for the wrong fix; so when reading a repository fails, this looks for the
// likelier cause, over at most maxScan entries.
func firstUnreadable(gitDir string) string {
	const maxScan = 200_000
	found, seen := "", 0
	_ = filepath.WalkDir(gitDir, func(p string, e fs.DirEntry, err error) error {
		if seen++; seen > maxScan {
			return filepath.SkipAll
		}
		mode := uint32(unix.R_OK)
		if err == nil && e.IsDir() {
			mode |= unix.X_OK
		}
		if err != nil || (e.Type()&fs.ModeSymlink == 0 && unix.Access(p, mode) != nil) {
			found = p
			return filepath.SkipAll
		}
		return nil
	})
	return found
}

// orUnreadable returns err, which reading the repository at dir (its git
// directory gitDir) failed with, or the permission denial that more likely
// caused it.
func orUnreadable(dir, gitDir string, err error) error {
	if firstUnreadable(gitDir) != "" {
		return unreadable(dir, fs.ErrPermission)
	}
	return err
}

func (p *Policy) under(dir string) bool {
	for _, r := range p.Roots {
		if dir == r || strings.HasPrefix(dir, r+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// copyLocal reads a local repository with go-git on a filesystem bounded to
// its git directory (no alternates or links out of it) and copies the
// commit and its tree, and nothing else, into the draft. It runs no git
// program and no hook.
func (p *Policy) copyLocal(dir, ref string, d *bases.Draft) (plumbing.Hash, error) {
	gitDir := dir
	if st, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
		if !st.IsDir() {
			return plumbing.ZeroHash, invalid("%s/.git is not a directory (linked worktrees and submodule checkouts are not taken); name the main repository", dir)
		}
		gitDir = filepath.Join(dir, ".git")
	}
	if _, err := os.Stat(filepath.Join(gitDir, "objects")); err != nil {
		return plumbing.ZeroHash, unreadable(dir, err)
	}
	// Every object is read when its content is, not when it is looked up
	// (go-git reads a smaller loose object whole, as far as its data
	// inflates, whatever its header says), so CopyCommit refuses an object
	// past the limits from its declared size before inflating it, and
	// inMemory reads no more than that size.
	st := filesystem.NewStorageWithOptions(osfs.New(gitDir, osfs.WithBoundOS()), cache.NewObjectLRUDefault(), filesystem.Options{LargeObjectThreshold: 1})
	repo, err := git.Open(st, nil)
	if err != nil {
		return plumbing.ZeroHash, orUnreadable(dir, gitDir, unreadable(dir, err))
	}
	rev := ref
	if rev == "" {
		rev = "HEAD"
	}
	h, err := repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return plumbing.ZeroHash, orUnreadable(dir, gitDir, notFound("no ref %q in %s", rev, dir))
	}
	if err := CopyCommit(st, d, *h, plumbing.ZeroHash); err != nil {
		if !errors.Is(err, bases.ErrRefused) { // a refusal is the content's
			err = orUnreadable(dir, gitDir, err)
		}
		return plumbing.ZeroHash, err
	}
	return *h, nil
}

// maxTreeOrCommit is the largest tree or commit a local repository may
// hold: a directory of 100,000 entries with long names is about 13 MB.
const maxTreeOrCommit = 32 << 20

// inMemory reads obj, which the store holds as h, into memory, and no more
// of it than its header declares. A local repository's objects are read
// lazily: stored as they are, they would be read again later, from a
// repository that may have changed since, and without a bound.
func inMemory(obj plumbing.EncodedObject, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if m, ok := obj.(*plumbing.MemoryObject); ok {
		return m, nil
	}
	r, err := obj.Reader()
	if err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", obj.Type(), h, err)
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, obj.Size()+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", obj.Type(), h, err)
	}
	m := &plumbing.MemoryObject{}
	m.SetType(obj.Type())
	m.SetSize(int64(len(data)))
	if _, err := m.Write(data); err != nil {
		return nil, err
	}
	if int64(len(data)) != obj.Size() || m.Hash() != h {
		return nil, fmt.Errorf("%w: the repository's %s %s is corrupt: its data does not match its header or its id", bases.ErrRefused, obj.Type(), h)
	}
	return m, nil
}

// maxTreeDepth is the deepest a source's directories may nest: a path of
// more levels is longer than the gate's limit (gate.MaxPathLen, 4096 bytes,
// two bytes a level at the least) anyway.
const maxTreeDepth = gate.MaxPathLen / 2

// CopyCommit copies commit, its tree, and the commits and trees of its
// first-parent ancestors down to stop (inclusive; zero: commit alone) from
// src into the draft, refusing more files or bytes than the draft's limits
// allow as it goes. The oldest copied commit is marked shallow when it has
// parents, so the draft is a consistent shallow repository.
func CopyCommit(src storer.EncodedObjectStorer, d *bases.Draft, commit, stop plumbing.Hash) error {
	dst := d.Storage()
	limits := d.Limits()
	files, size := 0, int64(0)
	seen := map[plumbing.Hash]bool{}
	// copyObj reads an object, refuses it by the size it declares before it
	// is inflated (read once: asking the size first would read it twice) and
	// stores it in the draft. A file counts against the draft's limits on
	// files and bytes; a tree or commit, decoded whole, against its own bound.
	copyObj := func(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
		if t == plumbing.BlobObject {
			if files++; files > limits.MaxFiles {
				return nil, fmt.Errorf("%w: the repository has more than %d files", bases.ErrRefused, limits.MaxFiles)
			}
		}
		obj, err := src.EncodedObject(t, h)
		if err != nil {
			return nil, fmt.Errorf("reading %s %s: %w", t, h, err)
		}
		switch n := obj.Size(); {
		case t == plumbing.BlobObject:
			if size += n; size > limits.MaxBytes {
				return nil, fmt.Errorf("%w: the repository's files pass the limit of %d bytes", bases.ErrRefused, limits.MaxBytes)
			}
		case n > maxTreeOrCommit:
			return nil, fmt.Errorf("%w: the repository's %s %s is %d bytes; the limit is %d", bases.ErrRefused, t, h, n, maxTreeOrCommit)
		}
		if obj, err = inMemory(obj, h); err != nil {
			return nil, err
		}
		if _, err := dst.SetEncodedObject(obj); err != nil {
			return nil, err
		}
		return obj, nil
	}
	var copyTree func(h plumbing.Hash, depth int) error
	copyTree = func(h plumbing.Hash, depth int) error {
		if seen[h] {
			return nil
		}
		if depth > maxTreeDepth {
			// Each level is a call: a deeper tree would take the stack.
			return fmt.Errorf("%w: the repository's directories nest deeper than %d", bases.ErrRefused, maxTreeDepth)
		}
		seen[h] = true
		obj, err := copyObj(plumbing.TreeObject, h)
		if err != nil {
			return err
		}
		t, err := object.DecodeTree(dst, obj)
		if err != nil {
			return fmt.Errorf("reading tree %s: %w", h, err)
		}
		for _, e := range t.Entries {
			switch e.Mode {
			case filemode.Dir:
				if err := copyTree(e.Hash, depth+1); err != nil {
					return err
				}
			case filemode.Submodule:
			default:
				if seen[e.Hash] {
					continue
				}
				seen[e.Hash] = true
				if _, err := copyObj(plumbing.BlobObject, e.Hash); err != nil {
					return err
				}
			}
		}
		return nil
	}
	h := commit
	for {
		obj, err := copyObj(plumbing.CommitObject, h)
		if err != nil {
			return err
		}
		c, err := object.DecodeCommit(dst, obj)
		if err != nil {
			return fmt.Errorf("reading commit %s: %w", h, err)
		}
		if err := copyTree(c.TreeHash, 0); err != nil {
			return err
		}
		if h == stop || stop.IsZero() || c.NumParents() == 0 {
			if c.NumParents() > 0 {
				return dst.SetShallow([]plumbing.Hash{h})
			}
			return nil
		}
		h = c.ParentHashes[0]
	}
}

// fetchRemote fetches one commit of an https repository on an allowed host,
// with the host's credential for caller.
func (p *Policy) fetchRemote(ctx context.Context, caller string, spec *GitSpec, d *bases.Draft) (plumbing.Hash, error) {
	u, err := url.Parse(spec.URL)
	if err != nil {
		return plumbing.ZeroHash, invalid("source.git.url %q is not a URL", spec.URL)
	}
	if u.Scheme != "https" {
		return plumbing.ZeroHash, invalid("source.git.url %q: only https URLs (or local paths under an allowed root) are taken", spec.URL)
	}
	if u.User != nil {
		return plumbing.ZeroHash, invalid("source.git.url must not carry credentials; the operator configures them per host")
	}
	if u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return plumbing.ZeroHash, invalid("source.git.url must not carry a query or a fragment (tokens belong in the operator's credentials)")
	}
	useHTTPS(p.maxFetchBytes())
	host := NormalizeHost(u.Host)
	if !slices.Contains(p.Hosts, host) {
		return plumbing.ZeroHash, denied("host %s is not an allowed source host (the operator sets --source-hosts)", host)
	}
	var auth transport.AuthMethod
	if c, ok := p.credential(host, caller); ok {
		auth = &githttp.BasicAuth{Username: c.Username, Password: c.Password}
	}
	repo, err := git.Init(d.Storage(), nil)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	remote, err := repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{u.String()}})
	if err != nil {
		return plumbing.ZeroHash, err
	}
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: auth, CABundle: p.CABundle})
	if err != nil {
		return plumbing.ZeroHash, remoteError(host, err, auth != nil)
	}
	src, err := pickRef(refs, spec.Ref)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	depth := spec.Depth
	if depth == 0 {
		depth = 1
	}
	err = remote.FetchContext(ctx, &git.FetchOptions{
		RefSpecs: []config.RefSpec{config.RefSpec(src + ":" + string(fetchedRef))},
		Depth:    depth, Auth: auth, CABundle: p.CABundle, Tags: git.NoTags, Force: true,
	})
	if errors.Is(err, git.ErrExactSHA1NotSupported) {
		// The server gives only what its refs reach: fetch its branches and
		// tags whole, then look for the commit among them.
		return p.fetchCommitByRefs(ctx, remote, auth, host, plumbing.NewHash(src), d)
	}
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return plumbing.ZeroHash, remoteError(host, err, auth != nil)
	}
	ref, err := d.Storage().Reference(fetchedRef)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("the fetch left no commit: %w", err)
	}
	h := ref.Hash()
	// An annotated tag names a tag object: base the journey on its commit.
	if tag, err := object.GetTag(d.Storage(), h); err == nil {
		c, err := tag.Commit()
		if err != nil {
			return plumbing.ZeroHash, invalid("tag %q does not name a commit", spec.Ref)
		}
		h = c.Hash
	}
	if err := d.Storage().RemoveReference(fetchedRef); err != nil {
		return plumbing.ZeroHash, err
	}
	return h, nil
}

// fetchCommitByRefs fetches every branch and tag of a server that does not
// serve commits by id, and checks that commit is among what they reach.
func (p *Policy) fetchCommitByRefs(ctx context.Context, remote *git.Remote, auth transport.AuthMethod, host string, commit plumbing.Hash, d *bases.Draft) (plumbing.Hash, error) {
	err := remote.FetchContext(ctx, &git.FetchOptions{
		RefSpecs: []config.RefSpec{"+refs/heads/*:refs/meshwork/heads/*", "+refs/tags/*:refs/meshwork/tags/*"},
		Auth:     auth, CABundle: p.CABundle, Tags: git.NoTags, Force: true,
	})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return plumbing.ZeroHash, remoteError(host, err, auth != nil)
	}
	if _, err := object.GetCommit(d.Storage(), commit); err != nil {
		return plumbing.ZeroHash, notFound("commit %s is not reachable from the repository's branches or tags on %s", commit, host)
	}
	return commit, nil
}

// pickRef finds what to fetch for ref among a remote's references: the
// default branch (HEAD) for "", a full ref name, a branch, a tag, or a
// commit id as is.
func pickRef(refs []*plumbing.Reference, ref string) (string, error) {
	byName := map[plumbing.ReferenceName]*plumbing.Reference{}
	for _, r := range refs {
		byName[r.Name()] = r
	}
	if ref == "" {
		head, ok := byName[plumbing.HEAD]
		if !ok {
			return "", notFound("the repository has no HEAD; give source.git.ref")
		}
		if head.Type() == plumbing.SymbolicReference {
			return string(head.Target()), nil
		}
		for _, r := range refs {
			if r.Name().IsBranch() && r.Hash() == head.Hash() {
				return string(r.Name()), nil
			}
		}
		return head.Hash().String(), nil
	}
	for _, name := range []plumbing.ReferenceName{plumbing.ReferenceName(ref), plumbing.NewBranchReferenceName(ref), plumbing.NewTagReferenceName(ref)} {
		if _, ok := byName[name]; ok && strings.HasPrefix(string(name), "refs/") {
			return string(name), nil
		}
	}
	if commitPattern.MatchString(ref) {
		return ref, nil
	}
	return "", notFound("no branch, tag or ref %q in the repository", ref)
}

// remoteError turns a transport failure into a client error that names the
// host, and never the credentials.
func remoteError(host string, err error, withCredentials bool) error {
	switch {
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return notFound("no such repository on %s", host)
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed):
		if !withCredentials {
			return denied("%s asks for credentials, and none are configured for this caller (the operator's --source-credentials-file)", host)
		}
		return denied("%s refused the marketplace's credentials for this repository", host)
	case errors.Is(err, transport.ErrEmptyRemoteRepository):
		return notFound("the repository on %s is empty", host)
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("fetching from %s timed out", host)}
	case errors.Is(err, bases.ErrRefused):
		return invalid("fetching from %s: %v", host, err)
	case errors.Is(err, errFetchTooLarge) || strings.Contains(err.Error(), errFetchTooLarge.Error()):
		return invalid("fetching from %s: the repository passes the %d bytes one fetch may bring", host, fetchLimit.Load())
	case strings.Contains(err.Error(), "http redirect"):
		return denied("%s redirected the fetch elsewhere; name the repository's final https URL (redirects are not followed)", host)
	}
	return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("fetching from %s failed: %v", host, err)}
}

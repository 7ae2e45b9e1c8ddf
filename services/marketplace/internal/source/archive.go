package source

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"

	"github.com/meshwork/meshwork/services/marketplace/internal/bases"
)

// Archive unpacks an archive source into the draft and commits it as the
// base. The archive is read as a stream: its size is checked as it is
// decoded, every entry as it comes, and the checksum at the end; nothing
// is kept if anything is refused.
func (p *Policy) Archive(spec *ArchiveSpec, d *bases.Draft) (Record, error) {
	rec := Record{Kind: "archive", SHA256: strings.ToLower(spec.SHA256)}
	want, err := hex.DecodeString(rec.SHA256)
	if err != nil || len(want) != sha256.Size {
		return rec, invalid("source.archive.sha256 must be 64 hex digits")
	}
	limit := p.maxArchiveBytes()
	if n := int64(base64.StdEncoding.DecodedLen(len(spec.TarGzBase64))); n > limit+2 {
		return rec, invalid("the archive is about %d bytes; the limit is %d", n, limit)
	}
	raw := &limitedReader{r: base64.NewDecoder(base64.StdEncoding, strings.NewReader(spec.TarGzBase64)), left: limit, limit: limit}
	sum := sha256.New()
	in := io.TeeReader(raw, sum)
	if err := unpack(in, d); err != nil {
		return rec, err
	}
	// The checksum covers every byte sent, also what follows the tar's end.
	if _, err := io.Copy(io.Discard, in); err != nil {
		return rec, archiveError(err)
	}
	if got := sum.Sum(nil); subtle.ConstantTimeCompare(got, want) != 1 {
		return rec, invalid("source.archive.sha256 does not match: the archive's SHA-256 is %x", got)
	}
	c, err := d.Commit("Meshwork: archive source "+rec.SHA256[:12], plumbing.ZeroHash, plumbing.ZeroHash)
	if err != nil {
		return rec, err
	}
	rec.Commit, rec.Files, rec.Bytes = c.String(), len(d.Files()), d.Bytes()
	return rec, nil
}

// unpack reads a gzip-compressed tar into the draft.
func unpack(in io.Reader, d *bases.Draft) error {
	gz, err := gzip.NewReader(in)
	if err != nil {
		return archiveError(err)
	}
	defer func() { _ = gz.Close() }() // only read from
	// What a tar inflates to besides its files' content (headers, and PAX
	// global headers, which the reader parses and skips) is bounded too, so
	// that inflating it costs no more than its files may.
	l := d.Limits()
	inflated := 2*l.MaxBytes + int64(l.MaxEntries())*entryOverhead
	tr := tar.NewReader(&inflateLimit{r: gz, left: inflated, limit: inflated})
	entries := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return archiveError(err)
		}
		if entries++; entries > d.Limits().MaxEntries() {
			return fmt.Errorf("%w: the archive has more than %d entries", bases.ErrRefused, d.Limits().MaxEntries())
		}
		name := strings.TrimPrefix(hdr.Name, "./")
		switch hdr.Typeflag {
		case tar.TypeDir:
			if name = strings.TrimSuffix(name, "/"); name == "" || name == "." {
				continue
			}
			if _, err := bases.CheckPath(name); err != nil {
				return err
			}
		case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // old archivers still write TypeRegA
			mode := filemode.Regular
			if hdr.Mode&0o100 != 0 {
				mode = filemode.Executable
			}
			if err := d.AddFile(name, mode, tr); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := d.AddFile(name, filemode.Symlink, strings.NewReader(hdr.Linkname)); err != nil {
				return err
			}
		case tar.TypeLink:
			if err := d.AddLink(name, strings.TrimPrefix(hdr.Linkname, "./")); err != nil {
				return err
			}
		case tar.TypeXGlobalHeader:
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			return fmt.Errorf("%w: %q is a device or pipe; archives may hold only files, directories and links", bases.ErrRefused, name)
		default:
			return fmt.Errorf("%w: %q has tar entry type %q, which is not taken", bases.ErrRefused, name, hdr.Typeflag)
		}
	}
	return nil
}

// entryOverhead is what an entry may take in a tar besides its content: its
// header, a PAX header with long names, and padding.
const entryOverhead = 3 * 512

// inflateLimit fails once more than limit bytes are read from a
// decompressing reader.
type inflateLimit struct {
	r           io.Reader
	left, limit int64
}

func (l *inflateLimit) Read(p []byte) (int, error) {
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	if l.left -= int64(n); l.left < 0 {
		return 0, fmt.Errorf("%w: the archive inflates past %d bytes (twice the file content limit, and its entries' headers)", bases.ErrRefused, l.limit)
	}
	return n, err
}

// limitedReader fails once more than limit bytes are read, so an oversized
// archive is refused as it streams, not after.
type limitedReader struct {
	r     io.Reader
	left  int64
	limit int64
}

// tooLarge is the error of a limitedReader past its limit.
type tooLarge struct{ limit int64 }

func (e *tooLarge) Error() string {
	return fmt.Sprintf("the archive passes the limit of %d bytes (checked as it is read)", e.limit)
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.left < 0 {
		return 0, &tooLarge{l.limit}
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		return n, &tooLarge{l.limit}
	}
	return n, err
}

func archiveError(err error) error {
	var big *tooLarge
	switch {
	case errors.As(err, &big):
		return invalid("%s", big.Error())
	case errors.Is(err, bases.ErrRefused):
		return err
	}
	var b64 base64.CorruptInputError
	if errors.As(err, &b64) {
		return invalid("source.archive.tar_gz_base64 is not valid base64 (at byte %d)", int64(b64))
	}
	return invalid("source.archive is not a readable tar.gz: %v", err)
}

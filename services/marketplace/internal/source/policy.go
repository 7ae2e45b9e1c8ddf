package source

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/meshwork/meshwork/pkg/bearer"
	"github.com/meshwork/meshwork/services/marketplace/internal/bases"
)

// Policy is what the operator allows sources to be. The zero value allows
// no git source at all (archives and journey patches need no allowlist).
type Policy struct {
	// Hosts are the https hosts git sources may name ("git.example.com" or
	// "git.example.com:8443"), lowercased. Defaults to none.
	Hosts []string
	// Roots are the local directories git sources may name (a path or a
	// file:// URL inside one of them). Defaults to none.
	Roots []string
	// Credentials are HTTP credentials for private repositories, by host,
	// each for the callers it names or for every caller (see Credential).
	// They are used only by the marketplace, never passed to a worker, never
	// logged or recorded. Defaults to none.
	Credentials map[string][]Credential
	// CABundle is extra PEM certificates to trust for https sources (a
	// private CA). Defaults to the system's roots only.
	CABundle []byte
	// Limits bound the files and bytes a source may unpack to. Defaults to
	// bases' defaults (100,000 files, 1 GiB).
	Limits bases.Limits
	// MaxArchiveBytes bounds an archive as sent (compressed, before base64),
	// checked while it is read. Defaults to 32 MiB.
	MaxArchiveBytes int64
	// FetchTimeout bounds one git fetch. Defaults to 5 minutes.
	FetchTimeout time.Duration
	// MaxFetchBytes bounds what one connection to a source host may bring,
	// as it arrives (the first policy to fetch sets it for the process).
	// Defaults to 2 GiB.
	MaxFetchBytes int64
}

func (p *Policy) maxFetchBytes() int64 {
	if p.MaxFetchBytes > 0 {
		return p.MaxFetchBytes
	}
	return DefaultMaxFetchBytes
}

// Credential is a username and password (or token) for HTTP basic auth.
type Credential struct {
	Username string
	Password string
	// Callers are the callers whose sources the credential fetches. Empty:
	// every caller that no other credential of the host names. A caller
	// without a credential fetches without one (public repositories).
	Callers []string
}

// credential is the credential caller fetches from host with: the one that
// names caller, else the host's one for every caller.
func (p *Policy) credential(host, caller string) (Credential, bool) {
	var all *Credential
	for i, c := range p.Credentials[host] {
		if slices.Contains(c.Callers, caller) {
			return c, true
		}
		if len(c.Callers) == 0 {
			all = &p.Credentials[host][i]
		}
	}
	if all == nil {
		return Credential{}, false
	}
	return *all, true
}

// CredentialCallers are the callers the credentials name, sorted, each once.
func (p *Policy) CredentialCallers() []string {
	var out []string
	for _, creds := range p.Credentials {
		for _, c := range creds {
			out = append(out, c.Callers...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// DefaultMaxArchiveBytes is MaxArchiveBytes's default.
const DefaultMaxArchiveBytes = 32 << 20

func (p *Policy) maxArchiveBytes() int64 {
	if p.MaxArchiveBytes > 0 {
		return p.MaxArchiveBytes
	}
	return DefaultMaxArchiveBytes
}

func (p *Policy) fetchTimeout() time.Duration {
	if p.FetchTimeout > 0 {
		return p.FetchTimeout
	}
	return 5 * time.Minute
}

// CheckRoots resolves the roots to absolute paths without symbolic links,
// so that a later check compares like with like. It fails on a root that
// does not exist or is not a directory.
func (p *Policy) CheckRoots() error {
	for i, r := range p.Roots {
		abs, err := filepath.Abs(r)
		if err != nil {
			return fmt.Errorf("source root %q: %w", r, err)
		}
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return fmt.Errorf("source root %q: %w", r, err)
		}
		if st, err := os.Stat(real); err != nil || !st.IsDir() {
			return fmt.Errorf("source root %q is not a directory", r)
		}
		p.Roots[i] = real
	}
	return nil
}

// NormalizeHost lowercases a host and drops the default https port.
func NormalizeHost(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	if host, port, err := net.SplitHostPort(h); err == nil && port == "443" {
		return host
	}
	return h
}

// ParseCredentials reads a credentials file: one credential per line,
// "HOST USERNAME PASSWORD [CALLER,CALLER...]" separated by white space; blank
// lines and lines starting with # are skipped. A line without callers serves
// every caller that no other line of its host names; a host has at most one
// such line, and names a caller at most once. Errors name the line, never
// its secret.
func ParseCredentials(data []byte) (map[string][]Credential, error) {
	out := map[string][]Credential{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 && len(f) != 4 {
			return nil, fmt.Errorf("line %d: want HOST USERNAME PASSWORD [CALLER,CALLER...], got %d fields", n, len(f))
		}
		host := NormalizeHost(f[0])
		c := Credential{Username: f[1], Password: f[2]}
		if len(f) == 4 {
			for _, caller := range strings.Split(f[3], ",") {
				if !bearer.ValidCaller(caller) {
					return nil, fmt.Errorf("line %d: %q is not a caller's name", n, caller)
				}
				if slices.Contains(c.Callers, caller) {
					return nil, fmt.Errorf("line %d: caller %q is named twice", n, caller)
				}
				c.Callers = append(c.Callers, caller)
			}
		}
		for _, prev := range out[host] {
			if len(c.Callers) == 0 && len(prev.Callers) == 0 {
				return nil, fmt.Errorf("line %d: host %s has a credential for every caller already", n, host)
			}
			for _, caller := range c.Callers {
				if slices.Contains(prev.Callers, caller) {
					return nil, fmt.Errorf("line %d: caller %q has a credential for %s already", n, caller, host)
				}
			}
		}
		out[host] = append(out[host], c)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

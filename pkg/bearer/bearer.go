// Package bearer holds the bearer tokens that authenticate a service's
// callers, in the one format every Meshwork service reads, and checks a
// presented token against them.
//
// Tokens come from an environment variable, "caller=token,caller2=token2",
// and from a file with one "caller token" or "caller=token" per line (blank
// lines and # comments skipped). A caller is a name of letters, digits and
// ". _ @ / + -"; a token is at least [MinLength] characters without spaces
// or commas (an "=" in it is fine). A caller may have several tokens (to
// rotate them), and no two callers share one. Once loaded, only each
// token's SHA-256 is kept, and a presented token is compared with every
// known hash in constant time.
package bearer

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// MinLength is the shortest token accepted.
const MinLength = 16

// Hash is how a token is kept and looked up: never the token itself.
func Hash(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// Set is the callers' tokens, by hash.
type Set struct {
	entries []entry
}

type entry struct {
	caller string
	hash   [sha256.Size]byte
}

// New returns the Set of byCaller, caller → token, checked as [Load] checks
// them.
func New(byCaller map[string]string) (*Set, error) {
	callers := make([]string, 0, len(byCaller))
	for c := range byCaller {
		callers = append(callers, c)
	}
	sort.Strings(callers)
	b := &builder{}
	for _, caller := range callers {
		if err := b.add(caller, byCaller[caller], "caller "+caller); err != nil {
			return nil, err
		}
	}
	return b.set, nil
}

// Load reads the tokens of envValue, the value of the environment variable
// envName, and of file when it is not empty. Errors name the entry or the
// line they are about, never the token.
func Load(envName, envValue, file string) (*Set, error) {
	b := &builder{}
	for i, pair := range strings.Split(envValue, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		caller, token, ok := strings.Cut(pair, "=")
		where := fmt.Sprintf("%s entry %d", envName, i+1)
		if !ok {
			return nil, fmt.Errorf("%s: want caller=token", where)
		}
		if err := b.add(caller, token, where); err != nil {
			return nil, err
		}
	}
	if file == "" {
		return b.set, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("reading the tokens file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		where := fmt.Sprintf("%s:%d", file, n)
		var caller, token string
		ok := true
		// "caller token" first: a token may hold "=" (base64 padding).
		switch fields := strings.Fields(line); len(fields) {
		case 2:
			caller, token = fields[0], fields[1]
		case 1:
			caller, token, ok = strings.Cut(line, "=")
		default:
			ok = false
		}
		if !ok {
			return nil, fmt.Errorf(`%s: want "caller token" or "caller=token"`, where)
		}
		if err := b.add(caller, token, where); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the tokens file: %w", err)
	}
	return b.set, nil
}

// builder checks tokens as they are added.
type builder struct {
	set  *Set
	seen map[[sha256.Size]byte]string
}

// callerPattern is what a caller's name may be. A name that is not one is
// never printed: it may be a misplaced token.
var callerPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@/+-]{0,127}$`)

// ValidCaller reports whether name may be a caller's name.
func ValidCaller(name string) bool { return callerPattern.MatchString(name) }

func (b *builder) add(caller, token, where string) error {
	if b.set == nil {
		b.set, b.seen = &Set{}, map[[sha256.Size]byte]string{}
	}
	caller, token = strings.TrimSpace(caller), strings.TrimSpace(token)
	switch {
	case !callerPattern.MatchString(caller):
		return fmt.Errorf("%s: the caller must be a name of letters, digits and . _ @ / + - (at most 128)", where)
	case len(token) < MinLength:
		return fmt.Errorf("%s: caller %s: the token must be at least %d characters", where, caller, MinLength)
	case strings.ContainsAny(token, " \t\r\n,"):
		return fmt.Errorf("%s: caller %s: the token must not contain spaces or commas", where, caller)
	}
	h := sha256.Sum256([]byte(token))
	if other, dup := b.seen[h]; dup {
		if other == caller {
			return nil // the same token twice: once is enough
		}
		return fmt.Errorf("%s: callers %s and %s have the same token", where, other, caller)
	}
	b.seen[h] = caller
	b.set.entries = append(b.set.entries, entry{caller: caller, hash: h})
	return nil
}

// Len returns how many callers have a token.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.entries)
}

// Caller returns the caller whose token this is.
func (s *Set) Caller(token string) (string, bool) {
	caller, _, ok := s.Lookup(token)
	return caller, ok
}

// Lookup returns the caller whose token this is and the token's hash,
// which tells this token from the caller's others.
func (s *Set) Lookup(token string) (caller string, hash []byte, ok bool) {
	if s == nil {
		return "", nil, false
	}
	h := sha256.Sum256([]byte(token))
	var match *entry
	for i := range s.entries { // no early exit: the time does not depend on which matched
		if subtle.ConstantTimeCompare(h[:], s.entries[i].hash[:]) == 1 {
			match = &s.entries[i]
		}
	}
	if match == nil {
		return "", nil, false
	}
	return match.caller, match.hash[:], true
}

// Has reports whether caller has a token.
func (s *Set) Has(caller string) bool {
	if s == nil {
		return false
	}
	for c := range s.All() {
		if c == caller {
			return true
		}
	}
	return false
}

// All yields each caller and its token's hash, in the order of loading.
func (s *Set) All() iter.Seq2[string, []byte] {
	return func(yield func(string, []byte) bool) {
		for _, e := range s.entries {
			if !yield(e.caller, e.hash[:]) {
				return
			}
		}
	}
}

// ErrRequired is the message of a request refused for its token.
var ErrRequired = errors.New("a valid bearer token is required: send Authorization: Bearer <token>")

// Verify is the MCP SDK's token verifier over s: the token's caller is the
// UserID.
func (s *Set) Verify(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	caller, ok := s.Caller(token)
	if !ok {
		return nil, auth.ErrInvalidToken
	}
	return Info(caller), nil
}

// Info is the token info of an authenticated caller. Tokens do not expire;
// the SDK wants an expiry, checked per request, so it is an hour ahead.
func Info(caller string) *auth.TokenInfo {
	return &auth.TokenInfo{UserID: caller, Expiration: time.Now().Add(time.Hour)}
}

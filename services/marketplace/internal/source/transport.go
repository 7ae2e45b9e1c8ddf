package source

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
)

// DefaultMaxFetchBytes is the most bytes one connection to a source host
// may bring: a fetch that passes it is cut.
const DefaultMaxFetchBytes = 2 << 30

var (
	installHTTPS sync.Once
	// fetchLimit is the installed transport's limit, for messages.
	fetchLimit atomic.Int64
)

// useHTTPS makes go-git's https transport the marketplace's, once per
// process: redirects are not followed (an allowed host must not hand a
// fetch, and the credentials sent to it, to a host that is not allowed),
// and a connection that reads more than maxBytes is cut, so a host cannot
// fill the marketplace's memory. go-git keeps one transport per scheme, so
// the first policy's limit is the process's.
func useHTTPS(maxBytes int64) {
	installHTTPS.Do(func() {
		fetchLimit.Store(maxBytes)
		base := http.DefaultTransport.(*http.Transport).Clone()
		// The limit counts bytes as they come off the connection: a body
		// the transport would gunzip on its own could be a thousand times
		// larger. go-git asks for no compression, so none is asked for.
		base.DisableCompression = true
		dial := (&net.Dialer{}).DialContext
		base.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &cappedConn{Conn: c, left: maxBytes}, nil
		}
		client.InstallProtocol("https", githttp.NewClientWithOptions(&http.Client{Transport: base},
			&githttp.ClientOptions{RedirectPolicy: githttp.NoFollowRedirects}))
	})
}

// errFetchTooLarge is a connection's read past its limit.
var errFetchTooLarge = errors.New("the source host sent more than the marketplace takes in one fetch")

// cappedConn fails reads once left bytes have been read.
type cappedConn struct {
	net.Conn
	left int64
	used atomic.Int64
}

func (c *cappedConn) Read(p []byte) (int, error) {
	if c.used.Load() >= c.left {
		return 0, errFetchTooLarge
	}
	n, err := c.Conn.Read(p)
	c.used.Add(int64(n))
	return n, err
}

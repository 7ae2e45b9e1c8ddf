// Package egress is the way out of egress workers (isolation.network:
// egress): they sit on an internal Docker network with no route out, and
// their HTTP_PROXY and HTTPS_PROXY name this proxy, which lets each worker
// reach exactly the host:port pairs of its definition's egress list and
// refuses everything else.
//
// A worker is known by its container's address on the internal network
// ([Proxy.Grant], when it is spawned; [Proxy.Revoke] when it goes): a
// connection from an address without a grant is refused like any other.
// Every connection, allowed or refused, is reported to the Audit callback
// with the journey, host, port, bytes each way and the decision.
//
// The proxy is github.com/elazarl/goproxy: CONNECT tunnels for HTTPS
// (nothing is decrypted), forwarded requests for plain HTTP.
package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"
)

// Grant is what one worker may reach, and who it is for the audit log.
type Grant struct {
	// Journey identifies the worker in audit records (the journey uid).
	Journey string
	// Allowed are "host:port" pairs, matched exactly (hosts without case).
	Allowed []string
}

func (g *Grant) allows(hostport string) bool {
	for _, a := range g.Allowed {
		if strings.EqualFold(a, hostport) {
			return true
		}
	}
	return false
}

// Record is one connection through the proxy, or one refused.
type Record struct {
	Journey string // empty when the address had no grant
	Source  string // the worker's address
	Host    string
	Port    int
	Allowed bool
	// Reason says why a connection was refused or failed.
	Reason string
	// Sent and Received count the bytes to and from the host.
	Sent, Received int64
	Duration       time.Duration
}

// DefaultMaxConnsPerSource bounds the connections one worker holds through
// the proxy at once: tunnels and plain requests. A package manager opens a
// few dozen; the proxy serves every caller's workers, and each connection
// holds two copy buffers in the marketplace.
const DefaultMaxConnsPerSource = 64

// Proxy is the egress proxy. It is an http.Handler; serve it on an address
// the internal network reaches.
type Proxy struct {
	gp     *goproxy.ProxyHttpServer
	audit  func(Record)
	logger *slog.Logger
	dialer net.Dialer

	// conns counts each source's open connections, at most maxPerSource.
	connsMu      sync.Mutex
	conns        map[string]int
	maxPerSource int

	mu     sync.RWMutex
	grants map[string]*Grant // by worker address
	// resolve, when set, finds the grants instead of grants: the
	// marketplace keeps them in Postgres, where every replica's proxy
	// finds any replica's workers.
	resolve func(ctx context.Context, addr string) (*Grant, error)
}

// Resolve makes the proxy find each connection's grant with f (nil when
// the address has none) instead of the grants given to Grant. An error
// refuses the connection.
func (p *Proxy) Resolve(f func(ctx context.Context, addr string) (*Grant, error)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resolve = f
}

// New returns a proxy that reports every connection to audit (called from
// the proxy's goroutines; it must be safe for concurrent use).
func New(audit func(Record), logger *slog.Logger) *Proxy {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{
		audit: audit, logger: logger, grants: map[string]*Grant{}, dialer: net.Dialer{Timeout: 30 * time.Second},
		conns: map[string]int{}, maxPerSource: DefaultMaxConnsPerSource,
	}
	gp := goproxy.NewProxyHttpServer()
	gp.Logger = slogPrinter{logger}
	// Plain HTTP goes out through a transport of its own, which never uses
	// a proxy from the marketplace's environment.
	gp.Tr = &http.Transport{DialContext: p.dialer.DialContext, ResponseHeaderTimeout: time.Minute, MaxIdleConnsPerHost: 4}
	gp.NonproxyHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "Meshwork egress proxy: only proxy requests are served", http.StatusBadRequest)
	})
	gp.OnRequest().HandleConnectFunc(p.connect)
	gp.ConnectDialWithReq = p.dialTunnel
	gp.OnRequest().DoFunc(p.request)
	gp.OnResponse().DoFunc(p.response)
	p.gp = gp
	return p
}

// SetMaxConnsPerSource changes DefaultMaxConnsPerSource for this proxy.
func (p *Proxy) SetMaxConnsPerSource(n int) {
	p.connsMu.Lock()
	defer p.connsMu.Unlock()
	p.maxPerSource = n
}

// acquire takes one of src's connections, or reports in rec why it cannot.
func (p *Proxy) acquire(rec *Record) bool {
	p.connsMu.Lock()
	defer p.connsMu.Unlock()
	if p.conns[rec.Source] >= p.maxPerSource {
		rec.Allowed = false
		rec.Reason = fmt.Sprintf("the worker holds %d connections through the proxy already, the most it may at once", p.maxPerSource)
		return false
	}
	p.conns[rec.Source]++
	return true
}

// release gives back one of src's connections.
func (p *Proxy) release(src string) {
	p.connsMu.Lock()
	defer p.connsMu.Unlock()
	if p.conns[src]--; p.conns[src] <= 0 {
		delete(p.conns, src)
	}
}

// ServeHTTP serves the proxy.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.gp.ServeHTTP(w, r) }

// Grant lets the worker at addr (an IP address) reach what g allows,
// replacing any earlier grant of that address.
func (p *Proxy) Grant(addr string, g Grant) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.grants[addr] = &g
}

// Revoke withdraws the grant of addr.
func (p *Proxy) Revoke(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.grants, addr)
}

// grantOf finds the grant of a request's source address.
func (p *Proxy) grantOf(r *http.Request) (*Grant, string) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	p.mu.RLock()
	resolve := p.resolve
	g := p.grants[host]
	p.mu.RUnlock()
	if resolve != nil {
		var err error
		if g, err = resolve(r.Context(), host); err != nil {
			p.logger.WarnContext(r.Context(), "finding an egress grant failed", slog.String("source", host), slog.Any("error", err))
			return nil, host
		}
	}
	return g, host
}

// decide checks a destination for a request's source; it returns the grant
// (nil when refused) and the record to report.
func (p *Proxy) decide(r *http.Request, hostport string) (*Grant, Record) {
	g, src := p.grantOf(r)
	host, portText, err := net.SplitHostPort(hostport)
	port, _ := strconv.Atoi(portText)
	rec := Record{Source: src, Host: host, Port: port}
	switch {
	case err != nil || port <= 0 || port > 65535:
		rec.Host, rec.Reason = hostport, "not a host:port"
		return nil, rec
	case g == nil:
		rec.Reason = "the source address " + src + " is no egress worker's"
		return nil, rec
	}
	rec.Journey = g.Journey
	if !g.allows(net.JoinHostPort(strings.ToLower(host), portText)) {
		rec.Reason = net.JoinHostPort(host, portText) + " is not in the worker's egress list"
		return nil, rec
	}
	rec.Allowed = true
	return g, rec
}

// refusal is the body of a refused request: what the worker reads.
func refusal(rec Record) string {
	return "Meshwork egress proxy: refused: " + rec.Reason + "\n"
}

// connect decides a CONNECT tunnel.
func (p *Proxy) connect(hostport string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
	if _, rec := p.decide(ctx.Req, hostport); !rec.Allowed {
		p.audit(rec)
		// goproxy writes this response to the client and closes it.
		ctx.Resp = goproxy.NewResponse(ctx.Req, goproxy.ContentTypeText, http.StatusForbidden, refusal(rec)) //nolint:bodyclose // the proxy sends and closes it
		return goproxy.RejectConnect, hostport
	}
	return goproxy.OkConnect, hostport
}

// dialTunnel opens an allowed tunnel's connection, counting its bytes; the
// record is reported when the tunnel closes.
func (p *Proxy) dialTunnel(req *http.Request, network, addr string) (net.Conn, error) {
	g, rec := p.decide(req, addr)
	if g == nil { // decided in connect already; a second look fails closed
		p.audit(rec)
		return nil, errors.New(rec.Reason)
	}
	if !p.acquire(&rec) {
		p.audit(rec)
		return nil, errors.New(rec.Reason)
	}
	start := time.Now()
	c, err := p.dialer.DialContext(req.Context(), network, addr)
	if err != nil {
		p.release(rec.Source)
		rec.Reason, rec.Duration = "dialing: "+err.Error(), time.Since(start)
		p.audit(rec)
		return nil, err
	}
	return &countingConn{Conn: c, done: func(sent, received int64) {
		p.release(rec.Source)
		rec.Sent, rec.Received, rec.Duration = sent, received, time.Since(start)
		p.audit(rec)
	}}, nil
}

// request decides a plain HTTP request.
func (p *Proxy) request(r *http.Request, ctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	hostport := r.URL.Host
	if _, _, err := net.SplitHostPort(hostport); err != nil {
		// The port the transport will dial: the scheme's.
		port := "80"
		if strings.EqualFold(r.URL.Scheme, "https") {
			port = "443"
		}
		hostport = net.JoinHostPort(r.URL.Hostname(), port)
	}
	_, rec := p.decide(r, hostport)
	if !rec.Allowed {
		p.audit(rec)
		return r, goproxy.NewResponse(r, goproxy.ContentTypeText, http.StatusForbidden, refusal(rec))
	}
	if !p.acquire(&rec) {
		p.audit(rec)
		return r, goproxy.NewResponse(r, goproxy.ContentTypeText, http.StatusTooManyRequests, refusal(rec))
	}
	rec.Sent = max(r.ContentLength, 0)
	ctx.UserData = &pending{rec: rec, start: time.Now()}
	return r, nil
}

// pending is an allowed plain HTTP request on its way.
type pending struct {
	rec   Record
	start time.Time
}

// response reports an allowed plain HTTP request once its body is read.
func (p *Proxy) response(resp *http.Response, ctx *goproxy.ProxyCtx) *http.Response {
	pr, ok := ctx.UserData.(*pending)
	if !ok {
		return resp
	}
	if resp == nil {
		p.release(pr.rec.Source)
		pr.rec.Reason, pr.rec.Duration = "no response", time.Since(pr.start)
		if ctx.Error != nil {
			pr.rec.Reason = ctx.Error.Error()
		}
		p.audit(pr.rec)
		return resp
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// An upgraded connection (a websocket) is goproxy's to copy, and
		// its body is never closed: it is reported, and its slot given
		// back, as it starts.
		p.release(pr.rec.Source)
		pr.rec.Duration = time.Since(pr.start)
		p.audit(pr.rec)
		return resp
	}
	resp.Body = &countingBody{ReadCloser: resp.Body, done: func(n int64) {
		p.release(pr.rec.Source)
		pr.rec.Received, pr.rec.Duration = n, time.Since(pr.start)
		p.audit(pr.rec)
	}}
	return resp
}

// countingConn counts a tunnel's bytes and reports them once, on Close.
type countingConn struct {
	net.Conn
	sent, received atomic.Int64
	once           sync.Once
	done           func(sent, received int64)
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.received.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.sent.Add(int64(n))
	return n, err
}

func (c *countingConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.done(c.sent.Load(), c.received.Load()) })
	return err
}

// CloseWrite half-closes, as goproxy does to end one direction of a tunnel.
func (c *countingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// countingBody counts a response body and reports it once, on Close.
type countingBody struct {
	io.ReadCloser
	n    int64
	once sync.Once
	done func(int64)
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

func (b *countingBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() { b.done(b.n) })
	return err
}

// slogPrinter sends goproxy's log lines to the logger, at debug level.
type slogPrinter struct{ l *slog.Logger }

func (s slogPrinter) Printf(format string, v ...any) {
	s.l.DebugContext(context.Background(), "egress proxy", slog.String("detail", fmt.Sprintf(format, v...)))
}

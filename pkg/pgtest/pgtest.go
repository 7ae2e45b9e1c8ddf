// Package pgtest gives each test its own Postgres database, migrated with the
// same migrations as production.
//
// The server is either the one TEST_DATABASE_URL names (its user must be
// allowed to CREATE DATABASE) or, by default, one container per test binary
// started through testcontainers-go from POSTGRES_IMAGE (default
// "postgres:17"; CI sets the offline image). The container is labelled
// meshwork.test and removed when the binary's tests end, so call [Main] from
// TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// Databases are copied from a migrated template, which makes a fresh one cost
// a few milliseconds, and dropped when the test ends.
package pgtest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/meshwork/meshwork/migrations"
)

// DefaultImage is the Postgres image used when POSTGRES_IMAGE is unset.
const DefaultImage = "postgres:17"

// Label marks every container the tests start; `make test` removes whatever
// still carries it afterwards.
const Label = "meshwork.test"

var server struct {
	once     sync.Once
	err      error
	baseURL  *url.URL // admin connection; the path is swapped per database
	admin    *pgxpool.Pool
	ctr      *postgres.PostgresContainer
	template string // migrated database that test databases are copied from
	mu       sync.Mutex
}

// Main runs the package's tests, then removes the Postgres container and the
// template database, and exits with the tests' status.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main without the exit, for a TestMain with more to clean up: it
// returns the tests' status.
func Run(m *testing.M) int {
	code := m.Run()
	stop()
	return code
}

// DSN returns the URL of a new database with every migration applied, dropped
// when the test ends.
func DSN(tb testing.TB) string {
	tb.Helper()
	return newDatabase(tb, true)
}

// EmptyDSN returns the URL of a new, empty database (no migrations), dropped
// when the test ends. It is for testing the migrations themselves.
func EmptyDSN(tb testing.TB) string {
	tb.Helper()
	return newDatabase(tb, false)
}

// Pool returns a pool on a new migrated database, closed when the test ends.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	pool, _ := PoolAndDSN(tb)
	return pool
}

// EndAdvisoryLockHolders ends the connections that hold advisory locks on
// pool's database, as a Postgres restart would: for a test of what a lock's
// holder does when its lock is gone. It fails the test if none held one.
func EndAdvisoryLockHolders(tb testing.TB, pool *pgxpool.Pool) {
	tb.Helper()
	var ended bool
	if err := pool.QueryRow(context.Background(), `SELECT coalesce(bool_or(pg_terminate_backend(pid)), false) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&ended); err != nil || !ended {
		tb.Fatalf("pgtest: ending the advisory locks' connections: ended %v, %v", ended, err)
	}
}

// PoolAndDSN is Pool with the database's URL, for the processes a test
// starts on the same database (service replicas, a marketplace).
func PoolAndDSN(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	dsn := DSN(tb)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		tb.Fatalf("pgtest: connecting: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool, dsn
}

func newDatabase(tb testing.TB, migrated bool) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("pgtest: needs Postgres; skipped in -short mode")
	}
	server.once.Do(start)
	if server.err != nil {
		tb.Fatalf("pgtest: %v", server.err)
	}
	ctx := context.Background()
	name := "t_" + randomHex(8)
	stmt := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if migrated {
		stmt += " TEMPLATE " + pgx.Identifier{server.template}.Sanitize()
	}
	// Copies of one template are serialised: Postgres refuses a copy while
	// another session is connected to the template.
	server.mu.Lock()
	_, err := server.admin.Exec(ctx, stmt)
	server.mu.Unlock()
	if err != nil {
		tb.Fatalf("pgtest: creating database: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, err := server.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			tb.Errorf("pgtest: dropping database %s: %v", name, err)
		}
	})
	return databaseURL(name)
}

func databaseURL(name string) string {
	u := *server.baseURL
	u.Path = "/" + name
	return u.String()
}

func start() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dsn := os.Getenv("TEST_DATABASE_URL")
	if dsn == "" {
		var err error
		if dsn, err = startContainer(ctx); err != nil {
			server.err = err
			return
		}
	}
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		server.err = fmt.Errorf("TEST_DATABASE_URL must be a postgres:// URL")
		return
	}
	server.baseURL = u
	if server.admin, err = pgxpool.New(ctx, dsn); err != nil {
		server.err = fmt.Errorf("connecting to the test server: %w", err)
		return
	}
	server.template = "tmpl_" + randomHex(8)
	if _, err := server.admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{server.template}.Sanitize()); err != nil {
		server.err = fmt.Errorf("creating the template database: %w", err)
		return
	}
	db, err := migrations.Open(databaseURL(server.template))
	if err != nil {
		server.err = err
		return
	}
	defer db.Close()
	if _, err := migrations.Apply(ctx, db, nil); err != nil {
		server.err = fmt.Errorf("migrating the template database: %w", err)
	}
}

func startContainer(ctx context.Context) (string, error) {
	// Ryuk, testcontainers' reaper, is itself an image to pull; without a
	// registry it cannot start. Cleanup is by label instead (see Main and the
	// Makefile's test target).
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
		_ = os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	image := os.Getenv("POSTGRES_IMAGE")
	if image == "" {
		image = DefaultImage
	}
	ctr, err := postgres.Run(ctx, image,
		postgres.WithDatabase("postgres"),
		postgres.WithUsername("postgres"),
		postgres.WithPassword("postgres"),
		postgres.BasicWaitStrategies(),
		testcontainers.WithLabels(map[string]string{Label: fmt.Sprintf("pgtest-%d", os.Getpid())}),
		testcontainers.WithTmpfs(map[string]string{"/var/lib/postgresql/data": "rw"}),
	)
	server.ctr = ctr
	if err != nil {
		return "", fmt.Errorf("starting Postgres from image %s (set POSTGRES_IMAGE, e.g. to the image `make offline-images` builds, or TEST_DATABASE_URL): %w", image, err)
	}
	dsn, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		return "", err
	}
	return direct(ctx, ctr, dsn), nil
}

// direct points dsn at the container's own address when this host reaches
// it, rather than at the port the engine publishes on localhost: that port
// goes through the engine's userland proxy (docker-proxy), which copies
// every message once more and took a third of a core when the
// orchestrator's benchmarks ran a few thousand statements a second. No
// deployment has it between its services and Postgres (Compose connects
// them over their network). Where container addresses are not reachable
// (Docker Desktop's VM), the published port stays.
func direct(ctx context.Context, ctr *postgres.PostgresContainer, dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || !local(u.Hostname()) || !strings.HasPrefix(cmp.Or(os.Getenv("DOCKER_HOST"), "unix://"), "unix://") {
		// A remote engine (or a host override): its containers' addresses
		// are not this host's to reach.
		return dsn
	}
	ip, err := ctr.ContainerIP(ctx)
	if err != nil || ip == "" {
		return dsn
	}
	addr := net.JoinHostPort(ip, "5432")
	conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return dsn
	}
	_ = conn.Close()
	u.Host = addr
	return u.String()
}

// local reports whether host names this machine's loopback.
func local(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func stop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if server.admin != nil {
		if server.template != "" && server.ctr == nil {
			_, _ = server.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{server.template}.Sanitize()+" WITH (FORCE)")
		}
		server.admin.Close()
	}
	if server.ctr != nil {
		if err := testcontainers.TerminateContainer(server.ctr); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: removing the Postgres container: %v\n", err)
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

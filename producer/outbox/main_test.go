package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/qmq-go/qmq/pkg/testdb"
	"github.com/qmq-go/qmq/pkg/testutil"
)

// The package's tests run against real servers: one PostgreSQL and one
// MariaDB started here for the whole run (each test uses tables of its
// own), and a SQLite file per test. A server whose binaries are missing
// makes its tests skip with the reason.
var servers struct {
	pg, maria       *testdb.Server
	pgErr, mariaErr error
}

// mariaDatabase is the database the tests create on the MariaDB server.
const mariaDatabase = "outbox_test"

func TestMain(m *testing.M) {
	// The driver logs a killed connection (TestDatabaseErrorInSend kills
	// one on purpose) to the standard logger.
	mysql.SetLogger(log.New(io.Discard, "", 0))
	if role := testutil.ChildRole(); role != "" {
		os.Exit(runChild(role))
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); servers.pg, servers.pgErr = testdb.StartPostgres(testdb.Options{}) }()
	go func() {
		defer wg.Done()
		servers.maria, servers.mariaErr = testdb.StartMariaDB(testdb.Options{})
		if servers.mariaErr == nil {
			servers.mariaErr = createMariaDatabase(servers.maria)
		}
	}()
	wg.Wait()
	code := m.Run()
	for _, s := range []*testdb.Server{servers.pg, servers.maria} {
		if s != nil {
			if err := s.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "stop database:", err)
			}
		}
	}
	os.Exit(code)
}

func createMariaDatabase(s *testdb.Server) error {
	db, err := sql.Open("mysql", s.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Exec("CREATE DATABASE IF NOT EXISTS " + mariaDatabase)
	return err
}

// dbEnv is one database the behaviour tests run against.
type dbEnv struct {
	name    string
	dialect Dialect
	driver  string
	dsn     string
	db      *sql.DB
	// table and business are this test's outbox table and a business table
	// (id VARCHAR(64) PRIMARY KEY, state VARCHAR(32)).
	table, business string
}

var tableSeq atomic.Int64

// forEachDB runs fn as a subtest per database: postgres, mariadb, sqlite.
func forEachDB(t *testing.T, fn func(t *testing.T, e *dbEnv)) {
	t.Helper()
	for _, name := range []string{"postgres", "mariadb", "sqlite"} {
		t.Run(name, func(t *testing.T) { fn(t, openDB(t, name)) })
	}
}

// openDB opens the named database with fresh tables for the test, or skips.
func openDB(t *testing.T, name string) *dbEnv {
	t.Helper()
	n := tableSeq.Add(1)
	e := &dbEnv{name: name, table: fmt.Sprintf("ob_%d", n), business: fmt.Sprintf("biz_%d", n)}
	switch name {
	case "postgres":
		requireServer(t, "PostgreSQL", servers.pgErr)
		e.dialect, e.driver, e.dsn = Postgres, "pgx", servers.pg.DSN("postgres")
	case "mariadb":
		requireServer(t, "MariaDB", servers.mariaErr)
		e.dialect, e.driver, e.dsn = MySQL, "mysql", servers.maria.DSN(mariaDatabase)
	case "sqlite":
		e.dialect, e.driver, e.dsn = SQLite, "sqlite", sqliteDSN(filepath.Join(t.TempDir(), "app.db"))
	default:
		t.Fatalf("unknown database %q", name)
	}
	e.db = e.open(t)
	ctx := context.Background()
	if err := CreateSchema(ctx, e.db, e.dialect, WithTable(e.table)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.ExecContext(ctx, "CREATE TABLE "+e.business+" (id VARCHAR(64) NOT NULL PRIMARY KEY, state VARCHAR(32) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return e
}

// requireServer skips the test when the server's binaries are missing and
// fails it when the server is installed but did not start.
func requireServer(t *testing.T, name string, err error) {
	t.Helper()
	switch {
	case errors.Is(err, testdb.ErrNotInstalled):
		t.Skipf("%s not installed: %v", name, err)
	case err != nil:
		t.Fatalf("%s did not start: %v", name, err)
	}
}

// sqliteDSN opens path in WAL mode, waits up to 10 s for a lock and begins
// every transaction IMMEDIATE (takes the write lock at BEGIN), as doc.go
// recommends.
func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"
}

// open returns a new *sql.DB on the environment's database, closed when the
// test ends.
func (e *dbEnv) open(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open(e.driver, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// q rewrites ? placeholders as $1, $2, … for PostgreSQL.
func (e *dbEnv) q(query string) string { return rebind(e.dialect, query) }

func rebind(d Dialect, query string) string {
	if d != Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// count returns the number of rows of table matching where (args use ?).
func (e *dbEnv) count(t testing.TB, table, where string, args ...any) int {
	t.Helper()
	q := "SELECT COUNT(*) FROM " + table
	if where != "" {
		q += " WHERE " + where
	}
	var n int
	if err := e.db.QueryRow(e.q(q), args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFor polls cond every 10 ms for up to timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, timeout, what, cond)
}

package testdb

import (
	"database/sql"
	"errors"
	"os"
	"testing"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
)

func TestServers(t *testing.T) {
	for _, c := range []struct {
		kind, driver, query string
		start               func(Options) (*Server, error)
	}{
		{"postgres", "pgx", "SELECT current_setting('fsync')", StartPostgres},
		{"mariadb", "mysql", "SELECT @@innodb_flush_log_at_trx_commit", StartMariaDB},
	} {
		t.Run(c.kind, func(t *testing.T) {
			s, err := c.start(Options{Fsync: true})
			if errors.Is(err, ErrNotInstalled) {
				t.Skip(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Stop()
			if s.Kind != c.kind {
				t.Fatalf("kind %q", s.Kind)
			}
			db, err := sql.Open(c.driver, s.DSN(map[string]string{"postgres": "postgres", "mariadb": ""}[c.kind]))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var setting string
			if err := db.QueryRow(c.query).Scan(&setting); err != nil {
				t.Fatalf("query: %v\n%s", err, s.Output())
			}
			if setting != "on" && setting != "1" {
				t.Fatalf("Fsync set, server reports %q", setting)
			}
			dir := s.Dir()
			db.Close()
			if err := s.Stop(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Fatalf("directory %s left after Stop: %v", dir, err)
			}
			if err := s.Stop(); err != nil {
				t.Fatalf("second Stop: %v", err)
			}
		})
	}
}

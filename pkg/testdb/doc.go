// Package testdb starts throwaway database servers for tests and benchmarks:
// PostgreSQL (initdb + postgres) and MariaDB (mariadb-install-db + mariadbd)
// from the machine's binaries, each in a directory of its own under the
// system's temporary directory, listening on 127.0.0.1 at a free port and on
// a Unix socket in that directory. Stop ends the server (by its PID) and
// removes the directory.
//
// Nothing here imports a database driver: Server.DSN is handed to whatever
// driver the caller uses (pgx's stdlib driver for PostgreSQL,
// go-sql-driver/mysql for MariaDB).
//
// # Binaries
//
// PostgreSQL's are looked up in $PATH, then in /usr/lib/postgresql/*/bin
// (where Debian's postgresql package puts them); MariaDB's in $PATH, /usr/sbin
// and /usr/bin. When one is missing the Start function returns an error
// wrapping ErrNotInstalled, so a test can skip with that message.
//
// # Running as root
//
// postgres refuses to run as root. When the caller is root the data
// directory is given to the "postgres" user (or "nobody") and initdb and
// postgres run as that user; mariadbd runs with --user=root. Servers get
// SIGKILL if the process that started them dies (Pdeathsig), so a test binary
// that is killed does not leave them behind.
//
// # Settings
//
// PostgreSQL: trust authentication for user "postgres", database "postgres";
// fsync and synchronous_commit follow Options.Fsync. MariaDB: user "root"
// with an empty password over TCP, no default database (create one);
// innodb_flush_log_at_trx_commit is 1 with Options.Fsync and 2 without.
package testdb

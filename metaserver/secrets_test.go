package metaserver

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/metaserver/ctl"
	"github.com/qmq-go/qmq/pkg/config"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// observedServer starts a meta server whose log is kept for the test to
// search.
func observedServer(t *testing.T, endpoints []string, mod func(*Options)) (*Server, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	o := NewOptions()
	o.Addr, o.HTTPAddr, o.EtcdEndpoints = "127.0.0.1:0", "127.0.0.1:0", endpoints
	o.EtcdTimeout, o.BrokerTimeout = 2*time.Second, 2*time.Second
	if mod != nil {
		mod(&o)
	}
	s, err := New(o, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s, logs
}

// logText is every logged line with its fields, as one string.
func logText(logs *observer.ObservedLogs) string {
	var b strings.Builder
	for _, e := range logs.All() {
		fmt.Fprintf(&b, "%s %s %v\n", e.LoggerName, e.Message, e.ContextMap())
	}
	return b.String()
}

// TestSecrets_GeneratedTokenGoesToAFileNotTheLog: with no token a meta
// server generates one, writes it 0600 to the token file and logs only
// the file's path; a restart takes the same token from the file.
func TestSecrets_GeneratedTokenGoesToAFileNotTheLog(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	path := filepath.Join(t.TempDir(), "data", "admin-token")
	s, logs := observedServer(t, ep, func(o *Options) { o.AdminTokenFile = path })
	tok := s.AdminToken()
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, %v", fi, err)
	}
	if di, _ := os.Stat(filepath.Dir(path)); di.Mode().Perm() != 0o700 {
		t.Fatalf("token directory mode %v", di.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	if strings.TrimSpace(string(b)) != tok || len(tok) < 16 {
		t.Fatalf("file holds %q, server uses %q", b, tok)
	}
	text := logText(logs)
	if strings.Contains(text, tok) {
		t.Fatalf("the generated token was logged:\n%s", text)
	}
	if !strings.Contains(text, path) {
		t.Fatalf("the token file's path was not logged:\n%s", text)
	}
	if _, err := admin(s, tok).Whoami(context.Background()); err != nil {
		t.Fatalf("the generated token does not authenticate: %v", err)
	}
	s2, logs2 := observedServer(t, ep, func(o *Options) { o.AdminTokenFile = path })
	if s2.AdminToken() != tok || strings.Contains(logText(logs2), "generated") {
		t.Fatalf("a restart did not reuse the token file")
	}

	// A token file others may read, or a short one, is refused.
	loose := filepath.Join(t.TempDir(), "loose")
	if err := os.WriteFile(loose, []byte("a-long-enough-admin-token\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(t.TempDir(), "short")
	if err := os.WriteFile(short, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	colon := filepath.Join(t.TempDir(), "colon")
	if err := os.WriteFile(colon, []byte("name:looks-like-credentials\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{loose, short, colon} {
		o := NewOptions()
		o.EtcdEndpoints, o.AdminTokenFile = ep, p
		if _, err := New(o, nil); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("token file %s: %v, want ErrInvalidOptions", filepath.Base(p), err)
		}
	}
}

// TestSecrets_NeverLogged runs identity changes, good and bad credentials
// on both ports, and a flood of refusals through a meta server whose log
// is kept: no secret appears in it, and refusals are logged at a rate
// limit.
func TestSecrets_NeverLogged(t *testing.T) {
	t.Parallel()
	const token = "distinctive-admin-token-0123"
	s, logs := observedServer(t, startEtcd(t), func(o *Options) { o.AdminToken = token })
	ctx := context.Background()
	root := admin(s, token)
	out, err := root.CreateIdentity(ctx, api.IdentityRequest{Name: "billing", Kind: "app"})
	if err != nil {
		t.Fatal(err)
	}
	rot, err := root.RotateSecret(ctx, "billing", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.CreateIdentity(ctx, api.IdentityRequest{Name: "rt1", Kind: "broker", Secret: "chosen-broker-secret-42"}); err != nil {
		t.Fatal(err)
	}
	wrong := []string{"wrong-secret-number-one", "admin:wrong-secret-number-two"}
	for i := 0; i < 3*refusalLogMax; i++ {
		httpCall(t, s, "POST", "/groups/g1/readonly", "{}", bearer(wrong[i%2]))
	}
	httpCall(t, s, "POST", "/groups/g1/readonly", "{}", bearer(out.Credentials)) // rotated away: refused
	c := newClient(t)
	_ = c.tryAuth(s, "rt1:wrong-secret-number-three")
	c.auth(s, "rt1:chosen-broker-secret-42")

	text := logText(logs)
	for _, secret := range []string{token, out.Secret, rot.Secret, "chosen-broker-secret-42", "wrong-secret-number"} {
		if strings.Contains(text, secret) {
			t.Fatalf("secret %q is in the log:\n%s", secret, text)
		}
	}
	if n := logs.FilterMessage("request refused").Len(); n != refusalLogMax {
		t.Fatalf("%d refusals logged in one window, want %d (the rest counted)", n, refusalLogMax)
	}
	if !strings.Contains(text, "identity admin created") {
		t.Fatalf("bootstrap not logged:\n%s", text)
	}
}

// TestSecrets_NotFromTheCommandLineOrConfigFile: --admin-token and the
// admin-token key are refused with a message saying what to use; the
// environment works, short tokens do not.
func TestSecrets_NotFromTheCommandLineOrConfigFile(t *testing.T) {
	t.Parallel()
	parse := func(args []string, yaml string) error {
		o := NewOptions()
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(new(bytes.Buffer))
		o.AddFlags(fs)
		if yaml != "" {
			path := filepath.Join(t.TempDir(), "meta.yaml")
			if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			args = append([]string{"--config", path}, args...)
		}
		return config.Parse(fs, args, nil)
	}
	if err := parse([]string{"--admin-token", "whatever-token-value"}, ""); err == nil || !strings.Contains(err.Error(), "--admin-token-file") {
		t.Fatalf("--admin-token: %v", err)
	}
	for _, args := range [][]string{{"--admin-token", "whatever-token-value"}, {"-admin-token=whatever-token-value"}, {"--addr", "x", "--admin-token=whatever-token-value"}} {
		if err := RefuseSecretArgs(args); !errors.Is(err, ErrInvalidOptions) || strings.Contains(err.Error(), "whatever-token-value") {
			t.Fatalf("RefuseSecretArgs(%q): %v", args, err)
		}
	}
	if err := RefuseSecretArgs([]string{"--admin-token-file", "f", "--", "--admin-token"}); err != nil {
		t.Fatalf("RefuseSecretArgs of allowed arguments: %v", err)
	}
	if err := parse(nil, "admin-token: whatever-token-value\n"); err == nil || !strings.Contains(err.Error(), "--admin-token-file") || !strings.Contains(err.Error(), EnvAdminToken) {
		t.Fatalf("admin-token in the config file: %v", err)
	}
	if err := parse(nil, "admin-token-file: /x/y\nauth: true\ncredentials-file: /x/z\n"); err != nil {
		t.Fatalf("the new keys: %v", err)
	}
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	o := NewOptions()
	env[EnvAdminToken] = "short"
	if err := o.FromEnvironment(getenv); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("short token from the environment: %v", err)
	}
	env[EnvAdminToken], env[EnvCredentials] = "an-admin-token-from-env\n", "ops:ops-secret-xyz"
	if err := o.FromEnvironment(getenv); err != nil || o.AdminToken != "an-admin-token-from-env" || o.Credentials.Name != "ops" {
		t.Fatalf("from the environment: %+v %v", o, err)
	}
	env[EnvCredentials] = "no colon"
	o = NewOptions()
	if err := o.FromEnvironment(getenv); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("bad credentials in the environment: %v", err)
	}
}

// TestSecrets_HelpShowsNoSecrets: with secrets in the environment, no
// --help text (the meta server's flags, qmqctl and its subcommands)
// shows them, and qmqctl refuses a token on its command line.
func TestSecrets_HelpShowsNoSecrets(t *testing.T) {
	secrets := map[string]string{EnvAdminToken: "env-admin-token-4f1c9e2a", ctl.EnvToken: "env-ctl-token-8d3b7a61", EnvCredentials: "relay:env-relay-secret-5e2d"}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	var help bytes.Buffer
	o := NewOptions()
	fs := flag.NewFlagSet("qmq-metaserver", flag.ContinueOnError)
	o.AddFlags(fs)
	fs.SetOutput(&help)
	fs.PrintDefaults()
	for _, args := range [][]string{{"--help"}, {"identity", "add", "--help"}, {"grant", "--help"}, {"status", "--help"}} {
		var out, errOut bytes.Buffer
		if code := ctl.Main(args, &out, &errOut); code != ctl.ExitOK {
			t.Fatalf("qmqctl %v: exit %d: %s", args, code, errOut.String())
		}
		help.Write(out.Bytes())
		help.Write(errOut.Bytes())
	}
	text := help.String()
	for _, v := range []string{"env-admin-token-4f1c9e2a", "env-ctl-token-8d3b7a61", "env-relay-secret-5e2d"} {
		if strings.Contains(text, v) {
			t.Fatalf("secret %s from the environment is in the help text:\n%s", v, text)
		}
	}
	for _, want := range []string{"--token-file", "admin-token-file", "credentials-file"} {
		if !strings.Contains(text, want) {
			t.Fatalf("help lacks %s:\n%s", want, text)
		}
	}
	var out, errOut bytes.Buffer
	if code := ctl.Main([]string{"--token", "x", "status"}, &out, &errOut); code != ctl.ExitUsage || !strings.Contains(errOut.String(), "--token-file") {
		t.Fatalf("qmqctl --token: exit %d: %s", code, errOut.String())
	}
}

// TestQmqctl_Identities runs the identity commands: add prints the secret
// once, list and show never do, and each change takes effect.
func TestQmqctl_Identities(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), nil)
	tok := tokenFlag(t, testToken)
	run := qmqctlRunner(t, s.HTTPAddr().String())
	out := run(0, tok, "identity", "add", "billing", "--kind", "app", "--publish", "order.*", "--consume", "order.*", "--consumer-group", "billing")
	creds := ""
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "credentials" {
			creds = f[1]
		}
	}
	if !strings.HasPrefix(creds, "billing:") {
		t.Fatalf("add printed no credentials:\n%s", out)
	}
	secret := strings.TrimPrefix(creds, "billing:")
	if strings.Contains(run(0, tok, "identity", "list"), secret) || strings.Contains(run(0, tok, "identity", "show", "billing", "--json"), secret) {
		t.Fatal("list or show prints the secret")
	}
	if !strings.Contains(run(0, tok, "identity", "show", "billing"), "order.*") {
		t.Fatal("show lacks the grants")
	}
	// The new identity: whoami works, changes are forbidden (exit 3).
	appTok := tokenFlag(t, creds)
	if !strings.Contains(run(0, appTok, "whoami"), "app:billing") {
		t.Fatal("whoami as billing")
	}
	run(ctl.ExitUnauthorized, appTok, "identity", "rm", "billing")
	run(ctl.ExitUnauthorized, appTok, "identity", "list")
	run(ctl.ExitUnauthorized, "identity", "list")
	// A broker with a chosen secret, grants, revokes, disable, rotate.
	secretFile := filepath.Join(t.TempDir(), "rt1-secret")
	if err := os.WriteFile(secretFile, []byte("a-chosen-broker-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := run(0, tok, "identity", "add", "rt1", "--kind", "broker", "--secret-file", secretFile); strings.Contains(out, "a-chosen-broker-secret") || !strings.Contains(out, "rt1") {
		t.Fatalf("add with --secret-file:\n%s", out)
	}
	_ = os.Chmod(secretFile, 0o644)
	run(ctl.ExitUsage, tok, "identity", "add", "rt2", "--kind", "broker", "--secret-file", secretFile)
	run(ctl.ExitUsage, tok, "identity", "add", "rt2", "--kind", "robot")
	run(0, tok, "identity", "add", "viewer", "--kind", "admin", "--admin", "read")
	has := func(out string, subs ...string) {
		t.Helper()
		for _, sub := range subs {
			if !strings.Contains(out, sub) {
				t.Fatalf("output lacks %q:\n%s", sub, out)
			}
		}
	}
	has(run(0, tok, "grant", "viewer", "--admin", "write", "--read-bodies"), "write", "true")
	has(run(0, tok, "revoke", "viewer", "--admin"), "viewer")
	has(run(0, tok, "grant", "billing", "--publish", "invoice"), "order.*,invoice")
	has(run(0, tok, "revoke", "billing", "--publish", "order.*"), "invoice")
	run(ctl.ExitUsage, tok, "grant", "billing")
	run(ctl.ExitUsage, tok, "grant", "billing", "--admin", "root")
	run(ctl.ExitUsage, tok, "grant", "billing", "--admin", "write") // 400: an app has no admin role
	has(run(0, tok, "identity", "disable", "billing"), "disabled")
	run(ctl.ExitUnauthorized, appTok, "whoami")
	has(run(0, tok, "identity", "enable", "billing"), "enabled")
	rotated := run(0, tok, "identity", "rotate", "billing")
	has(rotated, "new secret", "credentials")
	run(ctl.ExitUnauthorized, appTok, "whoami")
	run(ctl.ExitFailed, tok, "identity", "rm", "admin") // 409: the last writer
	has(run(0, tok, "identity", "rm", "billing"), "removed")
	run(ctl.ExitNotFound, tok, "identity", "show", "billing")
	if code := httpStatusOf(t, s, "billing"); code != http.StatusNotFound {
		t.Fatalf("billing after rm: %d", code)
	}
}

func httpStatusOf(t *testing.T, s *Server, name string) int {
	status, _ := httpCall(t, s, "GET", "/identities/"+name, "", bearer(testToken))
	return status
}

package metaserver

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/qmq-go/qmq/pkg/auth"
	"go.uber.org/zap"
)

// adminToken returns the admin token: Options.AdminToken, else the content
// of Options.AdminTokenFile (generated there when the file does not
// exist), else a token made for this process. A generated token is never
// logged: only the file it went to.
func adminToken(o *Options, lg *zap.Logger) (string, error) {
	tok, err := readAdminToken(o, lg)
	if err == nil && strings.ContainsAny(tok, ": \t\n") {
		// A bare bearer token names identity admin; "x:y" names identity x.
		err = fmt.Errorf("%w: the admin token must not contain ':' or white space", ErrInvalidOptions)
	}
	return tok, err
}

func readAdminToken(o *Options, lg *zap.Logger) (string, error) {
	if o.AdminToken != "" {
		return o.AdminToken, nil
	}
	if o.AdminTokenFile == "" {
		lg.Info("no admin token configured; made one for this process only (Server.AdminToken)")
		return auth.GenerateSecret()
	}
	tok, err := auth.ReadSecretFile(o.AdminTokenFile)
	switch {
	case err == nil:
		if err := auth.CheckSecret(tok); err != nil {
			return "", fmt.Errorf("%w: admin token file %s: %w", ErrInvalidOptions, o.AdminTokenFile, err)
		}
		return tok, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("%w: admin token file: %w", ErrInvalidOptions, err)
	}
	tok, err = auth.GenerateSecret()
	if err != nil {
		return "", err
	}
	if err := auth.WriteSecretFile(o.AdminTokenFile, []byte(tok+"\n")); err != nil {
		return "", fmt.Errorf("metaserver: writing the generated admin token: %w", err)
	}
	lg.Warn("no admin token configured; generated one (identity admin) and wrote it to a file only this user can read",
		zap.String("file", o.AdminTokenFile))
	return tok, nil
}

// relayCredentials returns what the meta server presents to brokers:
// Options.Credentials, else the content of Options.CredentialsFile, else
// identity admin with the admin token.
func relayCredentials(o *Options, token string) (auth.Credentials, error) {
	if o.Credentials != (auth.Credentials{}) {
		return o.Credentials, nil
	}
	if o.CredentialsFile != "" {
		c, err := auth.ReadCredentialsFile(o.CredentialsFile)
		if err != nil {
			return auth.Credentials{}, fmt.Errorf("%w: credentials file: %w", ErrInvalidOptions, err)
		}
		return c, nil
	}
	return auth.Credentials{Name: AdminIdentity, Secret: token}, nil
}

// DefaultAdminTokenFile is where the binary keeps the admin token under
// its data directory when neither a file nor the environment names one.
func DefaultAdminTokenFile(dataDir string) string {
	return filepath.Join(dataDir, "admin-token")
}

package transport

import (
	"fmt"
	"os"

	"github.com/qmq-go/qmq/pkg/auth"
)

// CredentialsEnv is the environment variable CredentialsFromEnv reads:
// "name:secret".
const CredentialsEnv = "QMQ_CREDENTIALS"

// CredentialsFromEnv returns the credentials in $QMQ_CREDENTIALS
// ("name:secret"), or nil when it is unset or empty. A malformed value is
// an error that does not repeat it.
func CredentialsFromEnv() (*auth.Credentials, error) {
	v := os.Getenv(CredentialsEnv)
	if v == "" {
		return nil, nil
	}
	c, err := auth.ParseCredentials(v)
	if err != nil {
		return nil, fmt.Errorf("$%s: %w", CredentialsEnv, err)
	}
	return &c, nil
}

// CredentialsFromFile returns the credentials in the file at path
// ("name:secret", a final newline allowed). Only the file's owner may
// read it (mode 0600 or stricter).
func CredentialsFromFile(path string) (*auth.Credentials, error) {
	c, err := auth.ReadCredentialsFile(path)
	if err != nil {
		return nil, err
	}
	return &c, nil
}

package auth

import (
	"bytes"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Secret hashing: PBKDF2-SHA256 with a random salt.
const (
	// SecretAlgorithm names the hash in SecretHash.Algorithm.
	SecretAlgorithm = "pbkdf2-sha256"
	// SecretIterations is the PBKDF2 round count of new hashes.
	SecretIterations = 50_000
	// MinSecretLen is the shortest secret HashSecret takes.
	MinSecretLen = 16
	// MaxSecretLen is the longest secret HashSecret takes (what a
	// protocol.AuthRequest can carry).
	MaxSecretLen  = 1<<16 - 1
	secretSaltLen = 16
	secretKeyLen  = 32
)

// hashIterations is the round count new hashes get: SecretIterations, but
// this package's tests lower it (a hash records its own count, so verifying
// is unaffected), since the race detector makes each hash cost seconds.
var hashIterations = SecretIterations

// SecretHash is a secret as stored: never the secret itself.
type SecretHash struct {
	Algorithm  string `json:"algorithm"`
	Iterations int    `json:"iterations"`
	Salt       []byte `json:"salt"`
	Hash       []byte `json:"hash"`
}

// HashSecret hashes a secret for storage. Secrets shorter than
// MinSecretLen are refused.
func HashSecret(secret string) (*SecretHash, error) {
	if err := CheckSecret(secret); err != nil {
		return nil, err
	}
	return HashSecretAnyLength(secret)
}

// CheckSecret reports whether secret may be hashed by HashSecret: at least
// MinSecretLen characters, at most MaxSecretLen.
func CheckSecret(secret string) error {
	switch {
	case len(secret) < MinSecretLen:
		return fmt.Errorf("%w: secret of %d characters (at least %d)", ErrInvalid, len(secret), MinSecretLen)
	case len(secret) > MaxSecretLen:
		return fmt.Errorf("%w: secret of %d characters (at most %d)", ErrInvalid, len(secret), MaxSecretLen)
	}
	return nil
}

// HashSecretAnyLength hashes a non-empty secret without HashSecret's
// length rule: for a bootstrap secret handed over in code (tests that
// predate the rule). Secrets people choose or configure go through
// HashSecret.
func HashSecretAnyLength(secret string) (*SecretHash, error) {
	if secret == "" || len(secret) > MaxSecretLen {
		return nil, fmt.Errorf("%w: secret of %d characters", ErrInvalid, len(secret))
	}
	salt := make([]byte, secretSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return nil, err
	}
	key, err := pbkdf2.Key(sha256.New, secret, salt, hashIterations, secretKeyLen)
	if err != nil {
		return nil, err
	}
	return &SecretHash{Algorithm: SecretAlgorithm, Iterations: hashIterations, Salt: salt, Hash: key}, nil
}

// Verify reports whether secret is the one h was made from. It takes the
// full PBKDF2 time (Authority caches the answers).
func (h *SecretHash) Verify(secret string) bool {
	if h.validate() != nil {
		return false
	}
	key, err := pbkdf2.Key(sha256.New, secret, h.Salt, h.Iterations, len(h.Hash))
	return err == nil && subtle.ConstantTimeCompare(key, h.Hash) == 1
}

// Equal reports whether h and o are the same stored hash (algorithm,
// rounds, salt and key).
func (h *SecretHash) Equal(o *SecretHash) bool {
	if h == o {
		return true
	}
	if h == nil || o == nil {
		return false
	}
	return h.Algorithm == o.Algorithm && h.Iterations == o.Iterations &&
		bytes.Equal(h.Salt, o.Salt) && bytes.Equal(h.Hash, o.Hash)
}

func (h *SecretHash) validate() error {
	switch {
	case h.Algorithm != SecretAlgorithm:
		return fmt.Errorf("%w: secret hash algorithm %q (want %s)", ErrInvalid, h.Algorithm, SecretAlgorithm)
	case h.Iterations < 1000 || h.Iterations > 10_000_000:
		return fmt.Errorf("%w: secret hash of %d iterations", ErrInvalid, h.Iterations)
	case len(h.Salt) < 8 || len(h.Hash) < 16 || len(h.Hash) > 64:
		return fmt.Errorf("%w: secret hash with a %d-byte salt and a %d-byte key", ErrInvalid, len(h.Salt), len(h.Hash))
	}
	return nil
}

// GenerateSecret returns a new random secret: 32 bytes in base64url, 43
// characters.
func GenerateSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Credentials are what a client presents: an identity's name and secret.
type Credentials struct {
	Name   string
	Secret string
}

// String returns "name:secret": keep it out of logs.
func (c Credentials) String() string { return c.Name + ":" + c.Secret }

// ParseCredentials reads "name:secret" (surrounding white space, such as
// a file's final newline, is ignored).
func ParseCredentials(s string) (Credentials, error) {
	s = strings.TrimSpace(s)
	name, secret, ok := strings.Cut(s, ":")
	if !ok || secret == "" {
		return Credentials{}, fmt.Errorf("%w: credentials must be written name:secret", ErrInvalid)
	}
	if err := ValidateName(name); err != nil {
		return Credentials{}, fmt.Errorf("credentials: %w", err)
	}
	return Credentials{Name: name, Secret: secret}, nil
}

// ReadCredentialsFile reads "name:secret" from a file. The file must not
// be readable by others than its owner (mode 0600 or stricter): a secret
// the whole machine can read is not one.
func ReadCredentialsFile(path string) (Credentials, error) {
	s, err := ReadSecretFile(path)
	if err != nil {
		return Credentials{}, err
	}
	c, err := ParseCredentials(s)
	if err != nil {
		return Credentials{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ReadSecretFile reads a secret (a token, a "name:secret" line) from a
// file that only its owner may read, trimmed of white space.
func ReadSecretFile(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%w: %s has mode %#o: a secret file must be readable by its owner only (chmod 600)", ErrInvalid, path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// WriteSecretFile writes data to path so that only its owner can read it
// (mode 0600, its directory made 0700 when missing) and a crash leaves the
// old content or the new, never a mix: "<path>.tmp", fsync, rename, fsync
// the directory. It serves secrets (a generated admin token) and the policy
// a broker caches (it holds secret hashes).
func WriteSecretFile(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	// A leftover temp file of another mode keeps it: make it 0600 first.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

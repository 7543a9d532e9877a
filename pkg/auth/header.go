package auth

import (
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"strings"
)

// DefaultAdminName is the identity a bare bearer secret names: the meta
// server's admin token belongs to it.
const DefaultAdminName = "admin"

// ParseAuthorization reads an HTTP Authorization header: "Bearer
// name:secret", "Bearer secret" (identity DefaultAdminName) or "Basic
// base64(name:secret)". ok is false when the header is empty; a header
// that is not one of these is ErrInvalid.
func ParseAuthorization(h string) (c Credentials, ok bool, err error) {
	h = strings.TrimSpace(h)
	if h == "" {
		return Credentials{}, false, nil
	}
	scheme, value, _ := strings.Cut(h, " ")
	value = strings.TrimSpace(value)
	bad := fmt.Errorf("%w: Authorization header (Bearer name:secret, Bearer token or Basic)", ErrInvalid)
	switch strings.ToLower(scheme) {
	case "bearer":
		if value == "" {
			return Credentials{}, true, bad
		}
		if n, sec, found := strings.Cut(value, ":"); found {
			return Credentials{Name: n, Secret: sec}, true, nil
		}
		return Credentials{Name: DefaultAdminName, Secret: value}, true, nil
	case "basic":
		b, err := base64.StdEncoding.DecodeString(value)
		if err != nil {
			return Credentials{}, true, bad
		}
		n, sec, found := strings.Cut(string(b), ":")
		if !found {
			return Credentials{}, true, bad
		}
		return Credentials{Name: n, Secret: sec}, true, nil
	}
	return Credentials{}, true, bad
}

// HTTPPrincipal is who an HTTP request is: the identity of its verified
// client certificate (verified holds the chain crypto/tls verified, nil
// without one), else of its Authorization header (checked against a),
// else nil (no credential). A credential that does not authenticate is an
// error.
func HTTPPrincipal(a *Authority, header string, verified [][]*x509.Certificate) (*Principal, error) {
	if a == nil {
		a = NewAuthority(nil)
	}
	if len(verified) > 0 && len(verified[0]) > 0 {
		return a.Certificate(verified[0][0])
	}
	c, ok, err := ParseAuthorization(header)
	if !ok || err != nil {
		return nil, err
	}
	return a.Authenticate(c.Name, c.Secret)
}

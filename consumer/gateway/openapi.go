package gateway

import (
	_ "embed"
	"net/http"
)

// openAPI is the gateway's OpenAPI 3 document, committed beside the code
// and checked against the running gateway by TestOpenAPI_MatchesGateway.
//
//go:embed openapi.json
var openAPI []byte

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPI)
}

package metaserver

import (
	"embed"
	"io/fs"
	"net/http"
)

// The web console is plain HTML, CSS and JavaScript embedded in the binary
// (no build step). It is a single page that reads the admin API and, with a
// credential typed into its login form (kept in the browser's
// localStorage), performs the admin actions the credential's identity may.
//
//go:embed console
var consoleFiles embed.FS

func consoleHandler() http.Handler {
	sub, err := fs.Sub(consoleFiles, "console")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

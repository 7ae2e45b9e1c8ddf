package migrations

import (
	"embed"
	"io/fs"
)

//go:embed *.sql
var files embed.FS

// FS returns the SQL migrations, named NNNNN_description.sql.
func FS() fs.FS { return files }

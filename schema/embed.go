// Package schema holds the goose SQL migrations that define the runledger
// database. They are the only DDL in the project: sqlc reads them as its
// schema and package goose applies them.
package schema

import "embed"

// FS holds every migration file (NNNNN_name.sql) at its root, in goose's
// SQL format with Up and Down sections.
//
//go:embed *.sql
var FS embed.FS

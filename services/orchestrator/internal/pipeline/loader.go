package pipeline

import (
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"

	"github.com/meshwork/meshwork/pkg/workerdef"
)

// MaxFileSize is the largest pipeline file, or system prompt file, Load reads.
const MaxFileSize = 1 << 20

// Load reads the pipeline in file, a path in fsys, and validates and compiles
// it. Role system_prompt paths are resolved against the file's directory in
// fsys. On failure the error is an [Errors] listing every problem as
// file:line:col: message.
func Load(fsys fs.FS, file string) (*Pipeline, error) {
	data, err := readFile(fsys, file)
	if err != nil {
		return nil, Errors{{File: file, Line: 1, Column: 1, Msg: err.Error()}}
	}
	var def Definition
	pos, err := workerdef.DecodeYAML(file, data, "pipeline", &def)
	if err != nil {
		return nil, sortErrors(asErrors(file, err))
	}
	c := &compiler{fsys: fsys, file: file, pos: pos, def: &def}
	p := c.compile()
	if len(c.errs) > 0 {
		return nil, sortErrors(c.errs)
	}
	return p, nil
}

// Catalog is a set of pipelines by name.
type Catalog struct {
	byName map[string]*Pipeline
}

// Lookup returns the pipeline with the given name.
func (c *Catalog) Lookup(name string) (*Pipeline, bool) {
	p, ok := c.byName[name]
	return p, ok
}

// Pipelines returns every pipeline of the catalog, by name.
func (c *Catalog) Pipelines() []*Pipeline {
	out := make([]*Pipeline, 0, len(c.byName))
	for _, p := range c.byName {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *Pipeline) int { return strings.Compare(a.Name(), b.Name()) })
	return out
}

// LoadDir loads every *.yaml and *.yml file at the root of fsys as a pipeline
// into a catalog. Names must be unique across the files. On failure the error
// is an [Errors] listing every problem of every file, or the error reading
// the directory.
func LoadDir(fsys fs.FS) (*Catalog, error) {
	names, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("reading the pipeline directory: %w", err)
	}
	cat := &Catalog{byName: map[string]*Pipeline{}}
	var errs Errors
	for _, e := range names { // ReadDir sorts by name
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".yaml") && !strings.HasSuffix(name, ".yml") {
			continue
		}
		p, err := Load(fsys, name)
		if err != nil {
			errs = append(errs, asErrors(name, err)...)
			continue
		}
		if prev, dup := cat.byName[p.Name()]; dup {
			n := p.namePos
			errs = append(errs, &Error{File: name, Line: n.Line, Column: n.Column, Msg: fmt.Sprintf("duplicate pipeline name %q: already defined in %s", p.Name(), prev.File())})
			continue
		}
		cat.byName[p.Name()] = p
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return cat, nil
}

func readFile(fsys fs.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	_ = f.Close() // only read from
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("file is larger than %d bytes", MaxFileSize)
	}
	return data, nil
}

// asErrors returns err as Errors; an error without a position is placed at
// the start of file.
func asErrors(file string, err error) Errors {
	if es := workerdef.AsErrors(err); es != nil {
		return es
	}
	return Errors{{File: file, Line: 1, Column: 1, Msg: err.Error()}}
}

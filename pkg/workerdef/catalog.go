package workerdef

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/meshwork/meshwork/pkg/gate"
	"github.com/meshwork/meshwork/pkg/meshtype"
)

// MaxFileSize is the largest definition file Load reads.
const MaxFileSize = 1 << 20

//go:embed defaults.yaml
var defaultsYAML []byte

// Entry is one resolved definition of a catalog.
type Entry struct {
	// Definition is the definition after extends and defaults.
	Definition meshtype.Definition
	// File is where the definition was written, relative to the catalog root.
	File string
	// Hash is the hex SHA-256 of the resolved definition's JSON: the version
	// recorded with every action run under it.
	Hash string
	// Gate is the definition's compiled constraint gate.
	Gate *gate.Gate
	// SystemPrompt is the text of the agent's system_prompt file, if any.
	SystemPrompt string
}

// Catalog is a set of resolved worker definitions.
type Catalog struct {
	entries map[string]*Entry
}

// Lookup returns the definition with the given id, abstract ones included.
func (c *Catalog) Lookup(id string) (*Entry, bool) {
	e, ok := c.entries[id]
	return e, ok
}

// Entries returns the definitions that can be spawned (not abstract), by id.
func (c *Catalog) Entries() []*Entry {
	out := make([]*Entry, 0, len(c.entries))
	for _, e := range c.entries {
		if !e.Definition.Abstract {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *Entry) int { return strings.Compare(a.Definition.ID, b.Definition.ID) })
	return out
}

// source is one parsed definition file.
type source struct {
	file    string
	root    *yaml.Node // the document's mapping
	id      string
	extends string
	extNode *yaml.Node
}

// loader carries the state of one Load.
type loader struct {
	fsys     fs.FS
	origin   map[*yaml.Node]string
	sources  map[string]*source // by id
	merged   map[string]*yaml.Node
	defaults *yaml.Node
	errs     Errors
}

// Load reads every *.yaml and *.yml file at the root of fsys as a worker
// definition and resolves them into a catalog. Agent system_prompt paths are
// resolved against fsys too. On failure the error is an [Errors] listing every
// problem as file:line:col: message.
func Load(fsys fs.FS) (*Catalog, error) {
	l := &loader{fsys: fsys, origin: map[*yaml.Node]string{}, sources: map[string]*source{}, merged: map[string]*yaml.Node{}}
	var err error
	if l.defaults, err = l.parse("(defaults)", defaultsYAML); err != nil {
		panic("workerdef: bad built-in defaults: " + err.Error())
	}
	names, err := fs.Glob(fsys, "*.y*ml")
	if err != nil {
		return nil, err
	}
	var files []string
	for _, n := range names {
		if strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml") {
			files = append(files, n)
		}
	}
	slices.Sort(files)
	for _, f := range files {
		l.addFile(f)
	}
	ids := make([]string, 0, len(l.sources))
	for id := range l.sources {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int { return strings.Compare(l.sources[a].file, l.sources[b].file) })

	cat := &Catalog{entries: map[string]*Entry{}}
	for _, id := range ids {
		if e := l.resolveEntry(id); e != nil {
			cat.entries[id] = e
		}
	}
	if len(l.errs) > 0 {
		return nil, l.errs
	}
	return cat, nil
}

func (l *loader) failAt(file string, n *yaml.Node, format string, args ...any) {
	e := &Error{File: file, Line: 1, Column: 1, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	l.errs = append(l.errs, e)
}

// parse reads one YAML document into a mapping node, recording each node's file.
func (l *loader) parse(file string, data []byte) (*yaml.Node, error) {
	root, err := workerFormat.loadDocument(file, data)
	if err != nil {
		return nil, err
	}
	// Record each node's file, and refuse duplicate keys here, per file: once
	// merged onto a base, a duplicate could no longer be told apart.
	var dupErr error
	var mark func(*yaml.Node)
	mark = func(n *yaml.Node) {
		l.origin[n] = file
		if n.Kind == yaml.MappingNode && dupErr == nil {
			seen := map[string]int{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				if first, dup := seen[k.Value]; dup && k.Kind == yaml.ScalarNode {
					dupErr = &Error{File: file, Line: k.Line, Column: k.Column, Msg: fmt.Sprintf("duplicate key %q (first written at line %d)", k.Value, first)}
				}
				seen[k.Value] = k.Line
			}
		}
		for _, c := range n.Content {
			mark(c)
		}
	}
	mark(root)
	if dupErr != nil {
		return nil, dupErr
	}
	return root, nil
}

// yamlError turns a YAML syntax error into an Error with its position.
func yamlError(file string, data []byte, err error) error {
	var le *yaml.LoadError
	if errors.As(err, &le) {
		line, col := max(le.Mark.Line, 1), max(le.Mark.Column, 1)
		msg := le.Message
		if i := le.Mark.Index; i >= 0 && i < len(data) && data[i] == '\t' {
			msg += " (a tab: YAML is indented with spaces)"
		}
		return &Error{File: file, Line: line, Column: col, Msg: msg}
	}
	return &Error{File: file, Line: 1, Column: 1, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
}

func (l *loader) addFile(file string) {
	f, err := l.fsys.Open(file)
	if err != nil {
		l.failAt(file, nil, "%v", err)
		return
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	_ = f.Close()
	if err != nil {
		l.failAt(file, nil, "%v", err)
		return
	}
	if len(data) > MaxFileSize {
		l.failAt(file, nil, "file is larger than %d bytes", MaxFileSize)
		return
	}
	root, err := l.parse(file, data)
	if err != nil {
		l.errs = append(l.errs, AsErrors(err)...)
		return
	}
	src := &source{file: file, root: root}
	idNode := mappingValue(root, "id")
	if idNode == nil || idNode.Kind != yaml.ScalarNode || idNode.Value == "" {
		l.failAt(file, root, "missing id: every definition needs an id such as %q", "my_worker_v1")
		return
	}
	src.id = idNode.Value
	if ext := mappingValue(root, "extends"); ext != nil && !isNull(ext) {
		if ext.Kind != yaml.ScalarNode {
			l.failAt(file, ext, "extends: want the id of a definition, got %s", kindName(ext))
			return
		}
		src.extends, src.extNode = ext.Value, ext
	}
	if prev, dup := l.sources[src.id]; dup {
		l.failAt(file, idNode, "duplicate id %q: already defined in %s", src.id, prev.file)
		return
	}
	l.sources[src.id] = src
}

// mergedTree returns a definition's YAML merged onto its extends chain and the
// defaults, or nil after reporting an unknown or cyclic extends.
func (l *loader) mergedTree(id string, chain []string) *yaml.Node {
	if m, ok := l.merged[id]; ok {
		return m
	}
	src := l.sources[id]
	base := l.defaults
	if src.extends != "" {
		full := append(slices.Clone(chain), id)
		if i := slices.Index(full, src.extends); i >= 0 {
			cycle := append(full[i:], src.extends)
			l.failAt(src.file, src.extNode, "extends cycle: %s", strings.Join(cycle, " -> "))
			l.merged[id] = nil
			return nil
		}
		if _, ok := l.sources[src.extends]; !ok {
			l.failAt(src.file, src.extNode, "extends unknown definition %q", src.extends)
			l.merged[id] = nil
			return nil
		}
		if base = l.mergedTree(src.extends, append(chain, id)); base == nil {
			l.merged[id] = nil
			return nil
		}
	}
	m := l.merge(base, src.root, true)
	l.merged[id] = m
	return m
}

// merge deep-merges over onto base: mappings merge key by key, anything else
// (lists included) is replaced. At the top level a base's abstract flag is not
// inherited. The result shares nodes with its inputs, keeping their positions.
func (l *loader) merge(base, over *yaml.Node, top bool) *yaml.Node {
	if base == nil || base.Kind != yaml.MappingNode || over.Kind != yaml.MappingNode {
		return over
	}
	out := &yaml.Node{Kind: yaml.MappingNode, Tag: over.Tag, Line: over.Line, Column: over.Column}
	l.origin[out] = l.origin[over]
	for i := 0; i+1 < len(base.Content); i += 2 {
		k, v := base.Content[i], base.Content[i+1]
		if top && k.Value == "abstract" {
			continue
		}
		if ok, ov := mappingPair(over, k.Value); ok != nil {
			out.Content = append(out.Content, ok, l.merge(v, ov, false))
			continue
		}
		out.Content = append(out.Content, k, v)
	}
	for i := 0; i+1 < len(over.Content); i += 2 {
		k := over.Content[i]
		if bk, _ := mappingPair(base, k.Value); bk != nil && (!top || k.Value != "abstract") {
			continue // merged in the loop above
		}
		out.Content = append(out.Content, k, over.Content[i+1])
	}
	return out
}

func mappingPair(m *yaml.Node, key string) (k, v *yaml.Node) {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i], m.Content[i+1]
		}
	}
	return nil, nil
}

func mappingValue(m *yaml.Node, key string) *yaml.Node {
	_, v := mappingPair(m, key)
	return v
}

// resolveEntry merges, decodes, validates and compiles one definition.
func (l *loader) resolveEntry(id string) *Entry {
	src := l.sources[id]
	tree := l.mergedTree(id, nil)
	if tree == nil {
		return nil
	}
	dec := &strictDecoder{format: &workerFormat, origin: l.origin, positions: map[string]*yaml.Node{}}
	var def meshtype.Definition
	dec.decode(tree, reflect.ValueOf(&def).Elem(), "")
	if len(dec.errs) > 0 {
		l.errs = append(l.errs, dec.errs...)
		return nil
	}
	v := &validator{fsys: l.fsys, origin: l.origin, positions: dec.positions, root: src.root, file: src.file}
	v.validate(&def)
	if len(v.errs) > 0 {
		l.errs = append(l.errs, v.errs...)
		return nil
	}
	g, err := gate.Compile(&def)
	if err != nil {
		var ce *gate.CompileError
		if errors.As(err, &ce) {
			v.fail(ce.Path, "%s", ce.Msg)
		} else {
			v.fail("", "%v", err)
		}
		l.errs = append(l.errs, v.errs...)
		return nil
	}
	e := &Entry{Definition: def, File: src.file, Hash: hashDefinition(&def), Gate: g}
	if def.Agent != nil && def.Agent.SystemPrompt != "" {
		b, err := fs.ReadFile(l.fsys, def.Agent.SystemPrompt)
		if err != nil {
			v.fail("agent.system_prompt", "agent.system_prompt: %v", err)
			l.errs = append(l.errs, v.errs...)
			return nil
		}
		e.SystemPrompt = string(b)
	}
	return e
}

func hashDefinition(def *meshtype.Definition) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if err := enc.Encode(def); err != nil {
		panic("workerdef: definition does not encode: " + err.Error())
	}
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:])
}

// cleanPromptPath reports whether p is a path inside the catalog.
func cleanPromptPath(p string) bool {
	return fs.ValidPath(p) && path.Clean(p) == p
}

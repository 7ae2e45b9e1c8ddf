package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
)

// store holds sessions as the real CLI does: one JSONL transcript per
// session under $HOME/.claude/projects/<project>/.
type store struct {
	root string
}

func newStore() (*store, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, fmt.Errorf("finding the home directory for sessions: %w", err)
	}
	return &store{root: filepath.Join(home, ".claude", "projects")}, nil
}

// projectDir is the directory of cwd's sessions: the path with every
// character that is not a letter or digit replaced by "-", so /workspace/repo
// is -workspace-repo.
func (s *store) projectDir(cwd string) string {
	name := []byte(cwd)
	for i, c := range name {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			name[i] = '-'
		}
	}
	return filepath.Join(s.root, string(name))
}

// path is where a new session of cwd is written.
func (s *store) path(cwd, id string) string {
	return filepath.Join(s.projectDir(cwd), id+".jsonl")
}

// find returns the transcript of session id: cwd's project first, then any
// other project. Only UUIDs name sessions here, which also keeps the id out
// of path tricks.
func (s *store) find(cwd, id string) (string, bool) {
	if !uuidRE.MatchString(id) {
		return "", false
	}
	if p := s.path(cwd, id); exists(p) {
		return p, true
	}
	matches, _ := filepath.Glob(filepath.Join(s.root, "*", id+".jsonl"))
	if len(matches) == 0 {
		return "", false
	}
	return matches[0], true
}

// latest returns the most recently written session of cwd, for --continue.
func (s *store) latest(cwd string) (id, path string, ok bool) {
	entries, err := os.ReadDir(s.projectDir(cwd))
	if err != nil {
		return "", "", false
	}
	var newest time.Time
	for _, e := range entries {
		name, isSession := strings.CutSuffix(e.Name(), ".jsonl")
		info, err := e.Info()
		if !isSession || !uuidRE.MatchString(name) || err != nil {
			continue
		}
		if !ok || info.ModTime().After(newest) {
			id, path, ok, newest = name, filepath.Join(s.projectDir(cwd), e.Name()), true, info.ModTime()
		}
	}
	return id, path, ok
}

// turns counts the turns of a transcript (one line each).
func (s *store) turns(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte("\n"))
}

// transcriptLine is one turn of a session: the prompt that started it, in
// the shape of the real transcripts' user entries.
type transcriptLine struct {
	Type       string            `json:"type"`
	Message    transcriptMessage `json:"message"`
	UUID       string            `json:"uuid"`
	ParentUUID *string           `json:"parentUuid"`
	SessionID  string            `json:"sessionId"`
	Cwd        string            `json:"cwd"`
	Timestamp  string            `json:"timestamp"`
	Version    string            `json:"version"`
}

type transcriptMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// appendTurn adds a turn to the transcript at path, creating it.
func (s *store) appendTurn(path, sessionID, cwd, prompt string) error {
	line, err := json.Marshal(transcriptLine{
		Type: "user", Message: transcriptMessage{Role: "user", Content: prompt},
		UUID: uuid.NewString(), SessionID: sessionID, Cwd: cwd, Timestamp: timestamp(), Version: version,
	})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("saving the session: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("saving the session: %w", err)
	}
	_, werr := f.Write(append(line, '\n'))
	return errors.Join(werr, f.Close())
}

// fork copies the transcript at from to a new session's transcript.
func (s *store) fork(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
		return err
	}
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(dst)
	_, cerr := w.ReadFrom(src)
	return errors.Join(cerr, w.Flush(), dst.Close())
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Package session remembers mesh-exec's agent sessions: which repository and
// backend each belongs to, so a resume always runs where the session was
// started and with the CLI that owns it. Sessions are files on disk (a volume
// in the container), one JSON file per session written atomically, so they
// survive a restart of mesh-exec.
package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/meshwork/meshwork/pkg/meshapi"
)

// ErrNotFound is returned when no session has the id.
var ErrNotFound = errors.New("no such session")

// Session is one agent session.
type Session struct {
	ID         string    `json:"id"`
	Backend    string    `json:"backend"`
	Repository string    `json:"repository"`
	CreatedAt  time.Time `json:"created_at"`
	LastUsedAt time.Time `json:"last_used_at"`
	Runs       int       `json:"runs"`
}

// ValidID reports whether id can be a session id.
func ValidID(id string) bool { return meshapi.ValidID(id) }

// Store keeps sessions in a directory.
type Store struct {
	dir string
	mu  sync.Mutex
}

// Open opens (creating if needed) a store in dir.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the session store: %w", err)
	}
	return &Store{dir: dir}, nil
}

func (s *Store) path(id string) string { return filepath.Join(s.dir, id+".json") }

// Get returns a session.
func (s *Store) Get(id string) (Session, error) {
	if !ValidID(id) {
		return Session{}, ErrNotFound
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := os.ReadFile(s.path(id))
	if errors.Is(err, os.ErrNotExist) {
		return Session{}, ErrNotFound
	}
	if err != nil {
		return Session{}, fmt.Errorf("reading session: %w", err)
	}
	var out Session
	if err := json.Unmarshal(data, &out); err != nil {
		return Session{}, fmt.Errorf("session %s is corrupt: %w", id, err)
	}
	return out, nil
}

// Record notes a run of a session: it creates the session on first sight and
// bumps its use afterwards. The repository and backend of an existing session
// never change.
func (s *Store) Record(id, backend, repository string, now time.Time) (Session, error) {
	if !ValidID(id) {
		return Session{}, fmt.Errorf("the agent reported an invalid session id %q", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := Session{ID: id, Backend: backend, Repository: repository, CreatedAt: now}
	if data, err := os.ReadFile(s.path(id)); err == nil {
		if err := json.Unmarshal(data, &sess); err != nil {
			return Session{}, fmt.Errorf("session %s is corrupt: %w", id, err)
		}
	}
	sess.LastUsedAt = now
	sess.Runs++
	data, err := json.Marshal(sess)
	if err != nil {
		return Session{}, err
	}
	tmp, err := os.CreateTemp(s.dir, ".session-*")
	if err != nil {
		return Session{}, fmt.Errorf("saving session: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return Session{}, fmt.Errorf("saving session: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return Session{}, fmt.Errorf("saving session: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return Session{}, fmt.Errorf("saving session: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.path(id)); err != nil {
		return Session{}, fmt.Errorf("saving session: %w", err)
	}
	return sess, nil
}

package blocklist

import (
	"io/fs"
	"os"
	"time"
)

// Files is where a policy's list files are read: the file system
// natively (OSFiles), the lists its host handed it in the WebAssembly
// module (MapFiles).
type Files interface {
	ReadFile(name string) ([]byte, error)
	Stat(name string) (fs.FileInfo, error)
}

// OSFiles reads lists from the file system, paths as configured.
type OSFiles struct{}

func (OSFiles) ReadFile(name string) ([]byte, error)  { return os.ReadFile(name) }
func (OSFiles) Stat(name string) (fs.FileInfo, error) { return os.Stat(name) }

// MapFiles serves lists held in memory, by their configured names.
type MapFiles map[string][]byte

func (m MapFiles) ReadFile(name string) ([]byte, error) {
	b, ok := m[name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return b, nil
}

func (m MapFiles) Stat(name string) (fs.FileInfo, error) {
	b, ok := m[name]
	if !ok {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	return memInfo{name: name, size: int64(len(b))}, nil
}

type memInfo struct {
	name string
	size int64
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) Mode() fs.FileMode  { return 0o444 }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return false }
func (i memInfo) Sys() any           { return nil }

package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// FileStore keeps backups as files under a directory: a PersistentVolume
// Claim mounted into the run's Pod. What goes with a backup (revision,
// version, cluster ID, sha256) is a JSON file beside it, "<file>.json".
type FileStore struct {
	root   string
	volume string // the claim's name, for Location
}

const (
	metaSuffix    = ".json"
	partialPrefix = ".partial-"
)

// NewFileStore checks that root is a directory.
func NewFileStore(root, volume string) (*FileStore, error) {
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("the backup volume: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("the backup volume: %s is not a directory", root)
	}
	return &FileStore{root: root, volume: volume}, nil
}

// Location is "pvc://<claim>/<file>".
func (f *FileStore) Location(key string) string { return "pvc://" + f.volume + "/" + key }

// path maps a key into the root; keys never leave it.
func (f *FileStore) path(key string) (string, error) {
	clean := path.Clean("/" + key)
	if clean == "/" || strings.Contains(key, "..") {
		return "", fmt.Errorf("backup file %q is not a path within the volume", key)
	}
	return filepath.Join(f.root, filepath.FromSlash(clean)), nil
}

// Put writes r to a temporary file beside key and renames it into place
// only once r has ended cleanly and the data is on disk: a failure leaves
// no partial file where a backup is expected, and an earlier backup under
// key as it was.
func (f *FileStore) Put(ctx context.Context, key string, r io.Reader, meta map[string]string) (err error) {
	dst, err := f.path(key)
	if err != nil {
		return err
	}
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	tmp := filepath.Join(dir, partialPrefix+filepath.Base(dst)+"-"+hex.EncodeToString(suffix[:]))
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	defer func() {
		if err != nil {
			_ = out.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err := io.Copy(out, ctxReader{ctx, r}); err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	if err := writeJSONFile(dst+metaSuffix, meta); err != nil {
		return fmt.Errorf("write %s: %w", key+metaSuffix, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	return syncDir(dir)
}

// Tag adds kv to the file beside key.
func (f *FileStore) Tag(_ context.Context, key string, kv map[string]string) error {
	dst, err := f.path(key)
	if err != nil {
		return err
	}
	meta := map[string]string{}
	if data, err := os.ReadFile(dst + metaSuffix); err == nil {
		_ = json.Unmarshal(data, &meta)
	}
	for k, v := range kv {
		meta[k] = v
	}
	return writeJSONFile(dst+metaSuffix, meta)
}

// List returns the backups whose keys start with prefix.
func (f *FileStore) List(_ context.Context, prefix string) ([]StoredObject, error) {
	var out []StoredObject
	err := filepath.WalkDir(f.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		key := filepath.ToSlash(strings.TrimPrefix(p, f.root+string(filepath.Separator)))
		if !strings.HasPrefix(key, prefix) || strings.HasSuffix(key, metaSuffix) || strings.HasPrefix(d.Name(), partialPrefix) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, StoredObject{Key: key, Size: fi.Size(), LastModified: fi.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the backup volume: %w", err)
	}
	return out, nil
}

// Delete removes a backup and the file beside it.
func (f *FileStore) Delete(_ context.Context, key string) error {
	dst, err := f.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if err := os.Remove(dst + metaSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", key+metaSuffix, err)
	}
	return nil
}

func writeJSONFile(p string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// ctxReader stops a copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.r.Read(p)
}

// Open reads the file under key; a missing one is unusable.
func (f *FileStore) Open(_ context.Context, key string) (io.ReadCloser, error) {
	p, err := f.path(key)
	if err != nil {
		return nil, unusable(err)
	}
	file, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, unusable(fmt.Errorf("%s does not exist", f.Location(key)))
	}
	return file, err
}

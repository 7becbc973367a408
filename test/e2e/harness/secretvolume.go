package harness

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Secret volumes are laid out as the kubelet's secret volume plugin and its
// AtomicWriter (pkg/volume/util/atomic_writer.go) lay them out, because
// programs that watch or re-read their certificates depend on it:
//
//	<dir>/..2025_01_02_15_04_05.123456789/<path>  the files
//	<dir>/..data -> ..2025_01_02_15_04_05.123456789
//	<dir>/<first element of path> -> ..data/<first element of path>
//
// An update writes a new timestamped directory, points a new ..data_tmp
// symlink at it and renames that over ..data: rename(2) is atomic, so a
// reader of <dir>/<key> gets either the old or the new content, never a
// mixture, never ENOENT. Files watched by inotify see the ..data rename, not
// a write to the file.

const (
	atomicDataDir    = "..data"
	atomicNewDataDir = "..data_tmp"
	// secretDefaultMode is the API default of a Secret volume's defaultMode.
	secretDefaultMode = 0o644
)

// fileProjection is one file of a volume's payload.
type fileProjection struct {
	data []byte
	mode os.FileMode
}

func payloadEqual(a, b map[string]fileProjection) bool {
	if len(a) != len(b) {
		return false
	}
	for p, fa := range a {
		fb, ok := b[p]
		if !ok || fa.mode != fb.mode || !bytes.Equal(fa.data, fb.data) {
			return false
		}
	}
	return true
}

// secretVolume is one Secret volume of a Pod, owned by its pod worker.
type secretVolume struct {
	name string // the volume's name
	dir  string // host directory, the mount point
	src  corev1.SecretVolumeSource
	// written: the first payload is on disk, the volume is mounted.
	written bool
	current map[string]fileProjection
	// stale are timestamped directories superseded by an update. They are
	// removed at the next refresh, a period later, rather than at once as
	// the kubelet does: a reader that resolved ..data just before the
	// rename would otherwise, rarely, find its file gone.
	stale    []string
	reported string // last error logged, to log it once
}

// secretData is what a Secret's data holds once the API server has merged
// stringData in: the harness store keeps Secrets as written.
func secretData(obj Object) (map[string][]byte, error) {
	var secret corev1.Secret
	if err := json.Unmarshal(mustJSON(obj), &secret); err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(secret.Data)+len(secret.StringData))
	for k, v := range secret.Data {
		out[k] = v
	}
	for k, v := range secret.StringData {
		out[k] = []byte(v)
	}
	return out, nil
}

// secretPayload is the kubelet's MakePayload: every key as a file with
// defaultMode, or only the items, each at its path with its own mode. An
// optional Secret that does not exist is an empty payload (which empties a
// volume whose optional Secret is deleted, as on a node); a missing key of
// an item is skipped when optional and an error otherwise.
func secretPayload(api *APIServer, namespace string, src *corev1.SecretVolumeSource) (map[string]fileProjection, error) {
	optional := src.Optional != nil && *src.Optional
	data := map[string][]byte{}
	obj, ok := api.Get(Ref{Type: TypeSecret, Namespace: namespace, Name: src.SecretName})
	switch {
	case ok:
		d, err := secretData(obj)
		if err != nil {
			return nil, fmt.Errorf("secret %q: %w", src.SecretName, err)
		}
		data = d
	case !optional:
		return nil, fmt.Errorf("secret %q not found", src.SecretName)
	}
	mode := os.FileMode(secretDefaultMode)
	if src.DefaultMode != nil {
		mode = os.FileMode(*src.DefaultMode) & os.ModePerm
	}
	payload := map[string]fileProjection{}
	if len(src.Items) == 0 {
		for k, v := range data {
			payload[k] = fileProjection{data: v, mode: mode}
		}
		return payload, nil
	}
	for _, it := range src.Items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("secret %q: references non-existent secret key: %s", src.SecretName, it.Key)
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode) & os.ModePerm
		}
		payload[it.Path] = fileProjection{data: v, mode: m}
	}
	return payload, nil
}

// validPayloadPath is the AtomicWriter's check of a file's path: relative,
// without "..", not starting with ".." (the writer's own names).
func validPayloadPath(p string) error {
	if p == "" {
		return errors.New("invalid path: must not be empty")
	}
	if path.IsAbs(p) {
		return fmt.Errorf("invalid path: must be relative path: %s", p)
	}
	items := strings.Split(p, "/")
	for _, item := range items {
		if item == ".." {
			return fmt.Errorf("invalid path: must not contain '..': %s", p)
		}
	}
	if strings.HasPrefix(items[0], "..") && len(items[0]) > 2 {
		return fmt.Errorf("invalid path: must not start with '..': %s", p)
	}
	return nil
}

// writeAtomic publishes payload in dir as the AtomicWriter does and returns
// the timestamped directory it superseded ("" for the first write). On error
// the volume is left as it was.
func writeAtomic(dir string, payload map[string]fileProjection) (stale string, err error) {
	clean := make(map[string]fileProjection, len(payload))
	visible := map[string]bool{}
	for p, f := range payload {
		if err := validPayloadPath(p); err != nil {
			return "", err
		}
		p = path.Clean(p)
		clean[p] = f
		visible[strings.SplitN(p, "/", 2)[0]] = true
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	dataLink := filepath.Join(dir, atomicDataDir)
	old, err := os.Readlink(dataLink)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	ts, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return "", err
	}
	published := false
	defer func() {
		if !published {
			_ = os.RemoveAll(ts)
		}
	}()
	if err := os.Chmod(ts, 0o755); err != nil {
		return "", err
	}
	for p, f := range clean {
		full := filepath.Join(ts, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(full, f.data, f.mode); err != nil {
			return "", err
		}
		// WriteFile's mode is subject to the umask.
		if err := os.Chmod(full, f.mode); err != nil {
			return "", err
		}
	}
	tmpLink := filepath.Join(dir, atomicNewDataDir)
	if err := os.Remove(tmpLink); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err := os.Symlink(filepath.Base(ts), tmpLink); err != nil {
		return "", err
	}
	if err := os.Rename(tmpLink, dataLink); err != nil {
		return "", err
	}
	published = true
	// The user-visible names: new ones appear, the ones the payload no
	// longer has go.
	for v := range visible {
		link := filepath.Join(dir, v)
		if _, err := os.Lstat(link); errors.Is(err, fs.ErrNotExist) {
			if err := os.Symlink(filepath.Join(atomicDataDir, v), link); err != nil {
				return "", err
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, "..") || visible[n] || e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		if target, err := os.Readlink(filepath.Join(dir, n)); err == nil && strings.HasPrefix(target, atomicDataDir+string(filepath.Separator)) {
			if err := os.Remove(filepath.Join(dir, n)); err != nil {
				return "", err
			}
		}
	}
	if old == "" {
		return "", nil
	}
	return filepath.Join(dir, old), nil
}

// copyTree copies a file or a directory tree, keeping modes: what a subPath
// mount of a Secret volume holds, the content at the container's start.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(target, data, info.Mode().Perm()); err != nil {
			return err
		}
		return os.Chmod(target, info.Mode().Perm())
	})
}
